package nodeconfig

import (
	"cmp"
	"fmt"
	"math"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/actors/cluster"
	"github.com/streamtier/streamtier/actors/governorcore"
	"github.com/streamtier/streamtier/gc"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/s3io"
)

// EmbeddedBucket is the bucket the embedded S3 endpoint serves.
const EmbeddedBucket = "streamtier"

// EmbeddedEtcd reports whether the node runs its own etcd under the data directory.
func (s Settings) EmbeddedEtcd() bool { return len(s.EtcdEndpoints) == 0 }

// EmbeddedS3 reports whether the node runs its own S3 endpoint under the data directory.
func (s Settings) EmbeddedS3() bool { return s.S3Endpoint == "" && s.S3Bucket == "" }

// Validate refuses settings the node cannot run with; the error names the setting and
// where its value came from.
func (s Settings) Validate() error {
	bad := func(name string, format string, args ...any) error {
		origin := s.Origins[name]
		if origin == "" {
			origin = "default"
		}
		return fmt.Errorf("setting %s (from %s): %s", name, origin, fmt.Sprintf(format, args...))
	}
	positive := func(name string, d time.Duration) error {
		if d <= 0 {
			return bad(name, "%v: must be positive", d)
		}
		return nil
	}
	if s.DataDir == "" {
		return bad("data_dir", "required")
	}
	if err := metadata.ValidateNodeName(s.NodeID); err != nil {
		return bad("node_id", "%v", err)
	}
	if host, port, err := net.SplitHostPort(s.AdminAddr); err != nil {
		return bad("admin_addr", "%q: want host:port (for example 127.0.0.1:9464): %v", s.AdminAddr, err)
	} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return bad("admin_addr", "%q: port %q is not a number from 0 to 65535", s.AdminAddr, port)
	} else if host == "" {
		return bad("admin_addr", "%q: give a host (127.0.0.1 keeps it on loopback; 0.0.0.0 exposes it)", s.AdminAddr)
	}
	switch s.LogFormat {
	case "auto", "json", "console":
	default:
		return bad("log_format", "%q: want auto, json or console", s.LogFormat)
	}
	if _, err := zerolog.ParseLevel(s.LogLevel); err != nil || s.LogLevel == "" {
		return bad("log_level", "%q: want debug, info, warn or error", s.LogLevel)
	}
	switch s.Progress {
	case "auto", "terminal", "log", "off":
	default:
		return bad("progress", "%q: want auto, terminal, log or off", s.Progress)
	}
	if err := positive("progress_interval", s.ProgressInterval); err != nil {
		return err
	}
	if s.StopTimeout < 0 {
		return bad("stop_timeout", "%v: negative", s.StopTimeout)
	}

	if s.EtcdPrefix == "" {
		return bad("etcd_prefix", "required (default /streamtier)")
	}
	if err := positive("etcd_dial_timeout", s.EtcdDialTimeout); err != nil {
		return err
	}
	if !s.EmbeddedEtcd() {
		if err := s.EtcdClientConfig().Validate(); err != nil {
			return bad("etcd_endpoints", "%v", err)
		}
	} else {
		for _, name := range []string{"etcd_username", "etcd_password", "etcd_ca_file", "etcd_cert_file", "etcd_key_file"} {
			if s.Origins[name] != "" && s.Origins[name] != "default" {
				return bad(name, "only applies to an external etcd (set etcd_endpoints)")
			}
		}
	}

	if err := positive("s3_request_timeout", s.S3RequestTimeout); err != nil {
		return err
	}
	if err := positive("s3_transfer_timeout", s.S3TransferTimeout); err != nil {
		return err
	}
	if s.EmbeddedS3() {
		for _, name := range []string{"s3_access_key", "s3_secret_key", "s3_ca_file", "s3_sse", "s3_sse_kms_key_id", "s3_expected_bucket_owner"} {
			if s.Origins[name] != "" && s.Origins[name] != "default" {
				return bad(name, "only applies to an external S3 (set s3_bucket)")
			}
		}
	} else {
		if s.S3Bucket == "" {
			return bad("s3_bucket", "required with s3_endpoint %q", s.S3Endpoint)
		}
		if err := s.S3Config().Validate(); err != nil {
			return bad("s3_bucket", "S3 settings: %v", err)
		}
	}

	switch {
	case s.FragmentTargetSize < 1:
		return bad("fragment_target_size", "must be at least 1 byte")
	case s.PersistThreshold < 1:
		return bad("persist_threshold", "%d: must be at least 1", s.PersistThreshold)
	case s.RebalanceThreshold < 2:
		return bad("rebalance_threshold", "%d: must be at least 2", s.RebalanceThreshold)
	case s.MaxTransferBytesPerSec < 0:
		return bad("max_transfer_bytes_per_sec", "negative")
	case s.MaxConcurrentUploads < 1:
		return bad("max_concurrent_uploads", "%d: must be at least 1", s.MaxConcurrentUploads)
	case s.StartConcurrency < 1 || s.StartConcurrency > 256:
		return bad("start_concurrency", "%d: want 1 to 256", s.StartConcurrency)
	case s.MaxUploadsPerStream < 0 || s.MaxUploadsPerStream > s.MaxConcurrentUploads:
		return bad("max_concurrent_uploads_per_stream", "%d: want 0 (no cap) to max_concurrent_uploads (%d)", s.MaxUploadsPerStream, s.MaxConcurrentUploads)
	case s.MaxTransferBurstBytes != 0 && s.MaxTransferBytesPerSec == 0:
		return bad("max_transfer_burst_bytes", "set to %d but max_transfer_bytes_per_sec is unlimited", s.MaxTransferBurstBytes)
	case s.UploadRetryMaxDelay < s.UploadRetryDelay:
		return bad("upload_retry_max_delay", "%v is below upload_retry_delay %v", s.UploadRetryMaxDelay, s.UploadRetryDelay)
	case s.TransientBackoffMax < s.TransientBackoffBase:
		return bad("transient_backoff_max", "%v is below transient_backoff_base %v", s.TransientBackoffMax, s.TransientBackoffBase)
	case s.LocalHotWindowAge < 0:
		return bad("local_hot_window_age", "%v: negative", s.LocalHotWindowAge)
	case s.RetentionMaxAge < 0:
		return bad("retention_max_age", "%v: negative", s.RetentionMaxAge)
	case s.S3ProbeInterval < 0:
		return bad("s3_probe_interval", "%v: negative (0 turns the probe off)", s.S3ProbeInterval)
	case s.GCGracePeriod < 0:
		return bad("gc_grace_period", "%v: negative", s.GCGracePeriod)
	case s.GCInterval < 0:
		return bad("gc_interval", "%v: negative (0 turns automatic garbage collection off)", s.GCInterval)
	case s.GCMode != string(gc.ModeDryRun) && s.GCMode != string(gc.ModeDelete):
		return bad("gc_mode", "%q: want dry-run or delete", s.GCMode)
	case s.SegmentMaxBytes < 1 || s.SegmentMaxBytes > math.MaxUint32:
		return bad("segment_max_bytes", "%d: want 1 byte to 4 GiB", s.SegmentMaxBytes)
	}
	for _, p := range []struct {
		name string
		d    time.Duration
	}{
		{"persist_interval", s.PersistInterval}, {"upload_retry_delay", s.UploadRetryDelay},
		{"transient_backoff_base", s.TransientBackoffBase}, {"retention_task_timeout", s.RetentionTaskTimeout},
		{"persist_timeout", s.PersistTimeout}, {"group_upload_timeout", s.GroupUploadTimeout}, {"resolve_timeout", s.ResolveTimeout},
		{"stream_park_retry_interval", s.ParkRetryInterval}, {"follow_interval", s.FollowInterval},
	} {
		if err := positive(p.name, p.d); err != nil {
			return err
		}
	}
	switch {
	case s.DormantAfter < 0:
		return bad("stream_dormant_after", "%v: must be positive, or 0 for never", s.DormantAfter)
	case s.TransferDeadline < 0:
		return bad("transfer_deadline", "%v: must be positive (or 0: four times s3_transfer_timeout)", s.TransferDeadline)
	case s.MaxUnpersistedBytes != 0 && s.MaxUnpersistedBytes < s.FragmentTargetSize:
		return bad("max_unpersisted_bytes", "%d is below fragment_target_size %d: the drain would pause before a fragment could be cut (0 means sized from the uploads one stream may run)",
			s.MaxUnpersistedBytes, s.FragmentTargetSize)
	case s.TransferDeadline > 0 && s.TransferDeadline <= s.S3TransferTimeout:
		return bad("transfer_deadline", "%v is not above s3_transfer_timeout %v: an upload still running would be submitted again (0 means four times s3_transfer_timeout)",
			s.TransferDeadline, s.S3TransferTimeout)
	}

	seen := map[string]bool{}
	dirs := map[string]string{} // a stream's log directory (cleaned) -> its id: one log, one stream
	if s.Demo {
		if err := manifest.ValidateStreamID(s.DemoStream); err != nil {
			return bad("demo_stream", "%v", err)
		}
		if s.DemoRate <= 0 {
			return bad("demo_rate", "must be positive (for example 20MB/s)")
		}
		seen[s.DemoStream] = true
	}
	for i, st := range s.Streams {
		where := fmt.Sprintf("streams[%d]", i)
		if s.ConfigFile != "" {
			where = fmt.Sprintf("config file %s: streams[%d]", s.ConfigFile, i)
		}
		if err := manifest.ValidateStreamID(st.ID); err != nil {
			return fmt.Errorf("%s: id: %w", where, err)
		}
		if seen[st.ID] {
			return fmt.Errorf("%s: stream %q is declared twice (or is the demo stream)", where, st.ID)
		}
		seen[st.ID] = true
		if dir := filepath.Clean(st.LogDir); st.LogDir != "" {
			if other, ok := dirs[dir]; ok {
				return fmt.Errorf("%s (%s): log_dir %s is stream %q's too: a log directory is one stream's", where, st.ID, dir, other)
			}
			dirs[dir] = st.ID
		}
		if st.RetentionMaxAge < 0 || st.PersistInterval < 0 || st.PersistThreshold < 0 {
			return fmt.Errorf("%s (%s): negative retention_max_age, persist_interval or persist_threshold", where, st.ID)
		}
		if st.Follow && s.Cluster {
			return fmt.Errorf("%s (%s): follow: true is not supported in cluster mode (a cluster member opens its logs as the broker's replica)", where, st.ID)
		}
	}
	if err := s.validateCluster(bad); err != nil {
		return err
	}
	if err := s.NodeConfig(zerolog.Nop()).Validate(); err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	return nil
}

