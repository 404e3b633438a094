// Package nodeconfig holds a node's settings: every setting of the operations spec plus the
// binary's own (data directory, admin address, logs, demo load), their defaults, and how
// they are read from flags, environment variables (prefix STREAMTIER_) and a YAML file,
// in that order of precedence. Resolving is a pure function of those three sources; a bad
// value is refused with an error naming the setting and where the value came from.
package nodeconfig

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// EnvPrefix is the prefix of every environment variable the node reads.
const EnvPrefix = "STREAMTIER_"

// Mode selects the defaults: the demo (`node` with no command) differs from `node run` and
// the operator commands only in a few defaults that make progress visible.
type Mode int

// Modes of the binary.
const (
	ModeRun  Mode = iota // `node run` and the operator commands
	ModeDemo             // `node` with no command: embedded servers and a demo stream
)

// Settings is a node's resolved configuration. Paths are absolute once Resolve returns.
type Settings struct {
	DataDir          string
	NodeID           string
	AdminAddr        string
	LogFormat        string // auto, json or console
	LogLevel         string
	Progress         string // auto, terminal, log or off
	ProgressInterval time.Duration
	StopTimeout      time.Duration

	EtcdEndpoints   []string // empty: run an embedded etcd under DataDir
	EtcdPrefix      string
	EtcdUsername    string
	EtcdPassword    string
	EtcdCAFile      string
	EtcdCertFile    string
	EtcdKeyFile     string
	EtcdDialTimeout time.Duration

	S3Endpoint        string // empty with S3Bucket empty: run an embedded S3 endpoint under DataDir
	S3Region          string
	S3Bucket          string
	S3PathStyle       bool
	S3AccessKey       string
	S3SecretKey       string
	S3CAFile          string
	S3RequestTimeout  time.Duration
	S3TransferTimeout time.Duration
	S3ProbeInterval   time.Duration // 0: no periodic bucket probe
	S3SSE             string        // "", AES256 or aws:kms
	S3SSEKMSKeyID     string
	S3ExpectedOwner   string // AWS account id the bucket must belong to

	KeyPrefix              string
	FragmentTargetSize     uint64
	PersistThreshold       int
	PersistInterval        time.Duration
	RebalanceThreshold     int
	MaxTransferBytesPerSec int64
	MaxTransferBurstBytes  int64
	MaxConcurrentUploads   int // node-wide bound on uploads running at once
	MaxUploadsPerStream    int // a hard cap on one stream's share of them; 0: none (work-conserving)
	StartConcurrency       int // declared streams `node run` opens at once while it starts
	UploadRetryDelay       time.Duration
	UploadRetryMaxDelay    time.Duration
	TransientBackoffBase   time.Duration
	TransientBackoffMax    time.Duration
	TransferDeadline       time.Duration // 0: four times S3TransferTimeout
	MaxUnpersistedBytes    uint64        // 0: (2 x uploads one stream may run + 2) fragment target sizes
	RetentionTaskTimeout   time.Duration
	PersistTimeout         time.Duration
	GroupUploadTimeout     time.Duration
	ResolveTimeout         time.Duration
	ParkRetryInterval      time.Duration
	DormantAfter           time.Duration // 0: never
	LocalHotWindowBytes    int64
	ReadBudgetBytes        int64
	ReadRangeBytes         int64
	ReadMaxConcurrency     int
	LocalHotWindowAge      time.Duration
	RetentionMaxBytes      uint64
	RetentionMaxAge        time.Duration
	GCGracePeriod          time.Duration
	GCInterval             time.Duration // 0: no automatic garbage collection
	GCMode                 string        // dry-run or delete
	SegmentMaxBytes        int64
	// Prices of the cost projection, in dollars (defaults: S3 Standard's published prices).
	CostPutPer1000        float64
	CostListPer1000       float64
	CostGetPer1000        float64
	CostStoragePerGBMonth float64
	FragmentMaxAge        time.Duration // actors.NoIdleCut (negative): the idle cut is off
	// FollowInterval is how often the node looks for chunks a writer in another process
	// completed in the log directories of streams declared with follow: true.
	FollowInterval time.Duration

	Demo       bool
	DemoStream string
	DemoRate   int64
	DemoSeed   uint64
	// DemoRetentionMaxBytes is the demo stream's remote max_bytes while retention_max_bytes
	// keeps its default: the demo writes 20 MB/s and would fill the disk under the
	// embedded S3 endpoint (about 1.2 GB a minute) with no retention.
	DemoRetentionMaxBytes uint64

	// Cluster runs the node as a cluster member: placement records in etcd decide which
	// streams it writes and which it replicates (see docs/cluster.md).
	Cluster            bool
	ClusterListen      string        // protoactor remote listen address (host:port)
	ClusterMemberTTL   time.Duration // membership lease
	ClusterResyncRetry time.Duration // how long a replica waits for a sync before asking again

	// Streams are the streams declared in the configuration file.
	Streams []StreamSettings

	// ConfigFile is the YAML file read (absolute), empty when none.
	ConfigFile string
	// Origins says where each setting's value came from: "default", "file", "env
	// STREAMTIER_X" or "flag --x".
	Origins map[string]string

	raw map[string]string // every setting's value as given, for Redacted
}

