package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/streamtier/streamtier/admin"
	"github.com/streamtier/streamtier/backends"
	"github.com/streamtier/streamtier/gc"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/verify"
)

// These tests build the node binary and run it as a user would, in a temporary directory:
// the demo with no --data-dir, stopped with SIGINT or killed, then the operator commands
// on its data.

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// nodeBinary builds the binary once per test process (with the race detector when the
// tests run with it, which reuses the packages the test build compiled).
func nodeBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "streamtier-node-bin")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "node")
		args := []string{"build", "-o", builtBin}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, ".")...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// syncBuffer collects a process's output while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// result is a finished command.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// checkNoPanic fails t when a process printed a Go panic or a data race.
func checkNoPanic(t *testing.T, what, stderr string) {
	t.Helper()
	for _, bad := range []string{"panic:", "goroutine ", "DATA RACE"} {
		if strings.Contains(stderr, bad) {
			t.Fatalf("%s printed %q:\n%s", what, bad, stderr)
		}
	}
}

// node runs the binary to completion in dir.
func node(t *testing.T, dir string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBinary(t), args...)
	cmd.Dir = dir
	cmd.Env = testEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}
	if err != nil && r.code <= 0 {
		t.Fatalf("node %v: %v\n%s", args, err, r)
	}
	checkNoPanic(t, fmt.Sprintf("node %v", args), r.stderr)
	return r
}

// testEnv is the environment without any STREAMTIER_ setting of the developer's, and with
// the remote reader's recycled range buffers poisoned (STREAMTIER_DEBUG_READ_POISON): a
// command that kept a chunk past the next Next would print or restore garbage.
func testEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STREAMTIER_") {
			env = append(env, kv)
		}
	}
	return append(env, "STREAMTIER_DEBUG_READ_POISON=1")
}

// running is a node process started in the background.
type running struct {
	t       *testing.T
	cmd     *exec.Cmd
	dataDir string
	stdout  *syncBuffer
	stderr  *syncBuffer
	done    chan struct{}
	client  admin.Client
}

// startNode starts the binary in dir and waits until its admin server answers.
func startNode(t *testing.T, dir string, args ...string) *running {
	t.Helper()
	return startNodeWith(t, nodeBinary(t), dir, args...)
}

// startNodeWith is startNode with the executable exe (a copy of the binary elsewhere).
func startNodeWith(t *testing.T, exe, dir string, args ...string) *running {
	t.Helper()
	r := &running{t: t, dataDir: filepath.Join(dir, "streamtier-data"), stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	for i, a := range args {
		if a == "--data-dir" {
			r.dataDir = args[i+1]
		}
	}
	r.cmd = exec.Command(exe, args...)
	r.cmd.Dir = dir
	r.cmd.Env = testEnv()
	r.cmd.Stdout, r.cmd.Stderr = r.stdout, r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { // owned by r: the process ending ends it
		r.cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			r.cmd.Process.Kill()
			<-r.done
		}
		if t.Failed() { // the node's own account of what happened, for whoever reads the failure
			log := r.stderr.String()
			if len(log) > 16<<10 {
				log = "…" + log[len(log)-16<<10:]
			}
			t.Logf("node %v, its log:\n%s", args, log)
		}
	})
	waitFor(t, 60*time.Second, "the node's run file and admin server", func() bool {
		select {
		case <-r.done:
			t.Fatalf("node exited during start:\n%s\n%s", r.stdout, r.stderr)
		default:
		}
		info, found, err := backends.ReadRunInfo(r.dataDir)
		if err != nil || !found || info.PID != r.cmd.Process.Pid {
			return false
		}
		r.client = admin.Client{Base: info.AdminURL}
		return r.client.Healthy(context.Background()) == nil
	})
	return r
}

// waitFor polls cond until it holds: the node offers no event for these conditions.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *running) status() admin.StreamReport {
	r.t.Helper()
	rep, err := r.client.Status(context.Background())
	if err != nil || len(rep.Streams) != 1 {
		r.t.Fatalf("status: %+v %v", rep, err)
	}
	return rep.Streams[0]
}