// NodeConfig is the actors configuration of these settings, logging to log.
func (s Settings) NodeConfig(log zerolog.Logger) actors.Config {
	return actors.Config{
		NodeID:    s.NodeID,
		KeyPrefix: s.KeyPrefix,
		Governor: governorcore.Config{
			RateBytesPerSec: s.MaxTransferBytesPerSec,
			BurstBytes:      s.MaxTransferBurstBytes,
			MaxConcurrent:   s.MaxConcurrentUploads,
			PerStream:       s.MaxUploadsPerStream,
		},
		Stream: actors.StreamOptions{
			FragmentTargetSize:   s.FragmentTargetSize,
			PersistThreshold:     s.PersistThreshold,
			PersistInterval:      s.PersistInterval,
			RebalanceThreshold:   s.RebalanceThreshold,
			UploadRetryDelay:     s.UploadRetryDelay,
			UploadRetryMaxDelay:  s.UploadRetryMaxDelay,
			TransientBackoffBase: s.TransientBackoffBase,
			TransientBackoffMax:  s.TransientBackoffMax,
			TransferDeadline:     s.EffectiveTransferDeadline(),
			RetentionTimeout:     s.RetentionTaskTimeout,
			MaxUnpersistedBytes:  s.MaxUnpersistedBytes,
			FragmentMaxAge:       s.FragmentMaxAge,
		},
		LocalHotWindowBytes: s.LocalHotWindowBytes,
		ReadBudgetBytes:     s.ReadBudgetBytes,
		Read:                actors.ReadOptions{RangeSize: s.ReadRangeBytes, MaxConcurrency: s.ReadMaxConcurrency},
		LocalHotWindowAge:   s.LocalHotWindowAge,
		PersistTimeout:      s.PersistTimeout,
		GroupUploadTimeout:  s.GroupUploadTimeout,
		ResolveTimeout:      s.ResolveTimeout,
		ParkRetryInterval:   s.ParkRetryInterval,
		DormantAfter:        cmp.Or(s.DormantAfter, -1), // 0: never
		Logger:              log,
	}
}