// StreamSettings is one stream declared in the configuration file: the local log the node
// tiers, the writer's epoch and its remote retention; zero overrides take the node's values.
type StreamSettings struct {
	ID                 string
	LogDir             string // absolute; default DataDir/streams/<id>
	Epoch              uint64
	RetentionMaxBytes  uint64
	RetentionMaxAge    time.Duration
	FragmentTargetSize uint64
	PersistThreshold   int
	PersistInterval    time.Duration
	// FragmentMaxAge overrides fragment_max_age: 0 (not given) takes the node's, a negative
	// value (the file's "off") turns the idle cut off for this stream.
	FragmentMaxAge time.Duration
	// Follow opens LogDir read-only and follows a writer in another process (a live
	// broker's directory): complete chunks count as committed as they appear.
	Follow bool
}

// setting is one row of the settings table.
type setting struct {
	name  string
	def   string // default in ModeRun
	demo  string // default in ModeDemo when it differs; "" means the same
	help  string
	apply func(s *Settings, v string) error
	bool  bool // a flag that may be given without a value
	path  bool // resolved to an absolute path
	// secret values are never printed (Redacted shows "<redacted>").
	secret bool
}

func str(f func(*Settings) *string) func(*Settings, string) error {
	return func(s *Settings, v string) error { *f(s) = v; return nil }
}

func list(f func(*Settings) *[]string) func(*Settings, string) error {
	return func(s *Settings, v string) error { *f(s) = ParseList(v); return nil }
}

func boolean(f func(*Settings) *bool) func(*Settings, string) error {
	return func(s *Settings, v string) error {
		b, err := ParseBool(v)
		*f(s) = b
		return err
	}
}

func integer(f func(*Settings) *int) func(*Settings, string) error {
	return func(s *Settings, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%q is not an integer", v)
		}
		*f(s) = n
		return nil
	}
}

func unsigned(f func(*Settings) *uint64) func(*Settings, string) error {
	return func(s *Settings, v string) error {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not a non-negative integer", v)
		}
		*f(s) = n
		return nil
	}
}

func size(f func(*Settings) *uint64) func(*Settings, string) error {
	return func(s *Settings, v string) error {
		n, err := ParseSize(v)
		*f(s) = n
		return err
	}
}

func size64(f func(*Settings) *int64) func(*Settings, string) error {
	return func(s *Settings, v string) error {
		n, err := ParseSize(v)
		*f(s) = int64(n)
		return err
	}
}

func rate(f func(*Settings) *int64) func(*Settings, string) error {
	return func(s *Settings, v string) error {
		n, err := ParseRate(v)
		*f(s) = n
		return err
	}
}

func price(f func(*Settings) *float64) func(*Settings, string) error {
	return func(s *Settings, v string) error {
		p, err := strconv.ParseFloat(v, 64)
		if err != nil || p < 0 || math.IsInf(p, 0) || math.IsNaN(p) {
			return fmt.Errorf("%q is not a price (a non-negative number of dollars, such as 0.005)", v)
		}
		*f(s) = p
		return nil
	}
}

func duration(f func(*Settings) *time.Duration) func(*Settings, string) error {
	return func(s *Settings, v string) error {
		d, err := ParseDuration(v)
		*f(s) = d
		return err
	}
}

