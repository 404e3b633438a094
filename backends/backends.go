// Package backends opens the etcd and the S3 bucket a node (or an operator command) works
// on: external ones as the settings name them, or embedded ones under the data directory
// (an etcd member and an S3 endpoint in this process), or, when a running node already
// holds the data directory, its embedded servers as a client through the run file the
// node writes there. It also lays out the data directory.
package backends

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/nodeconfig"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/embeds3"
)

// ErrLocked is returned by Lock when another process holds the data directory.
var ErrLocked = errors.New("in use by another process")

// EtcdDir is where the embedded etcd keeps its member data.
func EtcdDir(dataDir string) string { return filepath.Join(dataDir, "etcd") }

// S3Dir is where the embedded S3 endpoint keeps its objects (data/<bucket>/<key>).
func S3Dir(dataDir string) string { return filepath.Join(dataDir, "s3") }

// StreamDir is the default local log directory of a stream.
func StreamDir(dataDir, stream string) string { return filepath.Join(dataDir, "streams", stream) }

// RunFile is the file a running node writes with its admin URL and backend endpoints.
func RunFile(dataDir string) string { return filepath.Join(dataDir, "node.json") }

// LockFile is the file whose flock says the data directory is in use.
func LockFile(dataDir string) string { return filepath.Join(dataDir, "node.lock") }

// RunInfo is what a running node tells commands started in the same data directory: where
// its admin server listens and, for embedded backends, how to reach them. The file is
// readable by its owner only (it holds the embedded endpoint's keys).
type RunInfo struct {
	PID           int         `json:"pid"`
	NodeID        string      `json:"node_id"`
	AdminURL      string      `json:"admin_url"`
	Started       time.Time   `json:"started"`
	EtcdEndpoints []string    `json:"etcd_endpoints,omitempty"` // the embedded etcd's, when embedded
	S3            *S3Endpoint `json:"s3,omitempty"`             // the embedded S3 endpoint, when embedded
	// ClusterAddress is where peers reach the node's cluster transport (cluster mode only).
	ClusterAddress string `json:"cluster_address,omitempty"`
}

// S3Endpoint is how to reach an embedded S3 endpoint.
type S3Endpoint struct {
	Endpoint  string `json:"endpoint"`
	Region    string `json:"region"`
	Bucket    string `json:"bucket"`
	AccessKey string `json:"access_key"`
	SecretKey string `json:"secret_key"`
}

// WriteRunInfo writes the run file atomically (a temporary file renamed over it).
func WriteRunInfo(dataDir string, info RunInfo) error {
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return fmt.Errorf("run file: %w", err)
	}
	tmp := RunFile(dataDir) + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("run file: %w", err)
	}
	if err := os.Rename(tmp, RunFile(dataDir)); err != nil {
		return fmt.Errorf("run file: %w", err)
	}
	return nil
}

// ReadRunInfo reads the run file; found is false when there is none.
func ReadRunInfo(dataDir string) (info RunInfo, found bool, err error) {
	b, err := os.ReadFile(RunFile(dataDir))
	if errors.Is(err, os.ErrNotExist) {
		return RunInfo{}, false, nil
	}
	if err != nil {
		return RunInfo{}, false, fmt.Errorf("run file: %w", err)
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return RunInfo{}, false, fmt.Errorf("run file %s: %w", RunFile(dataDir), err)
	}
	return info, true, nil
}