// Options are the stream's own settings as the node takes them (StreamSpec.Options): the
// zero ones take the node's.
func (st StreamSettings) Options() actors.StreamOptions {
	return actors.StreamOptions{FragmentTargetSize: st.FragmentTargetSize, PersistThreshold: st.PersistThreshold,
		PersistInterval: st.PersistInterval, FragmentMaxAge: st.FragmentMaxAge}
}

// EffectiveTransferDeadline is transfer_deadline, or four times s3_transfer_timeout when 0.
func (s Settings) EffectiveTransferDeadline() time.Duration {
	if s.TransferDeadline == 0 {
		return 4 * s.S3TransferTimeout
	}
	return s.TransferDeadline
}

// Retention is the remote retention policy of a stream declared with st (the node's
// retention_max_bytes and retention_max_age where st sets none).
func (s Settings) Retention(st StreamSettings) manifest.Policy {
	p := manifest.Policy{MaxBytes: s.RetentionMaxBytes, MaxAgeMillis: s.RetentionMaxAge.Milliseconds()}
	if st.RetentionMaxBytes != 0 {
		p.MaxBytes = st.RetentionMaxBytes
	}
	if st.RetentionMaxAge != 0 {
		p.MaxAgeMillis = st.RetentionMaxAge.Milliseconds()
	}
	return p
}