// stop sends sig and waits for the process to end, returning its exit code.
func (r *running) stop(sig syscall.Signal) int {
	r.t.Helper()
	if err := r.cmd.Process.Signal(sig); err != nil {
		r.t.Fatal(err)
	}
	select {
	case <-r.done:
	case <-time.After(60 * time.Second):
		r.t.Fatalf("node did not stop after %v:\n%s", sig, r.stderr)
	}
	checkNoPanic(r.t, "node", r.stderr.String())
	return r.cmd.ProcessState.ExitCode()
}

// metrics scrapes /metrics into "name{labels}" -> value, with each family's type.
func (r *running) metrics() (map[string]float64, map[string]dto.MetricType) {
	r.t.Helper()
	resp, err := http.Get(r.client.Base + "/metrics")
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		r.t.Fatalf("/metrics: %v", err)
	}
	out, types := map[string]float64{}, map[string]dto.MetricType{}
	for name, f := range fams {
		types[name] = f.GetType()
		for _, m := range f.Metric {
			var labels []string
			for _, l := range m.Label {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(labels)
			key := name + "{" + strings.Join(labels, ",") + "}"
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = m.Counter.GetValue()
			case dto.MetricType_GAUGE:
				out[key] = m.Gauge.GetValue()
			case dto.MetricType_HISTOGRAM:
				out[key] = float64(m.Histogram.GetSampleCount())
			case dto.MetricType_SUMMARY:
				out[key] = float64(m.Summary.GetSampleCount())
			}
		}
	}
	return out, types
}

// demoFlags make the demo small and quick: a low rate, small fragments and segments.
var demoFlags = []string{"--demo-rate", "2MB", "--fragment-target-size", "128KiB", "--segment-max-bytes", "1MiB",
	"--persist-interval", "200ms", "--progress", "log", "--progress-interval", "1s"}

func gcJSON(t *testing.T, dir string, args ...string) (gcOutput, result) {
	t.Helper()
	r := node(t, dir, append([]string{"gc", "--json", "--grace", "0"}, args...)...)
	var out gcOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("gc --json output: %v\n%s", err, r)
	}
	return out, r
}

func verifyJSON(t *testing.T, dir string, args ...string) (verify.Report, result) {
	t.Helper()
	r := node(t, dir, append([]string{"verify", "demo", "--json"}, args...)...)
	var rep verify.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("verify --json output: %v\n%s", err, r)
	}
	return rep, r
}

