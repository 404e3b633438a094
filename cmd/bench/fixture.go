package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/backends"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/nodeconfig"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3shape"
)

// commonFlags are the flags every subcommand takes: node settings, an external S3
// endpoint, the node's log level and the bound on the whole run.
type commonFlags struct {
	settings   settingList
	s3Endpoint string
	s3Bucket   string
	logLevel   string
	timeout    time.Duration
	s3Latency  time.Duration // time to first byte added per S3 request (the shaping proxy)
	s3ConnRate rateFlag      // bytes/s per S3 connection, each direction (the shaping proxy)
	realistic  bool          // the preset: 40 ms and 64 MB/s unless given
	cpuProfile string        // file name prefix of each counted round's CPU profiles
}

// The --realistic preset: S3 as a client in the same region sees it, roughly: tens of
// milliseconds to the first byte of an answer, tens of MB/s on one connection.
const (
	realisticLatency  = 40 * time.Millisecond
	realisticConnRate = 64_000_000
)

// shape is the proxy configuration the flags ask for (the preset filling what is not given).
func (c commonFlags) shape() s3shape.Config {
	cfg := s3shape.Config{Latency: c.s3Latency, ConnRate: int64(c.s3ConnRate)}
	if c.realistic {
		if cfg.Latency == 0 {
			cfg.Latency = realisticLatency
		}
		if cfg.ConnRate == 0 {
			cfg.ConnRate = realisticConnRate
		}
	}
	return cfg
}

func (c *commonFlags) register(fs *flag.FlagSet) {
	fs.Var(&c.settings, "set", "a node setting `name=value` (repeatable), as in nodeconfig: persist_interval=200ms, etcd_endpoints=..., s3_access_key=...")
	fs.StringVar(&c.s3Endpoint, "s3-endpoint", "", "an external S3 endpoint URL instead of the embedded one (keys from --set s3_access_key=... or STREAMTIER_S3_ACCESS_KEY)")
	fs.StringVar(&c.s3Bucket, "s3-bucket", "", "the bucket on the external endpoint (it must exist)")
	fs.StringVar(&c.logLevel, "log-level", "warn", "the node's log level on stderr (debug, info, warn, error)")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Minute, "bound on the whole benchmark")
	fs.DurationVar(&c.s3Latency, "s3-latency", 0, "time to first byte added to every S3 request, by a shaping proxy in front of the endpoint that the node and the baseline both use")
	fs.Var(&c.s3ConnRate, "s3-conn-rate", "bytes/s each S3 connection carries, each direction, through the shaping proxy (\"64MB/s\"; 0: unlimited)")
	fs.StringVar(&c.cpuProfile, "cpu-profile", "", "write a CPU profile of each side of each counted round to `PREFIX`-node-rN.pprof and PREFIX-raw-rN.pprof (where a subcommand supports it: upload, read)")
	fs.BoolVar(&c.realistic, "realistic", false, "shape S3 as a nearby real one: --s3-latency 40ms and --s3-conn-rate 64MB/s unless given")
}

// settingList collects repeated --set name=value flags.
type settingList map[string]string

func (l *settingList) String() string { return fmt.Sprint(map[string]string(*l)) }

func (l *settingList) Set(v string) error {
	name, value, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return fmt.Errorf("%q: want name=value", v)
	}
	if *l == nil {
		*l = settingList{}
	}
	(*l)[strings.ReplaceAll(name, "-", "_")] = value
	return nil
}

// parseFlags parses a subcommand's flags; errors other than -h are usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	return nil
}

// fixture is what every benchmark runs on: a temporary directory of its own, the node's
// backends opened as `node run` opens them (embedded etcd and S3 under the directory unless
// settings name external ones) and a node started on them. close removes all of it.
type fixture struct {
	dir  string // the benchmark's temporary directory (data dir and local logs under it)
	wd   string // the working directory at start, restored by close (the embedded S3 moves it)
	s    nodeconfig.Settings
	b    *backends.Backends
	node *actors.Node
	// proxy shapes every S3 request of the node and the baselines (nil: none); shaping
	// says how, for the report's header.
	proxy   *s3shape.Proxy
	shaping string
	log     zerolog.Logger
	errw    io.Writer // stderr behind a lock: the node's goroutines log to it concurrently
}