// DemoStreamSettings is the demo stream: its local log under the data directory, epoch 1,
// and remote retention demo_retention_max_bytes unless retention_max_bytes was set
// (then the node's policy, as for any stream; 0 set explicitly means no limit).
func (s Settings) DemoStreamSettings() StreamSettings {
	st := StreamSettings{ID: s.DemoStream, LogDir: filepath.Join(s.DataDir, "streams", s.DemoStream), Epoch: 1}
	if s.Origins["retention_max_bytes"] == "default" {
		st.RetentionMaxBytes = s.DemoRetentionMaxBytes
	}
	return st
}

// S3Config is the external S3 configuration (meaningless when EmbeddedS3).
func (s Settings) S3Config() s3io.Config {
	return s3io.Config{
		Endpoint: s.S3Endpoint, Region: s.S3Region, Bucket: s.S3Bucket, PathStyle: s.S3PathStyle,
		AccessKey: s.S3AccessKey, SecretKey: s.S3SecretKey, CAFile: s.S3CAFile,
		RequestTimeout: s.S3RequestTimeout, TransferTimeout: s.S3TransferTimeout, MaxConns: s.S3MaxConns(),
		SSE: s.S3SSE, SSEKMSKeyID: s.S3SSEKMSKeyID, ExpectedBucketOwner: s.S3ExpectedOwner, KeyPrefix: s.KeyPrefix,
	}
}

// S3MaxConns is the S3 connection pool's size: max_concurrent_uploads, read_max_concurrency
// (a remote reader at its ceiling) and 16 for the small requests (persists, resolutions,
// deletes, lists) that run beside them.
func (s Settings) S3MaxConns() int { return s.MaxConcurrentUploads + s.ReadMaxConcurrency + 16 }