// TestBinaryDemo runs `node` with no --data-dir in a temporary directory, watches the
// metrics move, uses the commands on the running node, stops it with SIGINT, then checks
// that verify passes and gc finds no orphan. Then it corrupts the root object through the
// S3 protocol and checks that verify and gc say so and exit non-zero.
func TestBinaryDemo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n := startNode(t, dir, demoFlags...)
	waitFor(t, 30*time.Second, "a first persist", func() bool { return n.status().Remote.PersistedNext > 0 })
	first, types := n.metrics()
	before := n.status().Remote.PersistedNext
	waitFor(t, 30*time.Second, "more persists", func() bool { return n.status().Remote.PersistedNext > before })
	second, _ := n.metrics()

	for _, name := range []string{
		`streamtier_fragments_uploaded_total{}`, `streamtier_uploaded_bytes_total{}`, `streamtier_persists_total{outcome="ok"}`,
		`streamtier_s3_requests_total{class="none",op="put_fragment"}`, `streamtier_s3_requests_total{class="none",op="put_object"}`,
		`streamtier_etcd_requests_total{class="none",op="txn"}`, `streamtier_stream_offset{offset="local_committed",stream="demo"}`,
		`streamtier_stream_offset{offset="persisted_next",stream="demo"}`, `streamtier_s3_request_duration_seconds{op="put_fragment"}`,
	} {
		if second[name] <= first[name] {
			t.Errorf("%s did not move as the demo ran: %v then %v", name, first[name], second[name])
		}
	}
	for _, name := range []string{
		`streamtier_pipeline_bytes{stage="assembly"}`, `streamtier_pipeline_bytes{stage="transfer"}`, `streamtier_pipeline_bytes{stage="persist"}`,
		`streamtier_governor_queued{}`, `streamtier_governor_tokens{}`, `streamtier_governor_rate_bytes_per_second{}`, `streamtier_reaper_queued{}`,
		`streamtier_streams_running{}`, `streamtier_transfers_running{}`, `streamtier_transfer_errors_total{class="retriable"}`,
		`streamtier_stream_lag_bytes{stream="demo"}`, `streamtier_stream_lag_seconds{stream="demo"}`,
		`streamtier_stream_last_persist_age_seconds{stream="demo"}`, `streamtier_latency_seconds{operation="persist"}`,
		`streamtier_reaper_total{kind="deleted"}`, `streamtier_etcd_request_duration_seconds{op="txn"}`,
	} {
		if _, ok := second[name]; !ok {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	for name, v := range first {
		if types[name[:strings.IndexByte(name, '{')]] == dto.MetricType_COUNTER && second[name] < v {
			t.Errorf("counter %s went down: %v then %v", name, v, second[name])
		}
	}
	if second[`streamtier_streams_running{}`] != 1 {
		t.Errorf("streams_running = %v", second[`streamtier_streams_running{}`])
	}

	// Commands against the running node.
	if r := node(t, dir, "status"); r.code != 0 || !strings.Contains(r.stdout, "demo") || !strings.Contains(r.stdout, "running") || !strings.Contains(r.stdout, "PERSISTED") {
		t.Fatalf("status:\n%s", r)
	}
	if r := node(t, dir, "status", "--json", "demo"); r.code != 0 || !strings.Contains(r.stdout, `"running": true`) {
		t.Fatalf("status --json:\n%s", r)
	}
	if r := node(t, dir, "status", "nope"); r.code != 1 || !strings.Contains(r.stderr, "unknown stream") {
		t.Fatalf("status of an unknown stream:\n%s", r)
	}
	if r := node(t, dir, "cut", "demo"); r.code != 0 || !strings.Contains(r.stdout, "cut done") {
		t.Fatalf("cut:\n%s", r)
	}
	if r := node(t, dir, "cut", "nope"); r.code != 1 || !strings.Contains(r.stderr, "unknown stream") {
		t.Fatalf("cut of an unknown stream:\n%s", r)
	}
	if r := node(t, dir, "retention", "demo"); r.code != 0 {
		t.Fatalf("retention:\n%s", r)
	}
	if r := node(t, dir, "retention", "demo", "--max-bytes", "lots"); r.code != 1 || !strings.Contains(r.stderr, "--max-bytes") {
		t.Fatalf("retention with a bad size:\n%s", r)
	}
	if r := node(t, dir, demoFlags...); r.code != 1 || !strings.Contains(r.stderr, "in use by another process: node pid") {
		t.Fatalf("a second node on the same data dir:\n%s", r)
	}
	// gc on a running node attaches to its embedded servers; the grace period keeps
	// everything just uploaded.
	if out, r := gcJSON(t, dir, "--grace", "1h"); r.code != 0 || len(out.Plan.Orphans) != 0 || out.Plan.Referenced == 0 {
		t.Fatalf("gc while running:\n%s", r)
	}

	if code := n.stop(syscall.SIGINT); code != 0 {
		t.Fatalf("SIGINT: exit %d\n%s\n%s", code, n.stdout, n.stderr)
	}
	out := n.stdout.String()
	for _, want := range []string{"stopped after", "stream demo: persisted offsets", "objects", "persist latency p50", "verify demo"} {
		if !strings.Contains(out, want) {
			t.Fatalf("summary lacks %q:\n%s", want, out)
		}
	}
	if _, found, _ := backends.ReadRunInfo(n.dataDir); found {
		t.Fatal("run file left after a clean stop")
	}

	rep, r := verifyJSON(t, dir)
	if r.code != 0 || !rep.OK() || rep.Fragments == 0 || rep.LocalCompared == 0 {
		t.Fatalf("verify after a clean stop:\n%s", r)
	}
	plan, r := gcJSON(t, dir)
	// Every object but the bucket claim the node created (format version 3) is referenced.
	if r.code != 0 || len(plan.Plan.Orphans) != 0 || len(plan.Plan.Undecided) != 0 || plan.Plan.Referenced != plan.Plan.Scanned-1 {
		t.Fatalf("gc after a clean stop found garbage:\n%s", r)
	}
	if r := node(t, dir, "status"); r.code != 0 || !strings.Contains(r.stdout, "no node is running") || !strings.Contains(r.stdout, "demo") {
		t.Fatalf("offline status:\n%s", r)
	}

	// Bad input against this data.
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"verify", "nope"}, 1, "unknown stream"},
		{[]string{"gc", "nope"}, 1, "unknown stream"},
		{[]string{"status", "nope"}, 1, "unknown stream"},
		{[]string{"verify", "../etc"}, 2, "invalid stream id"},
		{[]string{"cut", "demo"}, 1, "no node is running"},
		{[]string{"retention", "demo"}, 1, "no node is running"},
		{[]string{"verify"}, 2, "exactly one stream"},
		{[]string{"gc", "--grace", "soon"}, 2, "gc_grace_period"},
	} {
		if r := node(t, dir, c.args...); r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("node %v: want exit %d and %q:\n%s", c.args, c.code, c.want, r)
		}
	}

	// A corrupt root object, put into the bucket through S3 (a node with no stream serves
	// the embedded endpoint): verify and gc name it and fail; nothing is collected.
	offline := node(t, dir, "status", "--json")
	var st struct {
		Streams []struct {
			RootKey string `json:"root_key"`
		} `json:"streams"`
	}
	if err := json.Unmarshal([]byte(offline.stdout), &st); err != nil || len(st.Streams) != 1 {
		t.Fatalf("offline status --json: %v\n%s", err, offline)
	}
	rootKey := st.Streams[0].RootKey
	host := startNode(t, dir, "run", "--progress", "off")
	store := hostStore(t, host)
	if err := store.PutObject(context.Background(), rootKey, []byte("OSIR this is not a root")); err != nil {
		t.Fatal(err)
	}
	if code := host.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("host node: exit %d\n%s", code, host.stderr)
	}
	if rep, r := verifyJSON(t, dir); r.code != 1 || rep.OK() || rep.Findings[0].Key != rootKey {
		t.Fatalf("verify with a corrupt root:\n%s", r)
	}
	if r := node(t, dir, "verify", "demo"); r.code != 1 || !strings.Contains(r.stdout, "FINDINGS") || !strings.Contains(r.stdout, rootKey) {
		t.Fatalf("verify table with a corrupt root:\n%s", r)
	}
	plan, r = gcJSON(t, dir)
	if r.code != 1 || len(plan.Plan.Orphans) != 0 || len(plan.Plan.Undecided) == 0 || !strings.Contains(r.stderr, rootKey) {
		t.Fatalf("gc with a corrupt root:\n%s", r)
	}
}

