// Package embeds3 runs an S3-compatible endpoint inside the node process, on loopback, so
// that `go run ./cmd/node` works with nothing installed. It is versitygw (embedgw) over its
// posix backend: signatures are verified, PUT checksums are verified (BadDigest), objects
// are files under a directory.
//
// Two properties of versitygw's posix backend shape its use, and an embedder must know
// them:
//
//   - While a Server runs, the process's working directory is the endpoint's object
//     directory (the backend resolves every bucket and object path relative to it, so this
//     cannot be avoided in process). Everything else in the process must use absolute
//     paths meanwhile. Close moves the working directory back to where it was at Start.
//   - Only one Server may run per process: Start returns ErrRunning while another runs.
//
// A process that cannot live with either runs an S3 server of its own (versitygw, MinIO)
// and gives its endpoint to s3io.
package embeds3

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/versity/versitygw/auth"
	"github.com/versity/versitygw/backend/meta"
	"github.com/versity/versitygw/backend/posix"
	"github.com/versity/versitygw/embedgw"

	"github.com/streamtier/streamtier/netport"
	"github.com/streamtier/streamtier/s3io"
)

// DefaultRegion is the region the embedded endpoint signs for unless told otherwise.
const DefaultRegion = "us-east-1"

// healthPath answers 200 without authentication once the gateway serves.
const healthPath = "/healthz"

// startTimeout bounds how long Start waits for the gateway to answer.
const startTimeout = 30 * time.Second

// Options configure the embedded endpoint; zero values get defaults.
type Options struct {
	Dir       string // where objects live (created if missing); required
	Addr      string // loopback host:port to listen on; empty picks a free port on 127.0.0.1
	AccessKey string // root credentials; empty draws random ones
	SecretKey string
	Region    string // DefaultRegion when empty
}

// running guards the one instance a process may hold: a second posix backend would move
// the working directory under the first.
var running atomic.Bool

// ErrRunning is returned by Start and StartWith while another Server runs in the process.
var ErrRunning = errors.New("embedded s3: already running in this process (one instance per process: the posix backend holds the working directory)")

// Server is a running embedded endpoint.
type Server struct {
	Endpoint  string // http://host:port
	Region    string
	AccessKey string
	SecretKey string
	Dir       string // absolute data directory

	cancel  context.CancelFunc
	prevWD  string // the working directory before Start, restored by Close
	rootWD  string // the working directory the backend moved to
	done    chan error
	closed  sync.Once
	stopped chan struct{} // closed when the gateway returns, for whatever reason
	runErr  error         // what it returned; set before stopped is closed
}

// Stopped is closed when the gateway has stopped: after Close, or on its own when it failed
// (a listener that died, descriptors exhausted). StopErr then says why.
func (s *Server) Stopped() <-chan struct{} { return s.stopped }

// StopErr is what the gateway returned once Stopped is closed (nil before).
func (s *Server) StopErr() error {
	select {
	case <-s.stopped:
		return s.runErr
	default:
		return nil
	}
}

// Start runs the endpoint with defaults over dir: a free loopback port, random credentials.
// Until Close, the process's working directory is under dir and no other Server may start
// (ErrRunning): see the package documentation.
func Start(ctx context.Context, dir string) (*Server, error) {
	return StartWith(ctx, Options{Dir: dir})
}

