package etcdtest

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/metadata"
)

// Proxy is a TCP proxy in front of an etcd member that can partition it from its clients:
// while partitioned, connections stay open and new ones are accepted, but no byte passes
// either way (requests hang until their deadline, as behind a dead switch). Heal lets the
// held bytes through. It stops on t.Cleanup.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	cond   *sync.Cond
	cut    bool
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// NewProxy starts a proxy in front of e's client address.
func NewProxy(t testing.TB, e *metadata.Embedded) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("etcdtest: proxy listen: %v", err)
	}
	p := &Proxy{ln: ln, target: e.ClientAddr(), conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Endpoint is the proxy's client URL.
func (p *Proxy) Endpoint() string { return "http://" + p.ln.Addr().String() }

// Client returns an etcd client through the proxy, closed on t.Cleanup (register it after
// the member's Start, so that it closes first).
func (p *Proxy) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := metadata.NewClient(ctx, metadata.ClientConfig{Endpoints: []string{p.Endpoint()}, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("etcdtest: client through the proxy: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Partition stops every byte between the clients and the member.
func (p *Proxy) Partition() {
	p.mu.Lock()
	p.cut = true
	p.mu.Unlock()
}

// Heal lets bytes pass again, the held ones first.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.cut = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			up.Close()
			return
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

// pipe copies src to dst, holding each read while the proxy is partitioned; it closes both
// ends when either fails.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		src.Close()
		dst.Close()
		p.mu.Lock()
		delete(p.conns, src)
		delete(p.conns, dst)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.cut && !p.closed {
				p.cond.Wait()
			}
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed connection: the other pipe ends too
		}
	}
}

func (p *Proxy) close() {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}
