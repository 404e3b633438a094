package nodeconfig

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors"
)

func resolve(t *testing.T, mode Mode, src Sources) Settings {
	t.Helper()
	if src.Dir == "" {
		src.Dir = "/work"
	}
	s, err := Resolve(mode, src)
	if err != nil {
		t.Fatalf("resolve: %v", err)
	}
	return s
}

func TestDefaultsFollowTheOperationsSpec(t *testing.T) {
	s := resolve(t, ModeRun, Sources{})
	if s.FragmentTargetSize != 64<<20 || s.PersistThreshold != 5 || s.PersistInterval != 2*time.Second ||
		s.RebalanceThreshold != 1024 || s.MaxTransferBytesPerSec != 0 || s.MaxTransferBurstBytes != 0 ||
		s.UploadRetryDelay != time.Second || s.UploadRetryMaxDelay != 30*time.Second ||
		s.TransientBackoffBase != 10*time.Millisecond || s.TransientBackoffMax != 5*time.Second ||
		s.TransferDeadline != 0 || s.EffectiveTransferDeadline() != 20*time.Minute || s.RetentionTaskTimeout != 60*time.Second ||
		s.PersistTimeout != 30*time.Second || s.GroupUploadTimeout != 60*time.Second || s.ResolveTimeout != 30*time.Second ||
		s.LocalHotWindowBytes != 0 || s.RetentionMaxBytes != 0 || s.RetentionMaxAge != 0 || s.GCGracePeriod != time.Hour ||
		s.MaxUnpersistedBytes != 0 || s.MaxConcurrentUploads != 24 || s.MaxUploadsPerStream != 0 || s.S3Config().MaxConns != 24+32+16 {
		t.Fatalf("defaults differ from operations.md: %+v", s)
	}
	if s.Demo || !s.EmbeddedEtcd() || !s.EmbeddedS3() || s.DataDir != "/work/streamtier-data" || s.KeyPrefix != "streams" || s.EtcdPrefix != "/streamtier" {
		t.Fatalf("run defaults: %+v", s)
	}
	d := resolve(t, ModeDemo, Sources{})
	if !d.Demo || d.FragmentTargetSize != 8<<20 || d.DemoRate != 20_000_000 || d.DemoStream != "demo" || d.SegmentMaxBytes != 32<<20 {
		t.Fatalf("demo defaults: %+v", d)
	}
	if d.Origins["fragment_target_size"] != "default" {
		t.Fatalf("origin %q", d.Origins["fragment_target_size"])
	}
}

// TestPrecedence: a flag beats the environment, which beats the file, which beats the default.
func TestPrecedence(t *testing.T) {
	file := []byte("persist_threshold: 7\npersist_interval: 3s\nfragment_target_size: 16MiB\nkey_prefix: fromfile\n")
	env := []string{"STREAMTIER_PERSIST_INTERVAL=4s", "STREAMTIER_FRAGMENT_TARGET_SIZE=32MiB", "PATH=/bin", "STREAMTIER_ETCD_LOG=debug"}
	flags := map[string]string{"fragment_target_size": "1MiB"}
	s := resolve(t, ModeRun, Sources{Flags: flags, Env: env, File: file, FileName: "node.yaml"})
	if s.PersistThreshold != 7 || s.PersistInterval != 4*time.Second || s.FragmentTargetSize != 1<<20 || s.KeyPrefix != "fromfile" {
		t.Fatalf("precedence: %+v", s)
	}
	want := map[string]string{
		"persist_threshold":    "file node.yaml",
		"persist_interval":     "env STREAMTIER_PERSIST_INTERVAL",
		"fragment_target_size": "flag --fragment-target-size",
		"rebalance_threshold":  "default",
	}
	for k, v := range want {
		if s.Origins[k] != v {
			t.Errorf("origin of %s = %q, want %q", k, s.Origins[k], v)
		}
	}
}