// EtcdClientConfig is the external etcd configuration (meaningless when EmbeddedEtcd).
func (s Settings) EtcdClientConfig() metadata.ClientConfig {
	return metadata.ClientConfig{
		Endpoints: s.EtcdEndpoints, CAFile: s.EtcdCAFile, CertFile: s.EtcdCertFile, KeyFile: s.EtcdKeyFile,
		Username: s.EtcdUsername, Password: s.EtcdPassword, DialTimeout: s.EtcdDialTimeout,
	}
}

// Redacted lists every setting's effective value as given (sizes and durations as
// written), secrets replaced by "<redacted>", for the log line at start.
func (s Settings) Redacted() map[string]string {
	out := make(map[string]string, len(table))
	for _, d := range table {
		v := s.raw[d.name]
		if d.secret && v != "" {
			v = "<redacted>"
		}
		out[d.name] = v
	}
	return out
}

// validateCluster checks the cluster settings: a listen address peers can dial, a lease of
// at least cluster.MinMemberTTL (shorter ones lapse on a stall), an explicit node id (two members
// named by the default would take each other's place), no demo; and refuses cluster
// settings given without cluster mode, which would otherwise be silently ignored.
func (s Settings) validateCluster(bad func(name, format string, args ...any) error) error {
	if err := checkListen(s.ClusterListen); err != nil {
		return bad("cluster_listen", "%v", err)
	}
	if s.ClusterMemberTTL < cluster.MinMemberTTL {
		return bad("cluster_member_ttl", "%v: must be at least %v (etcd's client renews a lease every half second, so a shorter one lapses whenever the node stalls)", s.ClusterMemberTTL, cluster.MinMemberTTL)
	}
	if s.ClusterResyncRetry <= 0 {
		return bad("cluster_resync_retry", "%v: must be positive", s.ClusterResyncRetry)
	}
	if !s.Cluster {
		for _, name := range []string{"cluster_listen", "cluster_member_ttl", "cluster_resync_retry"} {
			if s.Origins[name] != "" && s.Origins[name] != "default" {
				return bad(name, "only applies in cluster mode (set cluster: true)")
			}
		}
		return nil
	}
	if s.Demo {
		return bad("cluster", "the demo runs one node alone: use `node run --cluster` (demo off)")
	}
	if o := s.Origins["node_id"]; o == "" || o == "default" {
		return bad("node_id", "set this node's unique name in cluster mode (the default %q would collide with other members)", s.NodeID)
	}
	return nil
}

// checkListen refuses a listen address that is not host:port with a host and a port from
// 0 to 65535.
func checkListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: want host:port (for example 127.0.0.1:7420): %v", addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("%q: port %q is not a number from 0 to 65535", addr, port)
	}
	if host == "" {
		return fmt.Errorf("%q: give a host (peers dial the address bound; 127.0.0.1 keeps it on loopback)", addr)
	}
	return nil
}

// ClusterStream is where a stream the placement gives this node lives: the declared
// stream's settings (its log_dir and overrides) or, for an undeclared one, its directory
// under data_dir. The id is checked first: it becomes a path.
func (s Settings) ClusterStream(id string) (StreamSettings, error) {
	if err := manifest.ValidateStreamID(id); err != nil {
		return StreamSettings{}, fmt.Errorf("placement stream: %w", err)
	}
	for _, st := range s.Streams {
		if st.ID == id {
			return st, nil
		}
	}
	return StreamSettings{ID: id, LogDir: filepath.Join(s.DataDir, "streams", id)}, nil
}

// ClusterConfig is the actors cluster configuration of these settings; open maps a stream
// id to its local log (see ClusterStream).
func (s Settings) ClusterConfig(open func(stream string) (actors.StreamSpec, error)) cluster.Config {
	return cluster.Config{MemberTTL: s.ClusterMemberTTL, ResyncRetry: s.ClusterResyncRetry, OpenStream: open}
}