// table lists every setting, in the order the documentation shows them.
var table = []setting{
	{name: "data_dir", def: "./streamtier-data", path: true, help: "directory of the embedded etcd and S3 data, the demo's local logs and the node's run file",
		apply: str(func(s *Settings) *string { return &s.DataDir })},
	{name: "node_id", def: "node-1", help: "this node's name in logs and metadata",
		apply: str(func(s *Settings) *string { return &s.NodeID })},
	{name: "admin_addr", def: "127.0.0.1:0", help: "listen address of the admin HTTP server (/status, /metrics, /healthz, /readyz); port 0 picks a free one",
		apply: str(func(s *Settings) *string { return &s.AdminAddr })},
	{name: "log_format", def: "auto", help: "auto (console on a terminal, JSON otherwise), json or console",
		apply: str(func(s *Settings) *string { return &s.LogFormat })},
	{name: "log_level", def: "info", help: "debug, info, warn or error",
		apply: str(func(s *Settings) *string { return &s.LogLevel })},
	{name: "progress", def: "auto", help: "auto (a live display on a terminal, a log line otherwise), terminal, log or off",
		apply: str(func(s *Settings) *string { return &s.Progress })},
	{name: "progress_interval", def: "5s", help: "interval of the progress log line when not on a terminal",
		apply: duration(func(s *Settings) *time.Duration { return &s.ProgressInterval })},
	{name: "stop_timeout", def: "30s", help: "how long a clean stop waits for committed data to be persisted",
		apply: duration(func(s *Settings) *time.Duration { return &s.StopTimeout })},

	{name: "etcd_endpoints", def: "", help: "comma-separated etcd endpoints; empty runs an embedded etcd under data_dir",
		apply: list(func(s *Settings) *[]string { return &s.EtcdEndpoints })},
	{name: "etcd_prefix", def: "/streamtier", help: "etcd key prefix of every record",
		apply: str(func(s *Settings) *string { return &s.EtcdPrefix })},
	{name: "etcd_username", def: "", help: "etcd user (with etcd_password)",
		apply: str(func(s *Settings) *string { return &s.EtcdUsername })},
	{name: "etcd_password", def: "", secret: true, help: "etcd password (prefer the environment variable)",
		apply: str(func(s *Settings) *string { return &s.EtcdPassword })},
	{name: "etcd_ca_file", def: "", path: true, help: "PEM CA bundle for https etcd endpoints",
		apply: str(func(s *Settings) *string { return &s.EtcdCAFile })},
	{name: "etcd_cert_file", def: "", path: true, help: "client certificate (PEM) for etcd",
		apply: str(func(s *Settings) *string { return &s.EtcdCertFile })},
	{name: "etcd_key_file", def: "", path: true, help: "client key (PEM) for etcd",
		apply: str(func(s *Settings) *string { return &s.EtcdKeyFile })},
	{name: "etcd_dial_timeout", def: "5s", help: "bound on connecting to etcd",
		apply: duration(func(s *Settings) *time.Duration { return &s.EtcdDialTimeout })},

	{name: "s3_endpoint", def: "", help: "S3 endpoint URL; empty with s3_bucket empty runs an embedded S3 endpoint under data_dir; empty with a bucket is AWS",
		apply: str(func(s *Settings) *string { return &s.S3Endpoint })},
	{name: "s3_region", def: "us-east-1", help: "S3 signing region",
		apply: str(func(s *Settings) *string { return &s.S3Region })},
	{name: "s3_bucket", def: "", help: "S3 bucket (the embedded endpoint uses \"streamtier\")",
		apply: str(func(s *Settings) *string { return &s.S3Bucket })},
	{name: "s3_path_style", def: "false", bool: true, help: "path-style addressing (most S3-compatible servers)",
		apply: boolean(func(s *Settings) *bool { return &s.S3PathStyle })},
	{name: "s3_access_key", def: "", help: "S3 access key; empty uses the standard AWS credential chain",
		apply: str(func(s *Settings) *string { return &s.S3AccessKey })},
	{name: "s3_secret_key", def: "", secret: true, help: "S3 secret key (with s3_access_key; prefer the AWS chain)",
		apply: str(func(s *Settings) *string { return &s.S3SecretKey })},
	{name: "s3_ca_file", def: "", path: true, help: "extra PEM CA bundle trusted for the S3 endpoint",
		apply: str(func(s *Settings) *string { return &s.S3CAFile })},
	{name: "s3_request_timeout", def: "30s", help: "bound on every small S3 request",
		apply: duration(func(s *Settings) *time.Duration { return &s.S3RequestTimeout })},
	{name: "s3_transfer_timeout", def: "5m", help: "bound on a fragment PUT or GET",
		apply: duration(func(s *Settings) *time.Duration { return &s.S3TransferTimeout })},

	{name: "s3_sse", def: "", help: "server-side encryption asked for on every object PUT: empty (the bucket's default encryption, SSE-S3 on AWS), AES256 (SSE-S3) or aws:kms (SSE-KMS)",
		apply: str(func(s *Settings) *string { return &s.S3SSE })},
	{name: "s3_sse_kms_key_id", def: "", help: "KMS key id or ARN for s3_sse aws:kms; empty uses the account's aws/s3 key",
		apply: str(func(s *Settings) *string { return &s.S3SSEKMSKeyID })},
	{name: "s3_expected_bucket_owner", def: "", help: "AWS account id (12 digits) the bucket must belong to, sent with every request: S3 refuses requests to a bucket of that name owned by another account",
		apply: str(func(s *Settings) *string { return &s.S3ExpectedOwner })},
	{name: "s3_probe_interval", def: "30s", help: "how often the node lists one key of the bucket to report it unreachable or refusing access (status, /readyz, metrics); 0 turns the probe off (then /readyz lists the bucket itself)",
		apply: duration(func(s *Settings) *time.Duration { return &s.S3ProbeInterval })},

	{name: "key_prefix", def: "streams", help: "S3 key prefix of every stream",
		apply: str(func(s *Settings) *string { return &s.KeyPrefix })},
	{name: "fragment_target_size", def: "64MiB", demo: "8MiB", help: "cut a fragment when its chunk bytes reach this",
		apply: size(func(s *Settings) *uint64 { return &s.FragmentTargetSize })},
	{name: "persist_threshold", def: "5", help: "edits since the last persist that trigger a persist",
		apply: integer(func(s *Settings) *int { return &s.PersistThreshold })},
	{name: "persist_interval", def: "2s", demo: "1s", help: "longest time an edit waits for a persist",
		apply: duration(func(s *Settings) *time.Duration { return &s.PersistInterval })},
	{name: "rebalance_threshold", def: "1024", help: "entries per group object (M)",
		apply: integer(func(s *Settings) *int { return &s.RebalanceThreshold })},
	{name: "max_transfer_bytes_per_sec", def: "unlimited", help: "governor rate for uploads; unlimited means no pacing",
		apply: rate(func(s *Settings) *int64 { return &s.MaxTransferBytesPerSec })},
	{name: "max_transfer_burst_bytes", def: "0", help: "governor token bucket size; 0 means rate / 5",
		apply: size64(func(s *Settings) *int64 { return &s.MaxTransferBurstBytes })},
	{name: "max_concurrent_uploads", def: "24", help: "fragment uploads running at once node-wide (each one S3 connection); the S3 connection pool is sized to it plus 16",
		apply: integer(func(s *Settings) *int { return &s.MaxConcurrentUploads })},
	{name: "max_concurrent_uploads_per_stream", def: "0", help: "a hard cap on one stream's uploads at once; 0 means none: a stream alone may take every slot of max_concurrent_uploads, and streams that want slots at once share them fairly as uploads end",
		apply: integer(func(s *Settings) *int { return &s.MaxUploadsPerStream })},
	{name: "start_concurrency", def: "1", help: "declared streams node run opens at once while it starts (each a LIST and three etcd reads in a row); more starts a large node sooner behind a distant S3, but every stream is then live at once before the idle ones go dormant, and the process keeps the higher peak's memory",
		apply: integer(func(s *Settings) *int { return &s.StartConcurrency })},
	{name: "upload_retry_delay", def: "1s", help: "first delay before retrying a non-transient upload failure",
		apply: duration(func(s *Settings) *time.Duration { return &s.UploadRetryDelay })},
	{name: "upload_retry_max_delay", def: "30s", help: "the non-transient retry delay doubles up to this",
		apply: duration(func(s *Settings) *time.Duration { return &s.UploadRetryMaxDelay })},
	{name: "transient_backoff_base", def: "10ms", help: "delay of the second retry of a retriable failure (the first is immediate)",
		apply: duration(func(s *Settings) *time.Duration { return &s.TransientBackoffBase })},
	{name: "transient_backoff_max", def: "5s", help: "the transient retry delay doubles up to this",
		apply: duration(func(s *Settings) *time.Duration { return &s.TransientBackoffMax })},
	{name: "transfer_deadline", def: "0", help: "resubmit a transfer whose result never came, counted from its admission by the governor; 0 means four times s3_transfer_timeout",
		apply: duration(func(s *Settings) *time.Duration { return &s.TransferDeadline })},
	{name: "max_unpersisted_bytes", def: "0", help: "per stream, most bytes drained and not yet persisted (assembly, transfers, uploaded-not-persisted); at it the drain pauses until a persist; 0 means room for every upload one stream may run, as many uploaded and waiting for their persist, and 2 fragments: (2 x max_concurrent_uploads, or the per-stream cap, + 2) x fragment_target_size",
		apply: size(func(s *Settings) *uint64 { return &s.MaxUnpersistedBytes })},
	{name: "retention_task_timeout", def: "60s", help: "bound on a group download during remote retention",
		apply: duration(func(s *Settings) *time.Duration { return &s.RetentionTaskTimeout })},
	{name: "persist_timeout", def: "30s", help: "bound on one persist (root PUT and etcd transaction); a persist past it fails and is retried",
		apply: duration(func(s *Settings) *time.Duration { return &s.PersistTimeout })},
	{name: "group_upload_timeout", def: "60s", help: "bound on one group object upload of a rebalance",
		apply: duration(func(s *Settings) *time.Duration { return &s.GroupUploadTimeout })},
	{name: "resolve_timeout", def: "30s", help: "bound on one manifest resolution at a reader's start (anchor, etcd record, root object)",
		apply: duration(func(s *Settings) *time.Duration { return &s.ResolveTimeout })},
	{name: "stream_park_retry_interval", def: "1m", help: "how often the reader of a parked stream (one whose reader kept failing until its restart delay reached 10s) is retried",
		apply: duration(func(s *Settings) *time.Duration { return &s.ParkRetryInterval })},
	{name: "stream_dormant_after", def: "30s", help: "how long a stream with everything persisted and nothing to do keeps its actors before it goes dormant (no actor until data, an await or a command wakes it, at the cost of one resolution); 0: never",
		apply: duration(func(s *Settings) *time.Duration { return &s.DormantAfter })},
	{name: "read_budget_bytes", def: "256MiB", help: "node-wide bound on the bytes remote readers hold (in flight, buffered, delivered and not consumed), divided evenly among the open readers",
		apply: size64(func(s *Settings) *int64 { return &s.ReadBudgetBytes })},
	{name: "read_range_bytes", def: "4MiB", help: "length of one range GET of a remote reader",
		apply: size64(func(s *Settings) *int64 { return &s.ReadRangeBytes })},
	{name: "read_max_concurrency", def: "32", help: "ceiling of a remote reader's search for the number of range GETs in flight",
		apply: integer(func(s *Settings) *int { return &s.ReadMaxConcurrency })},
	{name: "local_hot_window_bytes", def: "0", help: "uploaded bytes kept locally as a cache (0 deletes uploaded segments at once)",
		apply: size64(func(s *Settings) *int64 { return &s.LocalHotWindowBytes })},
	{name: "local_hot_window_age", def: "0", help: "uploaded segments younger than this are kept locally",
		apply: duration(func(s *Settings) *time.Duration { return &s.LocalHotWindowAge })},
	{name: "retention_max_bytes", def: "0", help: "remote retention: keep at most this many bytes per stream (0: no limit)",
		apply: size(func(s *Settings) *uint64 { return &s.RetentionMaxBytes })},
	{name: "retention_max_age", def: "0", help: "remote retention: drop fragments older than this (0: no limit)",
		apply: duration(func(s *Settings) *time.Duration { return &s.RetentionMaxAge })},
	{name: "gc_grace_period", def: "1h", help: "garbage collection never deletes an unreferenced object younger than this",
		apply: duration(func(s *Settings) *time.Duration { return &s.GCGracePeriod })},
	{name: "gc_interval", def: "0", help: "automatic garbage collection: sweep the bucket this often, one node of the cluster at a time (an etcd lock); 0 turns it off",
		apply: duration(func(s *Settings) *time.Duration { return &s.GCInterval })},
	{name: "gc_mode", def: "dry-run", help: "what an automatic sweep does with the orphans: dry-run (report them) or delete (as `node gc --delete`)",
		apply: str(func(s *Settings) *string { return &s.GCMode })},
	{name: "segment_max_bytes", def: "500MB", demo: "32MiB", help: "local segment size of the logs the node opens (demo and declared streams)",
		apply: size64(func(s *Settings) *int64 { return &s.SegmentMaxBytes })},
	{name: "fragment_max_age", def: "60s", demo: "5s", help: "cut a fragment below fragment_target_size once its oldest chunk was drained this long ago, so that a quiet stream's tail is uploaded; off disables (0 is refused)",
		apply: func(s *Settings, v string) error {
			d, err := ParseMaxAge(v)
			s.FragmentMaxAge = d
			return err
		}},
	{name: "follow_interval", def: "1s", help: "how often the log directories of streams declared with follow: true are looked at for chunks their writer completed",
		apply: duration(func(s *Settings) *time.Duration { return &s.FollowInterval })},

	{name: "cost_put_per_1000", def: "0.005", help: "price in dollars of 1000 PUT requests, for the cost projection in status (default: S3 Standard's published price)",
		apply: price(func(s *Settings) *float64 { return &s.CostPutPer1000 })},
	{name: "cost_list_per_1000", def: "0.005", help: "price in dollars of 1000 LIST requests (default: S3 Standard's published price)",
		apply: price(func(s *Settings) *float64 { return &s.CostListPer1000 })},
	{name: "cost_get_per_1000", def: "0.0004", help: "price in dollars of 1000 GET or HEAD requests (default: S3 Standard's published price)",
		apply: price(func(s *Settings) *float64 { return &s.CostGetPer1000 })},
	{name: "cost_storage_gb_month", def: "0.023", help: "price in dollars of a GB (2^30 bytes) stored for a month (default: S3 Standard's published price, first 50 TB)",
		apply: price(func(s *Settings) *float64 { return &s.CostStoragePerGBMonth })},

	{name: "demo", def: "false", demo: "true", bool: true, help: "feed a demo stream with the deterministic load generator",
		apply: boolean(func(s *Settings) *bool { return &s.Demo })},
	{name: "demo_stream", def: "demo", help: "id of the demo stream",
		apply: str(func(s *Settings) *string { return &s.DemoStream })},
	{name: "demo_rate", def: "20MB/s", help: "rate at which the demo load is written",
		apply: rate(func(s *Settings) *int64 { return &s.DemoRate })},
	{name: "demo_seed", def: "1", help: "seed of the demo load (a restart resumes the same load)",
		apply: unsigned(func(s *Settings) *uint64 { return &s.DemoSeed })},
	{name: "demo_retention_max_bytes", def: "4GiB", help: "remote retention of the demo stream when retention_max_bytes is not set, so that the demo does not fill the disk (0: no limit)",
		apply: size(func(s *Settings) *uint64 { return &s.DemoRetentionMaxBytes })},

	{name: "cluster", def: "false", bool: true, help: "run as a cluster member: etcd placement records decide which streams this node writes and replicates",
		apply: boolean(func(s *Settings) *bool { return &s.Cluster })},
	{name: "cluster_listen", def: "127.0.0.1:0", help: "listen address of the cluster transport (protoactor remote); port 0 picks a free one; peers dial the address bound",
		apply: str(func(s *Settings) *string { return &s.ClusterListen })},
	{name: "cluster_member_ttl", def: "3s", help: "membership lease: a dead node leaves the members after about this long",
		apply: duration(func(s *Settings) *time.Duration { return &s.ClusterMemberTTL })},
	{name: "cluster_resync_retry", def: "1s", help: "how long a replica waits for a manifest sync before asking again",
		apply: duration(func(s *Settings) *time.Duration { return &s.ClusterResyncRetry })},
}

// Setting describes one setting for documentation and help output.
type Setting struct {
	Name        string // as in the YAML file
	Flag        string // "--name-with-dashes"
	Env         string // "STREAMTIER_NAME"
	Default     string // in `node run`
	DemoDefault string // in `node` without a command, when it differs
	Help        string
}

// Table describes every setting, in documentation order.
func Table() []Setting {
	out := make([]Setting, len(table))
	for i, d := range table {
		out[i] = Setting{Name: d.name, Flag: "--" + flagName(d.name), Env: envName(d.name), Default: d.def, DemoDefault: d.demo, Help: d.help}
	}
	return out
}

func lookup(name string) (setting, bool) {
	for _, d := range table {
		if d.name == name {
			return d, true
		}
	}
	return setting{}, false
}
