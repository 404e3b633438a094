// Package etcdcluster runs a three-member (or n-member) etcd cluster embedded in the test
// process, on loopback ports that stay the same when a member or the whole cluster is
// stopped and started again on its data directories, so that a client given the
// endpoints once (the node under test) finds it again.
package etcdcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/streamtier/streamtier/netport"
)

// Options configure the cluster.
type Options struct {
	Members      int           // default 3
	Tick         time.Duration // raft heartbeat, default 100 ms
	Election     time.Duration // default 10 ticks
	ReadyTimeout time.Duration // bound on a member (or the cluster) becoming ready, default 30 s
	Logger       *zap.Logger   // etcd's logs; nil discards them
}

type member struct {
	name       string
	dir        string
	client     string // host:port
	peer       string
	etcd       *embed.Etcd // nil while stopped
	everActive bool
}

// Cluster is a running (or partly stopped) embedded etcd cluster.
type Cluster struct {
	opts    Options
	initial string
	mu      sync.Mutex // guards members' etcd fields
	members []*member
}

// Start creates a new cluster in dir (one data directory per member) and waits until every
// member is ready or ctx ends.
func Start(ctx context.Context, dir string, o Options) (*Cluster, error) {
	if o.Members == 0 {
		o.Members = 3
	}
	if o.Tick == 0 {
		o.Tick = 100 * time.Millisecond
	}
	if o.Election == 0 {
		o.Election = 10 * o.Tick
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	addrs, err := freePorts(2 * o.Members)
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: o}
	var peers []string
	for i := range o.Members {
		m := &member{name: fmt.Sprintf("m%d", i), dir: filepath.Join(dir, fmt.Sprintf("m%d", i)), client: addrs[2*i], peer: addrs[2*i+1]}
		c.members = append(c.members, m)
		peers = append(peers, m.name+"=http://"+m.peer)
	}
	c.initial = strings.Join(peers, ",")
	if err := c.StartAll(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// freePorts draws n distinct free loopback ports, holding each until all are drawn. A
// member restarts on the ports it was given once, so they come from below the kernel's
// ephemeral range (netport), where nobody else's bind(0) takes them while it is down.
func freePorts(n int) ([]string, error) {
	var out []string
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for range n {
		l, err := netport.Listen("127.0.0.1")
		if err != nil {
			return nil, fmt.Errorf("etcdcluster: free port: %w", err)
		}
		held = append(held, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// Endpoints are the client URLs of every member.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.members {
		out = append(out, "http://"+m.client)
	}
	return out
}

// Members is the number of members.
func (c *Cluster) Members() int { return len(c.members) }

// Running reports which members run.
func (c *Cluster) Running() []bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]bool, len(c.members))
	for i, m := range c.members {
		out[i] = m.etcd != nil
	}
	return out
}

func (c *Cluster) config(m *member) *embed.Config {
	ec := embed.NewConfig()
	ec.Name = m.name
	ec.Dir = m.dir
	curl := url.URL{Scheme: "http", Host: m.client}
	purl := url.URL{Scheme: "http", Host: m.peer}
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{curl}, []url.URL{curl}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{purl}, []url.URL{purl}
	ec.InitialCluster = c.initial
	ec.InitialClusterToken = "chaos"
	ec.ClusterState = embed.ClusterStateFlagNew // ignored once the member has data
	ec.TickMs = uint(c.opts.Tick / time.Millisecond)
	ec.ElectionMs = uint(c.opts.Election / time.Millisecond)
	ec.UnsafeNoFsync = true // the machine does not crash under the soak; the process keeps the page cache
	ec.EnableGRPCGateway = false
	ec.ListenMetricsUrls = nil
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(c.opts.Logger)
	ec.LogLevel = "error"
	return ec
}

// launch starts member m's server without waiting for it to be ready (c.mu held).
func (c *Cluster) launch(m *member) error {
	if m.etcd != nil {
		return nil
	}
	if err := os.MkdirAll(m.dir, 0o700); err != nil {
		return fmt.Errorf("etcdcluster: member %s: %w", m.name, err)
	}
	var err error
	for attempt := 0; attempt < 20; attempt++ { // a port just released may linger briefly
		var e *embed.Etcd
		if e, err = embed.StartEtcd(c.config(m)); err == nil {
			m.etcd, m.everActive = e, true
			return nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("etcdcluster: start member %s (client %s, peer %s): %w", m.name, m.client, m.peer, err)
}

// await waits until e serves, fails or ctx ends.
func (c *Cluster) await(ctx context.Context, m *member, e *embed.Etcd) error {
	timer := time.NewTimer(c.opts.ReadyTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("etcdcluster: member %s failed before ready: %w", m.name, err)
	case <-timer.C:
		return fmt.Errorf("etcdcluster: member %s not ready after %v", m.name, c.opts.ReadyTimeout)
	case <-ctx.Done():
		return fmt.Errorf("etcdcluster: member %s: %w", m.name, ctx.Err())
	}
}

// StartMember starts member i again (on its data directory and ports) and waits until it
// is ready; a running member is left alone. While too few members run for a quorum, it
// does not wait: the member becomes ready once enough others are back (StartAll waits).
func (c *Cluster) StartMember(ctx context.Context, i int) error {
	c.mu.Lock()
	m := c.members[i]
	err := c.launch(m)
	e := m.etcd
	running := 0
	for _, o := range c.members {
		if o.etcd != nil {
			running++
		}
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if 2*running <= len(c.members) {
		return nil
	}
	return c.await(ctx, m, e)
}

// StartAll starts every stopped member and waits until all are ready (a member needs a
// quorum to be ready, so they start together).
func (c *Cluster) StartAll(ctx context.Context) error {
	c.mu.Lock()
	var errs []error
	started := map[*member]*embed.Etcd{}
	for _, m := range c.members {
		if err := c.launch(m); err != nil {
			errs = append(errs, err)
			continue
		}
		started[m] = m.etcd
	}
	c.mu.Unlock()
	for m, e := range started {
		if err := c.await(ctx, m, e); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// KillMember stops member i abruptly: no leadership transfer, no goodbye to its peers (as
// a killed process would), then closes its listeners. A stopped member is left alone.
func (c *Cluster) KillMember(i int) {
	c.mu.Lock()
	m := c.members[i]
	e := m.etcd
	m.etcd = nil
	c.mu.Unlock()
	if e == nil {
		return
	}
	e.Server.HardStop()
	e.Close()
}

// StopAll stops every member (abruptly, as KillMember does).
func (c *Cluster) StopAll() {
	var wg sync.WaitGroup
	for i := range c.members {
		wg.Add(1)
		go func() { // owned by StopAll, which waits for it
			defer wg.Done()
			c.KillMember(i)
		}()
	}
	wg.Wait()
}

// Close stops every member.
func (c *Cluster) Close() { c.StopAll() }