// RemoveRunInfo removes the run file (a clean stop).
func RemoveRunInfo(dataDir string) error {
	if err := os.Remove(RunFile(dataDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("run file: %w", err)
	}
	return nil
}

// Backends are an open etcd and S3 bucket, and the embedded servers behind them if any.
type Backends struct {
	Store      *s3io.Store
	Meta       *metadata.Store
	EtcdClient *clientv3.Client
	KeyPrefix  string
	// Embedded servers this process runs (nil when external or attached).
	Etcd *metadata.Embedded
	S3   *embeds3.Server
	// Attached is set when the backends are a running node's embedded servers.
	Attached *RunInfo
	// BucketOnly: no etcd was opened (ForBucket); Meta and EtcdClient are nil.
	BucketOnly bool

	lock       *DirLock
	ownsClient bool // the etcd client is ours to close (external or attached)
}

// Watch reports, once each, an embedded server of this process that stops on its own (its
// fatal error, for example EMFILE on accept) by calling report with the server's name and
// the error, until ctx ends. It returns at once; its goroutine ends with ctx.
func (b *Backends) Watch(ctx context.Context, report func(server string, err error)) {
	if b.Etcd != nil {
		errs := b.Etcd.Err()
		go func() { // owned by the caller's ctx
			select {
			case err, ok := <-errs:
				if ok && ctx.Err() == nil {
					report("embedded etcd", fmt.Errorf("embedded etcd failed: %w", err))
				}
			case <-ctx.Done():
			}
		}()
	}
	if b.S3 != nil {
		srv := b.S3
		go func() { // owned by the caller's ctx
			select {
			case <-srv.Stopped():
				if ctx.Err() == nil {
					err := srv.StopErr()
					if err == nil {
						err = errors.New("stopped without an error")
					}
					report("embedded s3", fmt.Errorf("embedded s3 endpoint stopped: %w", err))
				}
			case <-ctx.Done():
			}
		}()
	}
}

// Describe says where the backends are, for messages.
func (b *Backends) Describe() string {
	etcd, s3 := "external etcd", "bucket "+b.Store.Bucket()
	if b.BucketOnly {
		etcd = "no etcd"
	}
	attachedEtcd := b.Attached != nil && len(b.Attached.EtcdEndpoints) > 0
	attachedS3 := b.Attached != nil && b.Attached.S3 != nil
	switch {
	case b.Etcd != nil && b.S3 != nil:
		return "embedded etcd and S3"
	case b.BucketOnly && b.S3 != nil:
		return "embedded S3, no etcd"
	case attachedEtcd && attachedS3:
		return fmt.Sprintf("the embedded etcd and S3 of node pid %d", b.Attached.PID)
	}
	switch {
	case b.Etcd != nil:
		etcd = "embedded etcd"
	case attachedEtcd:
		etcd = fmt.Sprintf("the embedded etcd of node pid %d", b.Attached.PID)
	}
	switch {
	case b.S3 != nil:
		s3 = "embedded S3"
	case attachedS3:
		s3 = fmt.Sprintf("the embedded S3 of node pid %d", b.Attached.PID)
	}
	return etcd + " and " + s3
}

// RunInfoFor fills the backend endpoints of a run file for these backends (embedded
// ones only: external ones are in the settings).
func (b *Backends) RunInfoFor(info RunInfo) RunInfo {
	if b.Etcd != nil {
		info.EtcdEndpoints = b.Etcd.Endpoints()
	}
	if b.S3 != nil {
		info.S3 = &S3Endpoint{Endpoint: b.S3.Endpoint, Region: b.S3.Region, Bucket: nodeconfig.EmbeddedBucket, AccessKey: b.S3.AccessKey, SecretKey: b.S3.SecretKey}
	}
	return info
}

// Close closes the client and stops the embedded servers, then releases the lock.
func (b *Backends) Close() error {
	var errs []error
	if b.ownsClient && b.EtcdClient != nil {
		if err := b.EtcdClient.Close(); err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, fmt.Errorf("close etcd client: %w", err))
		}
	}
	if b.Etcd != nil {
		if err := b.Etcd.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if b.S3 != nil {
		if err := b.S3.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := b.lock.Unlock(); err != nil {
		errs = append(errs, fmt.Errorf("unlock data dir: %w", err))
	}
	return errors.Join(errs...)
}

// Probe checks that both backends answer: an etcd read and an S3 list. It is the
// readiness check.
func (b *Backends) Probe(ctx context.Context) error {
	if err := b.ProbeEtcd(ctx); err != nil {
		return err
	}
	return b.ProbeS3(ctx)
}

// ProbeEtcd reads one key linearizably.
func (b *Backends) ProbeEtcd(ctx context.Context) error {
	if _, err := b.EtcdClient.Get(ctx, b.Meta.Prefix()+"/probe", clientv3.WithCountOnly()); err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	return nil
}

// ProbeS3 lists a prefix that holds nothing: one request that fails when the endpoint is
// unreachable, the credentials are refused or the bucket does not exist.
func (b *Backends) ProbeS3(ctx context.Context) error {
	err := b.Store.List(ctx, b.KeyPrefix+"/.probe/", func(s3io.ObjectInfo) error { return nil })
	if err != nil {
		return fmt.Errorf("s3 bucket %s: %w", b.Store.Bucket(), err)
	}
	return nil
}

// Open opens the backends a node runs on: external ones as s names them, embedded ones
// started in this process under s.DataDir (which must be locked by the caller's lock,
// passed in to be released by Close). ctx bounds the start.
func Open(ctx context.Context, s nodeconfig.Settings, lock *DirLock) (*Backends, error) {
	return open(ctx, s, lock, false)
}

func open(ctx context.Context, s nodeconfig.Settings, lock *DirLock, bucketOnly bool) (*Backends, error) {
	b := &Backends{lock: lock, KeyPrefix: s.KeyPrefix, BucketOnly: bucketOnly}
	if b.KeyPrefix == "" {
		b.KeyPrefix = manifest.DefaultKeyPrefix
	}
	ok := false
	defer func() {
		if !ok {
			b.lock = nil // the caller keeps its lock on failure
			b.Close()
		}
	}()
	if bucketOnly {
		// no etcd at all
	} else if s.EmbeddedEtcd() {
		e, err := metadata.StartEmbeddedConfig(ctx, metadata.EmbeddedConfig{DataDir: EtcdDir(s.DataDir)})
		if err != nil {
			return nil, err
		}
		b.Etcd, b.EtcdClient = e, e.Client()
	} else if err := b.connectEtcd(ctx, s.EtcdClientConfig()); err != nil {
		return nil, err
	}
	if !bucketOnly {
		b.Meta = metadata.NewStore(b.EtcdClient, s.EtcdPrefix)
	}

	cfg := s.S3Config()
	if s.EmbeddedS3() {
		keys, err := embeddedKeys(S3Dir(s.DataDir))
		if err != nil {
			return nil, err
		}
		srv, err := embeds3.StartWith(ctx, embeds3.Options{Dir: S3Dir(s.DataDir), AccessKey: keys.AccessKey, SecretKey: keys.SecretKey})
		if err != nil {
			return nil, err
		}
		b.S3 = srv
		cfg = srv.Config(nodeconfig.EmbeddedBucket)
		cfg.RequestTimeout, cfg.TransferTimeout = s.S3RequestTimeout, s.S3TransferTimeout
		cfg.MaxConns = s.S3MaxConns()
	}
	if err := b.openStore(ctx, cfg, s.EmbeddedS3()); err != nil {
		return nil, err
	}
	ok = true
	return b, nil
}

// Attach opens a running node's embedded backends as a client (info from its run file);
// the backends s names as external are opened directly.
func Attach(ctx context.Context, s nodeconfig.Settings, info RunInfo) (*Backends, error) {
	return attach(ctx, s, info, false)
}

func attach(ctx context.Context, s nodeconfig.Settings, info RunInfo, bucketOnly bool) (*Backends, error) {
	b := &Backends{Attached: &info, KeyPrefix: s.KeyPrefix, BucketOnly: bucketOnly}
	if b.KeyPrefix == "" {
		b.KeyPrefix = manifest.DefaultKeyPrefix
	}
	ok := false
	defer func() {
		if !ok {
			b.Close()
		}
	}()
	ec := s.EtcdClientConfig()
	if bucketOnly {
		// no etcd at all
	} else if s.EmbeddedEtcd() {
		if len(info.EtcdEndpoints) == 0 {
			return nil, fmt.Errorf("the node running on %s (pid %d) does not run an embedded etcd: give etcd_endpoints", s.DataDir, info.PID)
		}
		ec = metadata.ClientConfig{Endpoints: info.EtcdEndpoints, DialTimeout: s.EtcdDialTimeout}
	}
	if !bucketOnly {
		if err := b.connectEtcd(ctx, ec); err != nil {
			return nil, err
		}
		b.Meta = metadata.NewStore(b.EtcdClient, s.EtcdPrefix)
	}
	cfg := s.S3Config()
	if s.EmbeddedS3() {
		if info.S3 == nil {
			return nil, fmt.Errorf("the node running on %s (pid %d) does not run an embedded S3 endpoint: give s3_bucket", s.DataDir, info.PID)
		}
		cfg = s3io.Config{Endpoint: info.S3.Endpoint, Region: info.S3.Region, Bucket: info.S3.Bucket, PathStyle: true,
			AccessKey: info.S3.AccessKey, SecretKey: info.S3.SecretKey, RequestTimeout: s.S3RequestTimeout, TransferTimeout: s.S3TransferTimeout,
			MaxConns: s.S3MaxConns(), DisableKeepAlives: true} // as embeds3.Server.Config: nothing idle holds the node's stop
	}
	if err := b.openStore(ctx, cfg, false); err != nil {
		return nil, err
	}
	ok = true
	return b, nil
}

func (b *Backends) connectEtcd(ctx context.Context, c metadata.ClientConfig) error {
	cli, err := metadata.NewClient(ctx, c)
	if err != nil {
		return err
	}
	b.EtcdClient, b.ownsClient = cli, true
	return nil
}

func (b *Backends) openStore(ctx context.Context, cfg s3io.Config, ensureBucket bool) error {
	cfg.KeyPrefix = b.KeyPrefix // for the per-stream request counts
	store, err := s3io.NewStore(ctx, cfg)
	if err != nil {
		return err
	}
	b.Store = store
	if ensureBucket {
		if err := store.EnsureBucket(ctx); err != nil {
			return fmt.Errorf("embedded s3: %w", err)
		}
	}
	// A busy store (503 SlowDown, a 500) is asked again a few times: every command opens
	// its backends this way and should not fail on one answer of a loaded bucket. No answer
	// at all (a refused connection, an unknown host) is most often a wrong endpoint: said at once.
	wait := openProbeWait
	for attempt := 1; ; attempt++ {
		err := b.ProbeS3(ctx)
		if err == nil || !s3io.IsBusy(err) || attempt == openProbeAttempts {
			if err != nil && attempt > 1 {
				err = fmt.Errorf("%w (%d attempts)", err, attempt)
			}
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (%d attempts, then %v)", err, attempt, ctx.Err())
		case <-t.C:
		}
		wait *= 2
	}
}

// How often, and after what first pause (doubling), opening the backends asks a busy store
// again: 5 attempts over about 1.5 s.
const (
	openProbeAttempts = 5
	openProbeWait     = 100 * time.Millisecond
)

// keyFile holds the embedded endpoint's root keys, drawn once per data directory so that
// commands and restarts use the same account.
type keyFile struct {
	AccessKey string `json:"access_key"`
	SecretKey string `json:"secret_key"`
}

func embeddedKeys(dir string) (keyFile, error) {
	path := filepath.Join(dir, "credentials.json")
	var k keyFile
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &k); err != nil || k.AccessKey == "" || k.SecretKey == "" {
			return k, fmt.Errorf("embedded s3 credentials %s: unreadable (delete it to draw new ones): %v", path, err)
		}
		return k, nil
	case !errors.Is(err, os.ErrNotExist):
		return k, fmt.Errorf("embedded s3 credentials: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return k, fmt.Errorf("embedded s3: %w", err)
	}
	k = keyFile{AccessKey: "streamtier-" + randomHex(6), SecretKey: randomHex(20)}
	b, _ = json.Marshal(k)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return k, fmt.Errorf("embedded s3 credentials: %w", err)
	}
	return k, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// ForCommand opens the backends an operator command works on. External backends are