// lockedWriter serialises writes to w (a test's bytes.Buffer is not safe for concurrent
// writes; the node's actors log from several goroutines).
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// startFixture resolves the node settings (the benchmark's defaults, overridden by --set and
// STREAMTIER_ variables), opens the backends and starts the node.
func startFixture(ctx context.Context, c commonFlags, defaults map[string]string, stderr io.Writer) (*fixture, error) {
	level, err := zerolog.ParseLevel(c.logLevel)
	if err != nil {
		return nil, fmt.Errorf("%w: --log-level %q: %v", errUsage, c.logLevel, err)
	}
	dir, err := os.MkdirTemp("", "stbench-")
	if err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	errw := &lockedWriter{w: stderr}
	f := &fixture{dir: dir, errw: errw, log: zerolog.New(zerolog.ConsoleWriter{Out: errw, TimeFormat: "15:04:05.000"}).Level(level).With().Timestamp().Logger()}
	ok := false
	defer func() {
		if !ok {
			f.close()
		}
	}()
	flags := map[string]string{"data_dir": filepath.Join(dir, "data")}
	for k, v := range defaults {
		flags[k] = v
	}
	if c.s3Endpoint != "" {
		flags["s3_endpoint"] = c.s3Endpoint
	}
	if c.s3Bucket != "" {
		flags["s3_bucket"] = c.s3Bucket
	}
	for k, v := range c.settings {
		flags[k] = v
	}
	if f.wd, err = os.Getwd(); err != nil {
		return nil, fmt.Errorf("working directory: %w", err)
	}
	if f.s, err = nodeconfig.Resolve(nodeconfig.ModeRun, nodeconfig.Sources{Flags: flags, Env: os.Environ(), Dir: f.wd}); err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if err := os.MkdirAll(f.s.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	lock, err := backends.Lock(f.s.DataDir)
	if err != nil {
		return nil, err
	}
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if f.b, err = backends.Open(startCtx, f.s, lock); err != nil {
		lock.Unlock()
		return nil, err
	}
	if shape := c.shape(); shape != (s3shape.Config{}) {
		if err := f.shapeS3(startCtx, shape); err != nil {
			return nil, err
		}
	}
	if f.node, err = actors.Start(startCtx, f.s.NodeConfig(f.log), f.b.Store, f.b.Meta); err != nil {
		return nil, err
	}
	ok = true
	return f, nil
}

// shapeS3 starts the shaping proxy in front of the S3 endpoint (the embedded one, or the
// external one) and replaces the backends' store with one that goes through it, before the
// node starts: the node and every baseline then use the same shaped endpoint.
func (f *fixture) shapeS3(ctx context.Context, shape s3shape.Config) error {
	cfg := f.s.S3Config()
	if f.b.S3 != nil {
		cfg = f.b.S3.Config(nodeconfig.EmbeddedBucket)
		cfg.RequestTimeout, cfg.TransferTimeout = f.s.S3RequestTimeout, f.s.S3TransferTimeout
		cfg.MaxConns = f.s.S3MaxConns()
	}
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%w: the S3 endpoint %q cannot be shaped: %v", errUsage, cfg.Endpoint, err)
	}
	if u.Scheme != "http" {
		return fmt.Errorf("%w: the S3 endpoint %s: the shaping proxy forwards plain http only", errUsage, cfg.Endpoint)
	}
	if f.proxy, err = s3shape.Start(u.Host, shape); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	u.Host = f.proxy.Addr()
	cfg.Endpoint = u.String()
	cfg.KeyPrefix = f.b.KeyPrefix
	store, err := s3io.NewStore(ctx, cfg)
	if err != nil {
		return err
	}
	f.b.Store = store
	if err := f.b.ProbeS3(ctx); err != nil {
		return fmt.Errorf("through the shaping proxy: %w", err)
	}
	rate := "unlimited"
	if shape.ConnRate > 0 {
		rate = nodeconfig.FormatSize(float64(shape.ConnRate)) + "/s"
	}
	f.shaping = fmt.Sprintf("S3 shaped: %v to first byte, %s per connection each way", shape.Latency, rate)
	return nil
}

// logDir is a new directory for a stream's local log under the fixture's directory.
func (f *fixture) logDir(name string) string { return filepath.Join(f.dir, "logs", name) }

// stopNode stops the node (every stream with it); the local logs may be closed after it.
// A second call does nothing.
func (f *fixture) stopNode() error {
	if f.node == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := f.node.Stop(ctx)
	f.node = nil
	if err != nil {
		return fmt.Errorf("stop node: %w", err)
	}
	return nil
}

// close stops the node and the backends and removes the temporary directory.
func (f *fixture) close() error {
	var errs []error
	if err := f.stopNode(); err != nil {
		errs = append(errs, err)
	}
	if f.proxy != nil {
		if err := f.proxy.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, fmt.Errorf("shaping proxy: %w", err))
		}
	}
	if f.b != nil {
		if err := f.b.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if f.wd != "" {
		if err := os.Chdir(f.wd); err != nil {
			errs = append(errs, fmt.Errorf("back to %s: %w", f.wd, err))
		}
	}
	if err := os.RemoveAll(f.dir); err != nil {
		errs = append(errs, fmt.Errorf("remove %s: %w", f.dir, err))
	}
	return errors.Join(errs...)
}

// header prints the first lines of a report: what ran, on what, when.
func (f *fixture) header(w io.Writer, what string) {
	where := f.b.Describe()
	if f.shaping != "" {
		where += " | " + f.shaping
	}
	fmt.Fprintf(w, "streamtier bench %s | %s | %d cores, %s, %s/%s, %s | %s\n", what, time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		runtime.NumCPU(), cpuModel(), runtime.GOOS, runtime.GOARCH, runtime.Version(), where)
}

// cpuModel is the processor's model name from /proc/cpuinfo, or "cpu unknown".
func cpuModel() string {
	fh, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "cpu unknown"
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "cpu unknown"
}

// sizeFlag is a byte count flag read as the node's settings are ("2GiB", "64MiB", "4096").
type sizeFlag uint64

func (s *sizeFlag) String() string { return nodeconfig.FormatSize(float64(*s)) }

func (s *sizeFlag) Set(v string) error {
	n, err := nodeconfig.ParseSize(v)
	if err != nil {
		return err
	}
	*s = sizeFlag(n)
	return nil
}

// rateFlag is a bytes-per-second flag ("20MB/s").
type rateFlag int64

func (r *rateFlag) String() string { return nodeconfig.FormatSize(float64(*r)) + "/s" }

func (r *rateFlag) Set(v string) error {
	n, err := nodeconfig.ParseRate(v)
	if err != nil {
		return err
	}
	*r = rateFlag(n)
	return nil
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// streamPrefix is the S3 key prefix of a stream's objects on the fixture's bucket.
func streamPrefix(f *fixture, id string) string { return manifest.StreamPrefix(f.b.KeyPrefix, id) }
