package actors

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamtier/streamtier/actors/governorcore"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// nth returns a hook that panics with what on the n-th message of type T it sees (once).
func nth[T any](n int64, what string, seen *atomic.Int64) func(msg any) {
	return func(msg any) {
		if _, ok := msg.(T); ok && seen.Add(1) == n {
			panic(what)
		}
	}
}

// TestPanicsMidRunUploadsAndDeletionsContinue: the governor, the reaper, a drain and a
// transfer task each panic once in the middle of tiering a stream with remote retention.
// Every one comes back working and says so: every offset is persisted, retention keeps
// trimming and the reaper keeps deleting.
func TestPanicsMidRunUploadsAndDeletionsContinue(t *testing.T) {
	w := newWorld(t, worldOptions{})
	log, logs := testLogger(t)
	var govSeen, reapSeen, drainSeen, transferSeen atomic.Int64
	faults := &faultHooks{
		governor: nth[*submitTransfer](5, "injected governor fault", &govSeen),
		reaper:   nth[*reapRequest](2, "injected reaper fault", &reapSeen),
		drain:    nth[drainWake](2, "injected drain fault", &drainSeen),
		transfer: func(s *submitTransfer) {
			if transferSeen.Add(1) == 7 {
				panic("injected transfer fault")
			}
		},
	}
	n := startNode(w, Config{Logger: log, faults: faults, Stream: StreamOptions{
		FragmentTargetSize: 32 << 10, PersistThreshold: 2, PersistInterval: 50 * time.Millisecond,
		UploadRetryDelay: 100 * time.Millisecond, RebalanceThreshold: 8,
	}})
	lg := openLog(t, segments.Options{MaxSegmentBytes: 128 << 10})
	policy := manifest.Policy{MaxBytes: 256 << 10}
	if err := n.AddStream(StreamSpec{ID: "pm", Log: lg, Epoch: 1, Retention: policy}); err != nil {
		t.Fatal(err)
	}
	var deletedAtReaperRestart int64 = -1
	for i := range 4 {
		writeLog(t, lg, uint64(10+i), loadgen.Limit{Bytes: 256 << 10})
		persisted(t, n, "pm", lg.NextOffset(), 60*time.Second)
		if deletedAtReaperRestart < 0 && reapSeen.Load() >= 2 {
			deletedAtReaperRestart = n.Metrics().Reaper.Deleted.Load()
		}
	}
	if govSeen.Load() < 5 || reapSeen.Load() < 2 || drainSeen.Load() < 2 || transferSeen.Load() < 7 {
		t.Fatalf("not every fault fired: governor %d/5, reaper %d/2, drain %d/2, transfer %d/7",
			govSeen.Load(), reapSeen.Load(), drainSeen.Load(), transferSeen.Load())
	}
	until(t, 20*time.Second, "retention trims and the reaper deletes after its restart", func() (bool, string) {
		_ = n.EvaluateRetention("pm")
		st, err := n.Status(context.Background(), "pm")
		del := n.Metrics().Reaper.Deleted.Load()
		return err == nil && st.Core.TotalSize <= policy.MaxBytes && del > deletedAtReaperRestart,
			fmt.Sprintf("size %d, deleted %d (%d at the reaper's restart); %v", st.Core.TotalSize, del, deletedAtReaperRestart, err)
	})
	m := n.Metrics()
	if m.ActorRestarts.Load() != 3 || m.TaskPanics.Load() != 1 || m.CoreErrors.Load() != 0 {
		t.Fatalf("restarts %d (want governor, reaper, drain), task panics %d, core errors %d",
			m.ActorRestarts.Load(), m.TaskPanics.Load(), m.CoreErrors.Load())
	}
	for _, said := range []string{"governor restarted", "reaper restarted", "drain failed; restarting it", "transfer task panicked"} {
		if logs.Count(said) == 0 {
			t.Errorf("nothing logged like %q", said)
		}
	}
}