// opened as s names them. For embedded ones: when a node runs on the data directory (it
// holds the lock), its servers are used through its run file; otherwise this process
// takes the lock and starts the embedded servers itself over the stopped node's data.
func ForCommand(ctx context.Context, s nodeconfig.Settings) (*Backends, error) {
	return forCommand(ctx, s, false)
}

// ForBucket opens the bucket alone for a command that uses no etcd at all (--from-bucket:
// the read-only mount an auditor uses): Meta and EtcdClient are nil, and no etcd is
// contacted or started, embedded or not.
func ForBucket(ctx context.Context, s nodeconfig.Settings) (*Backends, error) {
	return forCommand(ctx, s, true)
}

func forCommand(ctx context.Context, s nodeconfig.Settings, bucketOnly bool) (*Backends, error) {
	if !s.EmbeddedS3() && (bucketOnly || !s.EmbeddedEtcd()) {
		return open(ctx, s, nil, bucketOnly)
	}
	if fi, err := os.Stat(s.DataDir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("data dir %s: no such directory (run `node` there first, or pass --data-dir or external etcd_endpoints and s3_bucket)", s.DataDir)
	}
	lock, err := Lock(s.DataDir)
	if errors.Is(err, ErrLocked) {
		info, found, rerr := ReadRunInfo(s.DataDir)
		if rerr != nil {
			return nil, rerr
		}
		if !found {
			return nil, fmt.Errorf("data dir %s is in use by another process that has not written %s yet (a node starting?): try again", s.DataDir, RunFile(s.DataDir))
		}
		return attach(ctx, s, info, bucketOnly)
	}
	if err != nil {
		return nil, err
	}
	if err := RemoveRunInfo(s.DataDir); err != nil { // left by a node that was killed
		lock.Unlock()
		return nil, err
	}
	b, err := open(ctx, s, lock, bucketOnly)
	if err != nil {
		lock.Unlock()
		return nil, err
	}
	return b, nil
}