// TestBadValuesNameTheSetting: every refusal names the setting and where the value came from.
func TestBadValuesNameTheSetting(t *testing.T) {
	cases := []struct {
		src  Sources
		want []string
	}{
		{Sources{Flags: map[string]string{"fragment_target_size": "lots"}}, []string{"fragment_target_size", "flag --fragment-target-size", "lots"}},
		{Sources{Env: []string{"STREAMTIER_PERSIST_INTERVAL=soon"}}, []string{"persist_interval", "env STREAMTIER_PERSIST_INTERVAL"}},
		{Sources{File: []byte("persist_threshold: 0\n"), FileName: "n.yaml"}, []string{"persist_threshold", "file n.yaml", "at least 1"}},
		{Sources{File: []byte("persist_treshold: 3\n"), FileName: "n.yaml"}, []string{"n.yaml", "line 1", `unknown setting "persist_treshold"`}},
		{Sources{Flags: map[string]string{"rebalance_threshold": "1"}}, []string{"rebalance_threshold"}},
		{Sources{Flags: map[string]string{"max_transfer_burst_bytes": "1MiB"}}, []string{"max_transfer_burst_bytes", "unlimited"}},
		{Sources{Flags: map[string]string{"admin_addr": "nowhere"}}, []string{"admin_addr"}},
		{Sources{Flags: map[string]string{"max_concurrent_uploads": "0"}}, []string{"max_concurrent_uploads", "at least 1"}},
		{Sources{Flags: map[string]string{"max_concurrent_uploads": "2", "max_concurrent_uploads_per_stream": "4"}}, []string{"max_concurrent_uploads_per_stream", "0 (no cap) to max_concurrent_uploads (2)"}},
		{Sources{Flags: map[string]string{"max_concurrent_uploads_per_stream": "-1"}}, []string{"max_concurrent_uploads_per_stream", "0 (no cap)"}},
		{Sources{Flags: map[string]string{"s3_endpoint": "http://127.0.0.1:9000"}}, []string{"s3_bucket", "required"}},
		{Sources{Flags: map[string]string{"s3_bucket": "B!"}}, []string{"s3_bucket", "B!"}},
		{Sources{Flags: map[string]string{"etcd_endpoints": "ftp://x:1"}}, []string{"etcd_endpoints"}},
		{Sources{Flags: map[string]string{"etcd_password": "x"}}, []string{"etcd_password", "external etcd"}},
		{Sources{Flags: map[string]string{"key_prefix": "/bad/"}}, []string{"key_prefix"}},
		{Sources{Flags: map[string]string{"node_id": "a b"}}, []string{"node_id"}},
		{Sources{Flags: map[string]string{"log_format": "xml"}}, []string{"log_format"}},
		{Sources{Flags: map[string]string{"demo_rate": "0"}}, []string{"demo_rate"}},
		{Sources{Flags: map[string]string{"upload_retry_max_delay": "10ms"}}, []string{"upload_retry_max_delay", "upload_retry_delay"}},
		{Sources{Flags: map[string]string{"transfer_deadline": "-1s"}}, []string{"transfer_deadline", "positive"}},
		{Sources{Flags: map[string]string{"transfer_deadline": "180s"}}, []string{"transfer_deadline", "s3_transfer_timeout"}},
		{Sources{Flags: map[string]string{"persist_timeout": "0s"}}, []string{"persist_timeout", "positive"}},
		{Sources{Flags: map[string]string{"start_concurrency": "0"}}, []string{"start_concurrency", "1 to 256"}},
		{Sources{Flags: map[string]string{"max_unpersisted_bytes": "1MiB"}}, []string{"max_unpersisted_bytes", "fragment_target_size"}},
		{Sources{Flags: map[string]string{"demo_stream": "../etc"}}, []string{"demo_stream", "invalid stream id"}},
		{Sources{File: []byte("streams:\n  - id: a\n  - id: a\n"), FileName: "n.yaml"}, []string{"streams[1]", "declared twice"}},
		{Sources{File: []byte("streams:\n  - id: a\n    log_dir: /x\n  - id: b\n    log_dir: /x/\n"), FileName: "n.yaml"}, []string{"streams[1] (b)", `log_dir /x is stream "a"'s too`}},
		{Sources{File: []byte("streams:\n  - log_dir: /x\n"), FileName: "n.yaml"}, []string{"streams[0]", "id is required"}},
		{Sources{File: []byte("streams:\n  - id: a\n    epoh: 2\n"), FileName: "n.yaml"}, []string{"line 3", `unknown key "epoh"`}},
		{Sources{File: []byte("streams:\n  - id: a b\n"), FileName: "n.yaml"}, []string{"streams[0]", "invalid stream id"}},
		{Sources{File: []byte("- 1\n"), FileName: "n.yaml"}, []string{"n.yaml", "mapping"}},
		{Sources{File: []byte("key_prefix: [a\n"), FileName: "n.yaml"}, []string{"n.yaml"}},
		{Sources{Flags: map[string]string{"no_such": "1"}}, []string{`unknown setting "no_such"`}},
		{Sources{Flags: map[string]string{"s3_sse": "yes"}}, []string{"s3_sse", "external S3"}},
		{Sources{Flags: map[string]string{"s3_bucket": "bkt", "s3_sse": "aes"}}, []string{"s3 sse", "aes", "AES256"}},
		{Sources{Flags: map[string]string{"s3_bucket": "bkt", "s3_sse_kms_key_id": "k"}}, []string{"kms key id", "aws:kms"}},
		{Sources{Flags: map[string]string{"s3_bucket": "bkt", "s3_expected_bucket_owner": "me"}}, []string{"expected bucket owner", "12 digits"}},
		{Sources{Flags: map[string]string{"s3_probe_interval": "-1s"}}, []string{"s3_probe_interval"}},
		{Sources{Flags: map[string]string{"gc_interval": "-1s"}}, []string{"gc_interval"}},
		{Sources{Flags: map[string]string{"cost_get_per_1000": "cheap"}}, []string{"cost_get_per_1000", "not a price"}},
		{Sources{Flags: map[string]string{"cost_storage_gb_month": "-1"}}, []string{"cost_storage_gb_month", "not a price"}},
		{Sources{Flags: map[string]string{"gc_mode": "yes"}}, []string{"gc_mode", "dry-run or delete"}},
		{Sources{Flags: map[string]string{"stream_park_retry_interval": "0"}}, []string{"stream_park_retry_interval", "positive"}},
	}
	for _, c := range cases {
		c.src.Dir = "/work"
		_, err := Resolve(ModeDemo, c.src)
		if err == nil {
			t.Errorf("%+v: accepted", c.src)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: error %q does not mention %q", c.src, err, w)
			}
		}
	}
}