// hostStore is an S3 client of the embedded endpoint a running node serves (from its run
// file): how a test puts objects into the bucket through the S3 protocol.
func hostStore(t *testing.T, host *running) *s3io.Store {
	t.Helper()
	info, _, err := backends.ReadRunInfo(host.dataDir)
	if err != nil || info.S3 == nil {
		t.Fatalf("run file of the host node: %+v %v", info, err)
	}
	store, err := s3io.NewStore(context.Background(), s3io.Config{Endpoint: info.S3.Endpoint, Region: info.S3.Region, Bucket: info.S3.Bucket,
		PathStyle: true, AccessKey: info.S3.AccessKey, SecretKey: info.S3.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// TestBinaryKillAndRestart kills the demo while uploads are not yet persisted, restarts it
// (it resumes from what is persisted and the load resumes where the log ends), stops it
// cleanly, and checks that verify passes, that gc lists the garbage the kill left as young
// (the store's clock, a one-minute margin) and that delete mode refuses a grace of 0 by
// name and deletes nothing.
func TestBinaryKillAndRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A long persist interval and a high threshold let uploaded fragments wait for their
	// persist, so that the kill leaves some behind.
	slow := append(slices.Clone(demoFlags), "--persist-interval", "2s", "--persist-threshold", "1000")
	n := startNode(t, dir, slow...)
	waitFor(t, 30*time.Second, "a persist, then uploads waiting for the next", func() bool {
		s := n.status()
		return s.Remote.PersistedNext > 0 && s.Pipeline.UnpersistedEdits > 0
	})
	killedAt := n.status()
	if code := n.stop(syscall.SIGKILL); code != -1 {
		t.Fatalf("SIGKILL: exit %d", code)
	}

	// A superseded root left in the bucket (as a crash between a persist and the reaper
	// leaves one): the clean stop must not wait for it, and gc must collect it.
	host := startNode(t, dir, "run", "--progress", "off")
	store := hostStore(t, host)
	staleRoot := manifest.RootKey(manifest.DefaultKeyPrefix, "demo", 1, 0xdeadbeef)
	if err := store.PutObject(context.Background(), staleRoot, []byte("an old root")); err != nil {
		t.Fatal(err)
	}
	if code := host.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("host node: exit %d\n%s", code, host.stderr)
	}

	n = startNode(t, dir, demoFlags...)
	if !strings.Contains(n.stderr.String(), "demo load resumes") {
		t.Fatalf("the demo load did not resume:\n%s", n.stderr)
	}
	waitFor(t, 30*time.Second, "persists past the kill", func() bool {
		return n.status().Remote.PersistedNext > killedAt.Remote.Next
	})
	if code := n.stop(syscall.SIGINT); code != 0 {
		t.Fatalf("SIGINT: exit %d\n%s", code, n.stderr)
	}
	if strings.Contains(n.stderr.String(), "stopping with work in flight") {
		t.Fatalf("the clean stop did not finish its work:\n%s", n.stderr)
	}

	if rep, r := verifyJSON(t, dir); r.code != 0 || !rep.OK() {
		t.Fatalf("verify after kill and restart:\n%s", r)
	}
	// The garbage the kill left is seconds old: gc judges ages on the store's clock with a
	// one-minute margin, so even with --grace 0 a dry run lists it as young (kept), and
	// delete mode refuses a grace below 5 minutes by name and deletes nothing. The deletion
	// of aged garbage is gc's package tests' (a frozen store clock), not this one's: no
	// test hook shifts the binary's clock, and the rule is not weakened for a test.
	plan, r := gcJSON(t, dir)
	// At least one upload the kill left unpersisted and the stale root (an upload in flight
	// at the kill may never have reached the bucket). Unless the kill fell between a
	// persist's root PUT and its etcd write: the next start adopted that root, and the
	// uploads it names are referenced, not garbage (the root it replaced went to the reaper).
	wantYoung := 2
	if strings.Contains(host.stderr.String()+n.stderr.String(), "adopted the record's child root") {
		wantYoung = 1
	}
	if r.code != 0 || len(plan.Plan.Orphans) != 0 || len(plan.Plan.Young) < wantYoung {
		t.Fatalf("gc after a kill: want the unpersisted uploads and the stale root as young garbage, no orphan:\n%s", r)
	}
	if !slices.ContainsFunc(plan.Plan.Young, func(o gc.Orphan) bool { return o.Key == staleRoot && strings.Contains(o.Reason, "superseded root") }) {
		t.Fatalf("gc does not list the stale root %s:\n%s", staleRoot, r)
	}
	for _, o := range plan.Plan.Young {
		if !strings.Contains(o.Reason, "never persisted") && !strings.Contains(o.Reason, "superseded root") {
			t.Errorf("garbage %s: unexpected reason %q", o.Key, o.Reason)
		}
	}
	refused := node(t, dir, "gc", "--delete", "--grace", "0")
	if refused.code != 1 || !strings.Contains(refused.stderr, "grace period 0s") || !strings.Contains(refused.stderr, "below 5m0s") {
		t.Fatalf("gc --delete --grace 0: want a refusal naming the grace and the minimum:\n%s", refused)
	}
	del, r := gcJSON(t, dir, "--delete", "--grace", "5m")
	if r.code != 0 || del.Deleted == nil && len(del.Plan.Orphans) != 0 || del.Deleted != nil && len(del.Deleted.Deleted) != 0 {
		t.Fatalf("gc --delete --grace 5m deleted garbage of seconds ago:\n%s", r)
	}
	// Nothing deleted: the same garbage and references (the scan counts one object more:
	// the claim `gc --delete` wrote when it opened this version 2 prefix).
	after, r := gcJSON(t, dir)
	key := func(o gc.Orphan) string { return o.Key }
	if r.code != 0 || after.Plan.Referenced != plan.Plan.Referenced || !slices.Equal(mapKeys(after.Plan.Young, key), mapKeys(plan.Plan.Young, key)) {
		t.Fatalf("gc after the refused deletes: %d referenced (was %d), %d young (was %d):\n%s",
			after.Plan.Referenced, plan.Plan.Referenced, len(after.Plan.Young), len(plan.Plan.Young), r)
	}
	if rep, r := verifyJSON(t, dir); r.code != 0 || !rep.OK() {
		t.Fatalf("verify after gc:\n%s", r)
	}
}

// TestBinaryBadInput: wrong commands, settings, configuration files and unreachable
// servers give a clear message and a non-zero exit, never a panic.
func TestBinaryBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	conf := filepath.Join(dir, "node.yaml")
	if err := os.WriteFile(conf, []byte("persist_interval: 2s\nfragmant_target_size: 1MiB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	unreachable := []string{"--etcd-endpoints", "127.0.0.1:1", "--etcd-dial-timeout", "500ms",
		"--s3-endpoint", "http://127.0.0.1:1", "--s3-bucket", "tier", "--s3-access-key", "a", "--s3-secret-key", "b"}
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"--fragment-target-size", "lots"}, 2, "setting fragment_target_size (from flag --fragment-target-size)"},
		{[]string{"run", "--config", conf}, 2, `line 2: unknown setting "fragmant_target_size"`},
		{[]string{"run", "--config", filepath.Join(dir, "missing.yaml")}, 2, "missing.yaml"},
		{[]string{"run", "--s3-endpoint", "http://127.0.0.1:9000"}, 2, "s3_bucket"},
		{[]string{"run", "--admin-addr", "nowhere"}, 2, "admin_addr"},
		{[]string{"run", "--no-such-flag"}, 2, "no-such-flag"},
		{[]string{"run", "extra"}, 2, "unexpected argument"},
		{[]string{"gc", "--data-dir", filepath.Join(dir, "absent")}, 1, "no such directory"},
		{[]string{"verify", "demo", "--data-dir", filepath.Join(dir, "absent")}, 1, "no such directory"},
		{[]string{"status", "--data-dir", filepath.Join(dir, "absent")}, 1, "no such directory"},
		{append([]string{"gc"}, unreachable...), 1, "127.0.0.1:1"},
		{append([]string{"verify", "demo"}, unreachable...), 1, "127.0.0.1:1"},
		{append([]string{"status"}, unreachable...), 1, "127.0.0.1:1"},
		{append([]string{"run"}, unreachable...), 1, "127.0.0.1:1"},
		{[]string{"cut"}, 2, "exactly one stream"},
		{[]string{"segments", "dump"}, 2, "usage"},
	}
	for _, c := range cases {
		r := node(t, dir, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("node %v: want exit %d and %q in stderr:\n%s", c.args, c.code, c.want, r)
		}
	}
	env := testEnv()
	cmd := exec.Command(nodeBinary(t), "run")
	cmd.Dir, cmd.Env = dir, append(env, "STREAMTIER_PERSIST_INTERVAL=soon")
	out, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), "setting persist_interval (from env STREAMTIER_PERSIST_INTERVAL)") {
		t.Fatalf("bad environment variable: exit %d\n%s", cmd.ProcessState.ExitCode(), out)
	}
	if r := node(t, dir, "help"); r.code != 0 || !strings.Contains(r.stdout, "node gc") {
		t.Fatalf("help:\n%s", r)
	}
	if r := node(t, dir, "settings"); r.code != 0 || !strings.Contains(r.stdout, "STREAMTIER_FRAGMENT_TARGET_SIZE") {
		t.Fatalf("settings:\n%s", r)
	}
}

// mapKeys maps xs by f and sorts the result.
func mapKeys[T any](xs []T, f func(T) string) []string {
	out := make([]string, 0, len(xs))
	for _, x := range xs {
		out = append(out, f(x))
	}
	sort.Strings(out)
	return out
}