// StartWith runs the endpoint and returns once it answers requests. The context bounds
// the start only; Close stops the endpoint. Like Start, it moves the process's working
// directory until Close and refuses a second instance (ErrRunning).
func StartWith(ctx context.Context, o Options) (*Server, error) {
	if o.Dir == "" {
		return nil, errors.New("embedded s3: data directory: required")
	}
	if !running.CompareAndSwap(false, true) {
		return nil, ErrRunning
	}
	started := false
	defer func() {
		if !started {
			running.Store(false)
		}
	}()
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("embedded s3: data directory %q: %w", o.Dir, err)
	}
	if o.Addr == "" {
		if o.Addr, err = netport.Free("127.0.0.1"); err != nil {
			return nil, fmt.Errorf("embedded s3: %w", err)
		}
	} else if err := checkLoopback(o.Addr); err != nil {
		return nil, err
	}
	if (o.AccessKey == "") != (o.SecretKey == "") {
		return nil, errors.New("embedded s3: access key and secret key: set both or neither")
	}
	if o.AccessKey == "" {
		o.AccessKey, o.SecretKey = "streamtier-"+randomHex(6), randomHex(20)
	}
	if o.Region == "" {
		o.Region = DefaultRegion
	}
	root, sidecar := filepath.Join(dir, "data"), filepath.Join(dir, "meta")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("embedded s3: %w", err)
	}
	var ms meta.MetadataStorer = meta.XattrMeta{}
	opts := posix.PosixOpts{Concurrency: 1000}
	if err := (meta.XattrMeta{}).Test(root); err != nil {
		// No extended attributes on this file system: keep metadata in a side directory.
		if err := os.MkdirAll(sidecar, 0o755); err != nil {
			return nil, fmt.Errorf("embedded s3: %w", err)
		}
		sc, err := meta.NewSideCar(sidecar)
		if err != nil {
			return nil, fmt.Errorf("embedded s3: metadata directory: %w", err)
		}
		ms, opts.SideCarDir = sc, sidecar
	}
	prevWD, err := os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("embedded s3: working directory: %w", err)
	}
	be, err := posix.New(root, ms, opts) // changes the working directory to root
	if err != nil {
		return nil, errors.Join(fmt.Errorf("embedded s3: posix backend: %w", err), restoreWD(root, prevWD))
	}
	cfg := &embedgw.Config{
		RootUserAccess:    o.AccessKey,
		RootUserSecret:    o.SecretKey,
		Region:            o.Region,
		Ports:             []string{o.Addr},
		MaxConnections:    10_000,
		MaxRequests:       10_000,
		MultipartMaxParts: 10_000,
		HealthPath:        healthPath,
		Quiet:             true,
		// No keep-alive: the gateway's shutdown waits (10 s) for idle keep-alive
		// connections, which the S3 client of a node keeps open, so Close would stall.
		// A new loopback connection per request costs next to nothing.
		KeepAlive: false,
	}
	// The single-account IAM the gateway would build itself, given here so that it does
	// not announce "No IAM service configured" on the process's standard output (which
	// would corrupt the JSON the node's commands print there).
	cfg.IAMService = auth.NewIAMServiceSingle(cfg.IamOpts().RootAccount)
	runCtx, cancel := context.WithCancel(context.Background())
	s := &Server{
		Endpoint: "http://" + o.Addr, Region: o.Region, AccessKey: o.AccessKey, SecretKey: o.SecretKey, Dir: dir,
		cancel: cancel, done: make(chan error, 1), stopped: make(chan struct{}), prevWD: prevWD, rootWD: root,
	}
	go func() { // owned by s: Close ends it
		err := embedgw.RunVersityGW(runCtx, be, cfg)
		s.runErr = err
		close(s.stopped)
		s.done <- err
	}()
	started = true // from here Close releases the instance
	if err := s.waitHealthy(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// waitHealthy polls the health path until it answers, the gateway stops or ctx ends.
// Nothing signals that the listener is up, so polling it is the way to know.
func (s *Server) waitHealthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	for wait := 2 * time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.Endpoint+healthPath, nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-s.done:
			s.done <- err // Close reads it again
			return fmt.Errorf("embedded s3: gateway stopped during start: %w", err)
		case <-ctx.Done():
			return fmt.Errorf("embedded s3: no answer on %s: %w", s.Endpoint, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// Config is an s3io configuration for bucket on this endpoint (path-style, its keys). Its
// client keeps no idle connection (the gateway closes each one after its answer): a
// connection dialed for a request canceled meanwhile would otherwise stay open unused and
// hold Close for the gateway's 10 s shutdown deadline.
func (s *Server) Config(bucket string) s3io.Config {
	return s3io.Config{Endpoint: s.Endpoint, Region: s.Region, Bucket: bucket, PathStyle: true, AccessKey: s.AccessKey, SecretKey: s.SecretKey,
		DisableKeepAlives: true}
}

// Close stops the endpoint and waits for it; objects stay in the directory. It moves the
// process's working directory back to where it was at Start, unless something else in the
// process moved it meanwhile.
func (s *Server) Close() error {
	s.cancel()
	err := <-s.done
	s.done <- err
	var wdErr error
	s.closed.Do(func() {
		wdErr = restoreWD(s.rootWD, s.prevWD)
		running.Store(false)
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		return errors.Join(fmt.Errorf("embedded s3: %w", err), wdErr)
	}
	return wdErr
}

// restoreWD moves the working directory back to prev if it is still root (where the posix
// backend moved it).
func restoreWD(root, prev string) error {
	wd, err := os.Getwd()
	if err != nil || wd != root {
		return nil // moved by someone else, or gone: not ours to change
	}
	if err := os.Chdir(prev); err != nil {
		return fmt.Errorf("embedded s3: restore the working directory %s: %w", prev, err)
	}
	return nil
}

// checkLoopback refuses listen addresses that are not loopback: the endpoint has one
// root account and is meant for this host only.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("embedded s3: listen address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("embedded s3: listen address %q: only loopback addresses are allowed", addr)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
