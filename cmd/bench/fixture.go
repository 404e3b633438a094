package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
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
)

// commonFlags are the flags every subcommand takes: node settings, an external S3
// endpoint, the node's log level and the bound on the whole run.
type commonFlags struct {
	settings   settingList
	s3Endpoint string
	s3Bucket   string
	logLevel   string
	timeout    time.Duration
}

func (c *commonFlags) register(fs *flag.FlagSet) {
	fs.Var(&c.settings, "set", "a node setting `name=value` (repeatable), as in nodeconfig: persist_interval=200ms, etcd_endpoints=..., s3_access_key=...")
	fs.StringVar(&c.s3Endpoint, "s3-endpoint", "", "an external S3 endpoint URL instead of the embedded one (keys from --set s3_access_key=... or STREAMTIER_S3_ACCESS_KEY)")
	fs.StringVar(&c.s3Bucket, "s3-bucket", "", "the bucket on the external endpoint (it must exist)")
	fs.StringVar(&c.logLevel, "log-level", "warn", "the node's log level on stderr (debug, info, warn, error)")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Minute, "bound on the whole benchmark")
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
	log  zerolog.Logger
	errw io.Writer // stderr behind a lock: the node's goroutines log to it concurrently
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
	f := &fixture{dir: dir, errw: errw, log: zerolog.New(zerolog.ConsoleWriter{Out: errw, TimeFormat: time.TimeOnly}).Level(level).With().Timestamp().Logger()}
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
	if f.node, err = actors.Start(startCtx, f.s.NodeConfig(f.log), f.b.Store, f.b.Meta); err != nil {
		return nil, err
	}
	ok = true
	return f, nil
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
	fmt.Fprintf(w, "streamtier bench %s | %s | %d cores, %s, %s/%s, %s | %s\n", what, time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		runtime.NumCPU(), cpuModel(), runtime.GOOS, runtime.GOARCH, runtime.Version(), f.b.Describe())
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