func TestFileStreamsAndPaths(t *testing.T) {
	file := []byte(`
data_dir: data
etcd_endpoints: [127.0.0.1:2379, 127.0.0.1:22379]
s3_endpoint: http://127.0.0.1:9000
s3_bucket: tier
s3_path_style: true
retention_max_bytes: 10GiB
streams:
  - id: orders
    log_dir: logs/orders
    epoch: 3
    retention_max_age: 168h
  - id: payments
    fragment_target_size: 16MiB
`)
	s := resolve(t, ModeRun, Sources{File: file, FileName: "conf/node.yaml", Dir: "/srv"})
	if s.DataDir != "/srv/data" || s.ConfigFile != "/srv/conf/node.yaml" {
		t.Fatalf("paths: %q %q", s.DataDir, s.ConfigFile)
	}
	if s.EmbeddedEtcd() || s.EmbeddedS3() || len(s.EtcdEndpoints) != 2 || !s.S3PathStyle {
		t.Fatalf("external: %+v", s)
	}
	if len(s.Streams) != 2 {
		t.Fatalf("streams: %+v", s.Streams)
	}
	o, p := s.Streams[0], s.Streams[1]
	if o.ID != "orders" || o.LogDir != "/srv/logs/orders" || o.Epoch != 3 || o.RetentionMaxAge != 168*time.Hour {
		t.Fatalf("orders: %+v", o)
	}
	if p.LogDir != "/srv/data/streams/payments" || p.Epoch != 1 || p.FragmentTargetSize != 16<<20 {
		t.Fatalf("payments: %+v", p)
	}
	if r := s.Retention(o); r.MaxBytes != 10<<30 || r.MaxAgeMillis != (168*time.Hour).Milliseconds() {
		t.Fatalf("retention of orders: %+v", r)
	}
	if r := s.Retention(p); r.MaxBytes != 10<<30 || r.MaxAgeMillis != 0 {
		t.Fatalf("retention of payments: %+v", r)
	}
	if c := s.S3Config(); c.Endpoint != "http://127.0.0.1:9000" || c.Bucket != "tier" || !c.PathStyle || c.Region != "us-east-1" {
		t.Fatalf("s3 config: %+v", c)
	}
}