// TestGovernorDeadlineRunsFromAdmission: under a rate limit the queue holds fragments far
// longer than the transfer deadline. The deadline runs from admission, so it never fires:
// every fragment is submitted and uploaded once (no copy piles up in the queue), and the
// measured upload rate stays within 5% of the setting.
func TestGovernorDeadlineRunsFromAdmission(t *testing.T) {
	if testing.Short() {
		t.Skip("measures a rate over 6 s")
	}
	const rate = 1 << 20
	w := newWorld(t, worldOptions{})
	log, _ := testLogger(t)
	n := startNode(w, Config{Logger: log, Governor: governorcore.Config{RateBytesPerSec: rate}, Stream: StreamOptions{
		// The deadline (3 s) is far below the ~10 s a fragment waits in the queue. The bound on
		// unpersisted bytes is raised above the whole log so that the queue is the governor's:
		// at the default (4 fragments) the persist round trip, not the rate, set the pace on a
		// loaded machine (ratio 0.495, the queue never long).
		FragmentTargetSize: 64 << 10, PersistThreshold: 4, PersistInterval: 200 * time.Millisecond,
		TransferDeadline: 3 * time.Second, MaxUnpersistedBytes: 16 << 20,
	}})
	lg := openLog(t, segments.Options{MaxSegmentBytes: 4 << 20})
	writeLog(t, lg, 20, loadgen.Limit{Bytes: 10 << 20}) // about ten seconds of queue
	if err := n.AddStream(StreamSpec{ID: "rl", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	m := n.Metrics()
	until(t, 10*time.Second, "uploads started", func() (bool, string) { return m.BytesUploaded.Load() > 0, "" })
	time.Sleep(time.Second) // the initial burst distorts the first second; the window below counts
	b0, t0 := m.BytesUploaded.Load(), time.Now()
	time.Sleep(6 * time.Second)
	b1, t1 := m.BytesUploaded.Load(), time.Now()
	got := float64(b1-b0) / t1.Sub(t0).Seconds()
	st, err := n.Status(context.Background(), "rl")
	if err != nil {
		t.Fatal(err)
	}
	gs, err := n.GovernorStatus(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	k := st.Core.Counters
	t.Logf("rate %.0f B/s (ratio %.3f); cuts %d, submitted %d, superseded %d, admitted %d, queued %d, deadline resubmits %d",
		got, got/rate, k.Cuts, gs.Submitted, gs.Superseded, gs.Admitted, gs.Queued, k.DeadlineResubmits)
	if k.DeadlineResubmits != 0 || gs.Submitted != k.Cuts || gs.Superseded != 0 || k.TransientRetries+k.NonTransientRetries != 0 {
		t.Fatalf("duplicate submissions: %d cuts, %d submitted, %d superseded, %d deadline resubmits",
			k.Cuts, gs.Submitted, gs.Superseded, k.DeadlineResubmits)
	}
	if gs.Queued == 0 || k.Cuts < 100 {
		t.Fatalf("the queue was never long: %d queued, %d cuts", gs.Queued, k.Cuts)
	}
	if uploaded := m.FragmentsUploaded.Load(); uploaded > int64(gs.Admitted) {
		t.Fatalf("%d uploads for %d admissions", uploaded, gs.Admitted)
	}
	if math.Abs(got-rate)/rate > 0.05 {
		t.Fatalf("upload rate %.0f B/s is not within 5%% of %d B/s", got, rate)
	}
}

// TestHungTransferAbandonedFreesItsSlot: with max_concurrent_uploads 1, the first upload
// hangs outside its context (the hook blocks, ignoring it, like a read on a hung disk). Its
// transfer deadline fires and the reader resubmits the fragment: the governor abandons the
// hung attempt, frees its slot and says so (log, counter, status), so the stream still gets
// everything persisted. When the hung task ends at last, its transferDone frees nothing: the
// uploads after it, of two streams, still run one at a time. Before the fix the resubmission
// queued behind the hung admission for ever and nothing more was uploaded.
func TestHungTransferAbandonedFreesItsSlot(t *testing.T) {
	w := newWorld(t, worldOptions{})
	log, logs := testLogger(t)
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	var node atomic.Pointer[Node]
	var uploads, afterRelease, maxRunning atomic.Int64
	var ended atomic.Bool // the hung task's transferDone was handled
	faults := &faultHooks{transfer: func(s *submitTransfer) {
		if uploads.Add(1) == 1 {
			<-release // hangs, deaf to its context, until the test lets it go
			return
		}
		if ended.Load() {
			// The uploads once the hung task ended: each must see itself alone running.
			afterRelease.Add(1)
			running := node.Load().Metrics().TransfersRunning.Load()
			for m := maxRunning.Load(); running > m && !maxRunning.CompareAndSwap(m, running); m = maxRunning.Load() {
			}
		}
	}}
	n := startNode(w, Config{Logger: log, faults: faults, Governor: governorcore.Config{MaxConcurrent: 1},
		Stream: StreamOptions{FragmentTargetSize: 32 << 10, PersistThreshold: 2, PersistInterval: 50 * time.Millisecond,
			TransferDeadline: 500 * time.Millisecond}})
	node.Store(n)
	t.Cleanup(unblock) // before the node stops (cleanups run last first): goleak stays clean
	lg := openLog(t, segments.Options{MaxSegmentBytes: 128 << 10})
	writeLog(t, lg, 30, loadgen.Limit{Bytes: 256 << 10})
	if err := n.AddStream(StreamSpec{ID: "hung", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	persisted(t, n, "hung", lg.NextOffset(), 30*time.Second)

	m := n.Metrics()
	gs, err := n.GovernorStatus(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("governor: %+v; uploads %d, abandoned %d", gs, uploads.Load(), m.TransfersAbandoned.Load())
	if gs.Abandoned < 1 || m.TransfersAbandoned.Load() != int64(gs.Abandoned) || gs.AbandonedRunning != 1 {
		t.Fatalf("abandoned %d (metric %d), abandoned still running %d; want at least 1, the same, and 1 (the hung task)",
			gs.Abandoned, m.TransfersAbandoned.Load(), gs.AbandonedRunning)
	}
	if logs.Count("transfer abandoned", `"stream":"hung"`, `"ran":`) == 0 {
		t.Errorf("no warning naming the stream and how long the abandoned transfer ran")
	}

	// The hung task ends at last: its transferDone must not free a slot a second time.
	unblock()
	until(t, 10*time.Second, "the hung task's transferDone", func() (bool, string) {
		gs, err := n.GovernorStatus(context.Background())
		return err == nil && gs.AbandonedRunning == 0 && m.TransfersRunning.Load() == 0,
			fmt.Sprintf("%+v, transfers running %d; %v", gs, m.TransfersRunning.Load(), err)
	})
	ended.Store(true)
	if logs.Count("abandoned transfer task ended at last") == 0 {
		t.Errorf("nothing logged when the abandoned task ended")
	}
	if gs, _ := n.GovernorStatus(context.Background()); gs.InFlight != 0 || gs.Running != 0 {
		t.Fatalf("after the late transferDone: in flight %d, running %d, want 0, 0", gs.InFlight, gs.Running)
	}
	// Two streams now compete for the one slot: a slot freed twice would run two at once.
	lg2 := openLog(t, segments.Options{MaxSegmentBytes: 128 << 10})
	writeLog(t, lg2, 31, loadgen.Limit{Bytes: 256 << 10})
	writeLog(t, lg, 32, loadgen.Limit{Bytes: 256 << 10})
	if err := n.AddStream(StreamSpec{ID: "other", Log: lg2, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	persisted(t, n, "hung", lg.NextOffset(), 30*time.Second)
	persisted(t, n, "other", lg2.NextOffset(), 30*time.Second)
	if afterRelease.Load() < 8 || maxRunning.Load() != 1 {
		t.Fatalf("%d uploads after the release, at most %d running at once; want at least 8, and 1", afterRelease.Load(), maxRunning.Load())
	}
}

// TestStopWaitsForUploadsAndNamesHungOnes: the upload goroutines run apart from the actors,
// so Stop waits for them itself, within its context: an upload deaf to its context (held
// here) makes Stop return an error that says how many still run, instead of the node
// stopping with goroutines reading its logs and writing to S3 behind the caller's back.
func TestStopWaitsForUploadsAndNamesHungOnes(t *testing.T) {
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	var once sync.Once
	defer once.Do(func() { close(release) })
	w := newWorld(t, worldOptions{})
	log, logs := testLogger(t)
	n := startNode(w, Config{Logger: log, faults: &faultHooks{transfer: func(*submitTransfer) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
	}}, Stream: StreamOptions{FragmentTargetSize: 32 << 10}})
	lg := openLog(t, segments.Options{})
	writeLog(t, lg, 4, loadgen.Limit{Bytes: 128 << 10})
	if err := n.AddStream(StreamSpec{ID: "hs", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := n.Stop(ctx)
	if err == nil || !strings.Contains(err.Error(), "uploads still running") {
		t.Fatalf("stop with a hung upload: %v, want it named", err)
	}
	if logs.Count("stopping with uploads still running") != 1 {
		t.Fatal("the hung uploads were not logged")
	}
	once.Do(func() { close(release) }) // goleak (TestMain) checks that the goroutines end
	n.uploads.Wait()
}