func TestSecretsAreRedacted(t *testing.T) {
	s := resolve(t, ModeRun, Sources{Env: []string{"STREAMTIER_S3_BUCKET=tier", "STREAMTIER_S3_ACCESS_KEY=AKIA", "STREAMTIER_S3_SECRET_KEY=hunter2"}})
	r := s.Redacted()
	if r["s3_secret_key"] != "<redacted>" || r["s3_access_key"] != "AKIA" || r["s3_bucket"] != "tier" {
		t.Fatalf("redacted: %v", r)
	}
	for k, v := range r {
		if strings.Contains(v, "hunter2") {
			t.Fatalf("%s shows the secret", k)
		}
	}
}

func TestValues(t *testing.T) {
	sizes := map[string]uint64{"64MiB": 64 << 20, "8 MiB": 8 << 20, "20MB": 20e6, "1.5GiB": 3 << 29, "4096": 4096, "1kb": 1000, "2KiB": 2048, "0": 0}
	for in, want := range sizes {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "12 parsecs", "1e9", "-3"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
	rates := map[string]int64{"unlimited": 0, "20MB/s": 20e6, "100MiB": 100 << 20, "0": 0, "5MBps": 5e6}
	for in, want := range rates {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := ParseRate("fast"); err == nil {
		t.Error("ParseRate(fast) accepted")
	}
	if d, err := ParseDuration("none"); err != nil || d != 0 {
		t.Errorf("ParseDuration(none) = %v, %v", d, err)
	}
	if _, err := ParseBool("maybe"); err == nil {
		t.Error("ParseBool(maybe) accepted")
	}
	for in, want := range map[float64]string{0: "0 B", 812: "812 B", 1536: "1.50 KiB", 64 << 20: "64.0 MiB", 300 << 30: "300 GiB"} {
		if got := FormatSize(in); got != want {
			t.Errorf("FormatSize(%v) = %q, want %q", in, got, want)
		}
	}
}

// TestFlagsAndLoad parses a command line with the registered flags and reads the file it names.
func TestFlagsAndLoad(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "node.yaml")
	if err := os.WriteFile(conf, []byte("persist_threshold: 9\ns3_path_style: false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	f := RegisterFlags(fs)
	if err := fs.Parse([]string{"--config", conf, "--persist-interval", "7s", "--demo"}); err != nil {
		t.Fatal(err)
	}
	s, err := Load(ModeRun, f, []string{"STREAMTIER_PERSIST_THRESHOLD=11"})
	if err != nil {
		t.Fatal(err)
	}
	if s.PersistThreshold != 11 || s.PersistInterval != 7*time.Second || !s.Demo || s.ConfigFile != conf {
		t.Fatalf("loaded %+v", s)
	}
	f2 := RegisterFlags(flag.NewFlagSet("node", flag.ContinueOnError))
	if _, err := Load(ModeRun, f2, []string{"STREAMTIER_CONFIG=" + filepath.Join(dir, "missing.yaml")}); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("missing config file: %v", err)
	}
	if len(Table()) != len(table) || Table()[0].Flag != "--data-dir" || Table()[0].Env != "STREAMTIER_DATA_DIR" {
		t.Fatalf("table: %+v", Table()[0])
	}
}

// TestTaskDeadlinesReachTheNode: the task deadlines and the transfer deadline (four times
// the S3 transfer timeout unless set) are what the node runs with.
// TestEncryptionAndOwnerReachTheStore: the S3 encryption and owner settings reach the
// store's configuration.
func TestEncryptionAndOwnerReachTheStore(t *testing.T) {
	s := resolve(t, ModeRun, Sources{Flags: map[string]string{"s3_bucket": "bkt", "s3_sse": "aws:kms", "s3_sse_kms_key_id": "alias/k",
		"s3_expected_bucket_owner": "123456789012"}})
	c := s.S3Config()
	if c.SSE != "aws:kms" || c.SSEKMSKeyID != "alias/k" || c.ExpectedBucketOwner != "123456789012" {
		t.Fatalf("s3 config: %+v", c)
	}
	if d := resolve(t, ModeRun, Sources{}); d.S3SSE != "" || d.S3ProbeInterval != 30*time.Second || d.GCInterval != 0 || d.GCMode != "dry-run" || d.ParkRetryInterval != time.Minute ||
		d.CostPutPer1000 != 0.005 || d.CostListPer1000 != 0.005 || d.CostGetPer1000 != 0.0004 || d.CostStoragePerGBMonth != 0.023 {
		t.Fatalf("defaults: %+v", d)
	}
}

func TestTaskDeadlinesReachTheNode(t *testing.T) {
	s := resolve(t, ModeRun, Sources{Flags: map[string]string{"s3_transfer_timeout": "2m", "persist_timeout": "5s", "group_upload_timeout": "7s", "resolve_timeout": "9s"}})
	c := s.NodeConfig(zerolog.Nop())
	if c.Stream.TransferDeadline != 8*time.Minute || c.PersistTimeout != 5*time.Second || c.GroupUploadTimeout != 7*time.Second || c.ResolveTimeout != 9*time.Second {
		t.Fatalf("node config: transfer deadline %v, persist %v, group upload %v, resolve %v", c.Stream.TransferDeadline, c.PersistTimeout, c.GroupUploadTimeout, c.ResolveTimeout)
	}
	s = resolve(t, ModeRun, Sources{Flags: map[string]string{"transfer_deadline": "30m"}})
	if c := s.NodeConfig(zerolog.Nop()); c.Stream.TransferDeadline != 30*time.Minute {
		t.Fatalf("explicit transfer deadline: %v", c.Stream.TransferDeadline)
	}
}

// TestMaxUnpersistedBytesReachesTheNode: the bound on bytes not yet durable is passed to the
// stream readers; 0 leaves it to the core (sized from the uploads one stream may run).
func TestMaxUnpersistedBytesReachesTheNode(t *testing.T) {
	s := resolve(t, ModeRun, Sources{Flags: map[string]string{"max_unpersisted_bytes": "512MiB"}})
	if c := s.NodeConfig(zerolog.Nop()); c.Stream.MaxUnpersistedBytes != 512<<20 {
		t.Fatalf("node config: max unpersisted bytes %d", c.Stream.MaxUnpersistedBytes)
	}
	s = resolve(t, ModeRun, Sources{})
	if c := s.NodeConfig(zerolog.Nop()); c.Stream.MaxUnpersistedBytes != 0 {
		t.Fatalf("default max unpersisted bytes %d, want 0 (the core sizes it)", c.Stream.MaxUnpersistedBytes)
	}
}

// TestFragmentMaxAgeReachesTheNode: the idle cut is on by default (60s, demo 5s); off (or a
// negative duration) turns it off, which the node takes as it is (actors.NoIdleCut: in Go
// too a negative age is off and a zero the default); a stream may override it, its own off
// turning it off for that stream alone. A 0, which once meant off, is refused by name
// everywhere rather than read as the default; so is a stream's epoch 0.
func TestFragmentMaxAgeReachesTheNode(t *testing.T) {
	s := resolve(t, ModeRun, Sources{})
	if c := s.NodeConfig(zerolog.Nop()); s.FragmentMaxAge != time.Minute || c.Stream.FragmentMaxAge != time.Minute {
		t.Fatalf("default fragment max age %v, core %v", s.FragmentMaxAge, c.Stream.FragmentMaxAge)
	}
	if d := resolve(t, ModeDemo, Sources{}); d.FragmentMaxAge != 5*time.Second {
		t.Fatalf("demo fragment max age %v", d.FragmentMaxAge)
	}
	for _, v := range []string{"off", "-1s"} {
		s = resolve(t, ModeRun, Sources{Flags: map[string]string{"fragment_max_age": v}})
		if c := s.NodeConfig(zerolog.Nop()); c.Stream.FragmentMaxAge != actors.NoIdleCut {
			t.Fatalf("fragment_max_age %s: node age %v, want actors.NoIdleCut", v, c.Stream.FragmentMaxAge)
		}
	}
	file := []byte("streams:\n  - id: quiet\n    fragment_max_age: off\n  - id: fast\n    fragment_max_age: 500ms\n  - id: plain\n")
	s = resolve(t, ModeRun, Sources{File: file, FileName: "n.yaml"})
	if q, f, p := s.Streams[0], s.Streams[1], s.Streams[2]; q.Options().FragmentMaxAge != actors.NoIdleCut || f.Options().FragmentMaxAge != 500*time.Millisecond || p.Options().FragmentMaxAge != 0 {
		t.Fatalf("per-stream fragment max age: quiet %v, fast %v, plain %v", q.FragmentMaxAge, f.FragmentMaxAge, p.FragmentMaxAge)
	}
	for _, src := range []Sources{
		{Flags: map[string]string{"fragment_max_age": "0"}},
		{Flags: map[string]string{"fragment_max_age": "0s"}},
		{File: []byte("streams:\n  - id: a\n    fragment_max_age: 0\n"), FileName: "n.yaml"},
	} {
		src.Dir = "/work"
		_, err := Resolve(ModeRun, src)
		if err == nil || !strings.Contains(err.Error(), "fragment_max_age") || !strings.Contains(err.Error(), "write off") {
			t.Errorf("%+v: error %v, want one naming fragment_max_age and saying to write off", src, err)
		}
	}
	_, err := Resolve(ModeRun, Sources{Dir: "/work", File: []byte("streams:\n  - id: a\n    epoch: 0\n"), FileName: "n.yaml"})
	if err == nil || !strings.Contains(err.Error(), "epoch") || !strings.Contains(err.Error(), "start at 1") {
		t.Errorf("epoch 0: error %v, want one saying epochs start at 1", err)
	}
}

// TestDemoRetentionDefault: the demo stream keeps 4 GiB remotely unless retention_max_bytes
// is set, to a size or to 0 (no limit); declared streams are not given the demo's bound.
func TestDemoRetentionDefault(t *testing.T) {
	d := resolve(t, ModeDemo, Sources{})
	if got := d.Retention(d.DemoStreamSettings()).MaxBytes; got != 4<<30 {
		t.Fatalf("demo stream retention %d, want 4 GiB", got)
	}
	if st := d.DemoStreamSettings(); st.ID != "demo" || st.LogDir != "/work/streamtier-data/streams/demo" || st.Epoch != 1 {
		t.Fatalf("demo stream: %+v", st)
	}
	if got := d.Retention(StreamSettings{ID: "other"}).MaxBytes; got != 0 {
		t.Fatalf("a declared stream got the demo's bound: %d", got)
	}
	for v, want := range map[string]uint64{"0": 0, "1GiB": 1 << 30} {
		s := resolve(t, ModeDemo, Sources{Flags: map[string]string{"retention_max_bytes": v}})
		if got := s.Retention(s.DemoStreamSettings()).MaxBytes; got != want {
			t.Errorf("retention_max_bytes %s: demo stream keeps %d, want %d", v, got, want)
		}
	}
	s := resolve(t, ModeDemo, Sources{Flags: map[string]string{"demo_retention_max_bytes": "64MiB"}})
	if got := s.Retention(s.DemoStreamSettings()).MaxBytes; got != 64<<20 {
		t.Errorf("demo_retention_max_bytes 64MiB: %d", got)
	}
}

// TestRemembered: a data directory's record fills the backend settings left at their
// defaults; the same values given again agree; other values from any source are refused
// naming the setting, its origin and the record.
func TestRemembered(t *testing.T) {
	rem := Remembered{File: "/d/backends.json", Where: "bucket tier at http://s3",
		Values: map[string]string{"etcd_endpoints": "", "etcd_prefix": "/streamtier", "s3_endpoint": "http://s3", "s3_bucket": "tier",
			"s3_region": "us-east-1", "s3_path_style": "true", "key_prefix": "streams"}}
	s := resolve(t, ModeRun, Sources{Remembered: rem, Flags: map[string]string{"s3_access_key": "k", "s3_secret_key": "s"}})
	if s.EmbeddedS3() || s.S3Endpoint != "http://s3" || s.S3Bucket != "tier" || !s.S3PathStyle || !s.EmbeddedEtcd() {
		t.Fatalf("remembered backends not taken: %+v", s)
	}
	if s.Origins["s3_bucket"] != "data dir record /d/backends.json" {
		t.Fatalf("origin %q", s.Origins["s3_bucket"])
	}
	same := resolve(t, ModeRun, Sources{Remembered: rem, Flags: map[string]string{"s3_endpoint": "http://s3/", "s3_path_style": "1"},
		Env: []string{"STREAMTIER_S3_BUCKET=tier"}})
	if same.S3Bucket != "tier" {
		t.Fatalf("%+v", same)
	}
	// Another route to the same bucket (a proxy) is no conflict.
	proxy := resolve(t, ModeRun, Sources{Remembered: rem, Flags: map[string]string{"s3_endpoint": "http://proxy:9000", "s3_region": "eu-west-1"}})
	if proxy.S3Endpoint != "http://proxy:9000" || proxy.S3Bucket != "tier" || proxy.S3Region != "eu-west-1" {
		t.Fatalf("%+v", proxy)
	}
	for _, src := range []Sources{
		{Flags: map[string]string{"s3_bucket": "other"}},
		{Env: []string{"STREAMTIER_KEY_PREFIX=other"}},
		{Flags: map[string]string{"etcd_prefix": "/elsewhere"}},
		{File: []byte("etcd_endpoints: [127.0.0.1:2379]\n"), FileName: "n.yaml"},
	} {
		src.Remembered, src.Dir = rem, "/work"
		_, err := Resolve(ModeRun, src)
		var ce *ConflictError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "was tiered to bucket tier at http://s3 (recorded in /d/backends.json)") ||
			!strings.Contains(err.Error(), "remove /d/backends.json") {
			t.Errorf("%+v: want a conflict naming the record, got %v", src, err)
		}
	}
	if _, err := Resolve(ModeRun, Sources{Dir: "/work", Remembered: Remembered{File: "/d/backends.json", Values: map[string]string{"s3_secret_key": "x"}}}); err == nil {
		t.Fatal("a record naming a credential was read")
	}
}

// TestFollowSettings: follow is per stream and off by default; follow_interval defaults to
// 1s and must be positive; follow is refused in cluster mode and for a non-boolean.
func TestFollowSettings(t *testing.T) {
	file := []byte("follow_interval: 250ms\nstreams:\n  - id: live\n    log_dir: /broker/live\n    follow: true\n  - id: copy\n    log_dir: /copies/copy\n")
	s := resolve(t, ModeRun, Sources{File: file, FileName: "node.yaml"})
	if !s.Streams[0].Follow || s.Streams[1].Follow || s.FollowInterval != 250*time.Millisecond {
		t.Fatalf("follow settings: %+v, interval %v", s.Streams, s.FollowInterval)
	}
	if d := resolve(t, ModeRun, Sources{}); d.FollowInterval != time.Second {
		t.Fatalf("default follow_interval %v, want 1s", d.FollowInterval)
	}
	for _, c := range []struct {
		src  Sources
		want []string
	}{
		{Sources{Flags: map[string]string{"follow_interval": "0"}}, []string{"follow_interval"}},
		{Sources{Env: []string{"STREAMTIER_FOLLOW_INTERVAL=-1s"}}, []string{"follow_interval"}},
		{Sources{File: []byte("streams:\n  - id: a\n    follow: maybe\n"), FileName: "n.yaml"}, []string{"streams[0].follow", "maybe"}},
		{Sources{File: []byte("cluster: true\nnode_id: n1\nstreams:\n  - id: a\n    follow: yes\n"), FileName: "n.yaml"}, []string{"streams[0]", "cluster mode"}},
	} {
		c.src.Dir = "/work"
		_, err := Resolve(ModeRun, c.src)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: error %v, want one containing %q", c.src, err, w)
			}
		}
	}
}
