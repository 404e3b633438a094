package actors

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/streamtier/streamtier/actors/governorcore"
	"github.com/streamtier/streamtier/actors/readercore"
	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/s3io/s3test"
)

// govFixture is a governor spawned through protoactor as the node spawns it (under the
// guardian, a fresh value per incarnation) on a manual clock, uploading a generated log to a
// real S3 server behind the fault injector; a probe stands for the reader.
type govFixture struct {
	t       *testing.T
	w       *world
	clock   *manualClock
	sys     *actor.ActorSystem
	pid     *actor.PID
	reader  *probe
	metrics *Metrics
	logs    *logBuffer
	dir     string
	frags   []fragment.Description
	ctx     context.Context // the "reader incarnation's"
}

func newGovFixture(t *testing.T, cfg governorcore.Config, faults *faultHooks) *govFixture {
	t.Helper()
	f := &govFixture{t: t, w: newWorld(t, worldOptions{}), clock: newManualClock(), metrics: &Metrics{}, dir: t.TempDir()}
	log, logs := testLogger(t)
	f.logs = logs
	f.sys = newSystem(t, log)
	chunks, err := s3test.WriteLog(f.dir, s3test.LogSpec{Seed: 5, Chunks: 64, MinData: 3000, MaxData: 5000})
	if err != nil {
		t.Fatal(err)
	}
	f.frags = s3test.Describe(chunks, 32<<10)
	f.reader = newProbe(t, f.sys)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f.ctx = ctx
	g := newGuardian(log, f.clock, f.metrics)
	t.Cleanup(g.stop)
	deps := governorDeps{cfg: cfg, store: f.w.Store, keyPrefix: "streams", log: log, metrics: f.metrics, clock: f.clock,
		memo: &governorMemo{}, readers: func() []*actor.PID { return []*actor.PID{f.reader.PID} }, faults: faults,
		uploads: &sync.WaitGroup{}, nodeCtx: context.Background()}
	var inc incarnations
	f.pid = f.sys.Root.Spawn(inc.props(g, func(i uint64) actor.Actor { return newGovernor(deps, i) }))
	return f
}

// submit sends attempt of the fragment at index i under ref for owner.
func (f *govFixture) submit(owner uint64, ref readercore.Ref, attempt, i int) {
	d := f.frags[i]
	f.sys.Root.Send(f.pid, &submitTransfer{Ctx: f.ctx, Owner: owner, Stream: "g", Dir: f.dir, Ref: ref, Attempt: attempt,
		Fragment: &d, Size: d.ObjectSize(), ReplyTo: f.reader.PID})
}

func (f *govFixture) status() GovernorStatus {
	f.t.Helper()
	res, err := f.sys.Root.RequestFuture(f.pid, governorStatusRequest{}, 5*time.Second).Result()
	if err != nil {
		f.t.Fatalf("governor status: %v", err)
	}
	return res.(GovernorStatus)
}

// admitted waits for the admission of ref's attempt, then its result.
func (f *govFixture) admitted(ref readercore.Ref, attempt int) readercore.TransferResult {
	f.t.Helper()
	a, _ := expect[transferAdmitted](f.t, f.reader, 10*time.Second)
	if a.Ref != ref || a.Attempt != attempt {
		f.t.Fatalf("admitted ref %d attempt %d, want ref %d attempt %d", a.Ref, a.Attempt, ref, attempt)
	}
	res, _ := expect[readercore.TransferResult](f.t, f.reader, 10*time.Second)
	if res.Ref != ref || res.Attempt != attempt {
		f.t.Fatalf("result of ref %d attempt %d, want ref %d attempt %d", res.Ref, res.Attempt, ref, attempt)
	}
	return res
}

// tick advances the clock to the governor's next wake-up.
func (f *govFixture) tick() {
	f.t.Helper()
	f.clock.Advance(f.clock.AwaitTimer(f.t, time.Hour, "governor wake-up"))
}

// TestGovernorAdmitsOnceAndSupersedes: a paced governor admits in FIFO order as the clock
// refills the bucket, says so to the reader (the transfer deadline starts there), and a
// resubmission of a queued reference replaces it in place: every fragment is uploaded and
// charged once, under its latest attempt.
func TestGovernorAdmitsOnceAndSupersedes(t *testing.T) {
	// Fragments are 32 to 37 KiB: a full bucket covers one, not two.
	f := newGovFixture(t, governorcore.Config{RateBytesPerSec: 40 << 10, BurstBytes: 40 << 10}, nil)
	for _, d := range f.frags[:4] {
		if d.ObjectSize() > 40<<10 || d.ObjectSize() < 20<<10 {
			t.Fatalf("fragment of %d bytes: the test assumes 20 to 40 KiB", d.ObjectSize())
		}
	}
	for i := range 4 {
		f.submit(1, readercore.Ref(i+1), 1, i)
	}
	if res := f.admitted(1, 1); res.Outcome != readercore.OK {
		t.Fatalf("first upload: %+v", res)
	}
	quiet[transferAdmitted](t, f.reader, 100*time.Millisecond) // the clock has not moved
	f.submit(1, 3, 2, 2)                                       // ref 3 again: its deadline fired, say
	st := f.status()
	if st.Queued != 3 || st.Superseded != 1 || st.Submitted != 5 || st.Admitted != 1 {
		t.Fatalf("after the resubmission: %+v, want 3 queued, 1 superseded, 5 submitted, 1 admitted", st)
	}
	for _, want := range []struct {
		ref     readercore.Ref
		attempt int
	}{{2, 1}, {3, 2}, {4, 1}} {
		f.tick()
		if res := f.admitted(want.ref, want.attempt); res.Outcome != readercore.OK {
			t.Fatalf("upload of ref %d: %+v", want.ref, res)
		}
	}
	quiet[transferAdmitted](t, f.reader, 100*time.Millisecond)
	var bytes int64
	for _, d := range f.frags[:4] {
		bytes += d.ObjectSize()
	}
	if got := f.metrics.BytesUploaded.Load(); got != bytes || f.metrics.FragmentsUploaded.Load() != 4 {
		t.Fatalf("uploaded %d fragments, %d bytes; want 4, %d (each once)", f.metrics.FragmentsUploaded.Load(), got, bytes)
	}
	if st := f.status(); st.Admitted != 4 || st.Queued != 0 || st.Running != 0 {
		t.Fatalf("at the end: %+v", st)
	}
}

// TestGovernorCancelOwnerUncharged: the queued attempts of a reader incarnation that ended
// are dropped without touching the bucket; another owner's attempt keeps its turn.
func TestGovernorCancelOwnerUncharged(t *testing.T) {
	f := newGovFixture(t, governorcore.Config{RateBytesPerSec: 1000, BurstBytes: 1000}, nil)
	f.submit(1, 1, 1, 0) // admitted on credit: the bucket is deep in debt
	f.admitted(1, 1)
	f.submit(1, 2, 1, 1)
	f.submit(2, 1, 1, 2)
	f.submit(1, 3, 1, 3)
	before := f.status()
	f.sys.Root.Send(f.pid, cancelOwner{Owner: 1})
	st := f.status()
	if st.Queued != 1 || st.Canceled != 2 || st.Tokens != before.Tokens {
		t.Fatalf("after cancelling owner 1: %+v (tokens before %d), want 1 queued, 2 cancelled, bucket untouched", st, before.Tokens)
	}
	f.tick()
	a, _ := expect[transferAdmitted](t, f.reader, 10*time.Second)
	if a.Ref != 1 {
		t.Fatalf("admitted ref %d, want owner 2's ref 1", a.Ref)
	}
	expect[readercore.TransferResult](t, f.reader, 10*time.Second)
	quiet[transferAdmitted](t, f.reader, 100*time.Millisecond)
	if n := f.metrics.FragmentsUploaded.Load(); n != 2 {
		t.Fatalf("%d uploads, want 2", n)
	}
}

// TestGovernorRestartComesBackWorking: a panic in the governor mid-run (on a submission,
// which is lost) restarts it under the guardian. The new incarnation logs it, resumes the
// bucket (no fresh burst), tells the readers to resubmit, and its predecessor's upload in
// flight ends at once as retriable; uploads go on.
func TestGovernorRestartComesBackWorking(t *testing.T) {
	faults := &faultHooks{governor: func(msg any) {
		if s, ok := msg.(*submitTransfer); ok && s.Ref == 99 {
			panic("injected governor fault")
		}
	}}
	f := newGovFixture(t, governorcore.Config{RateBytesPerSec: 1 << 20, BurstBytes: 64 << 10}, faults)
	hit := make(chan string, 4)
	f.w.Inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: `\.fragment$`, Fault: s3test.FaultDelay, Delay: time.Minute, Count: 1, Hit: hit})
	f.submit(1, 1, 1, 0)
	<-hit // the upload of ref 1 is held in the injector
	if _, skipped := expect[transferAdmitted](t, f.reader, 10*time.Second); len(skipped) != 0 {
		t.Fatalf("before the admission: %v", skipped)
	}
	f.submit(1, 2, 1, 1)
	f.submit(1, 3, 1, 2)
	before := f.status()
	if before.Incarnation != 1 || before.Running != 1 {
		t.Fatalf("before the fault: %+v", before)
	}
	f.submit(1, 99, 1, 3) // the poisoned submission
	// The restart does not wait for the upload in flight (its task never blocks the
	// governor): the reader hears of the restart and of the cancelled upload, in either order.
	res, skipped := expect[readercore.TransferResult](t, f.reader, 10*time.Second)
	if !slices.ContainsFunc(skipped, func(m any) bool { _, ok := m.(governorRestarted); return ok }) {
		expect[governorRestarted](t, f.reader, 10*time.Second)
	}
	if res.Ref != 1 || res.Outcome != readercore.Retriable || !strings.Contains(res.Reason, "governor's restart") {
		t.Fatalf("upload in flight at the restart: %+v, want ref 1 retriable", res)
	}
	st := f.status()
	if st.Incarnation != 2 || st.Queued != 0 || st.Tokens > before.Tokens+1 {
		t.Fatalf("after the restart: %+v, want incarnation 2, an empty queue and the bucket resumed at %d", st, before.Tokens)
	}
	if f.metrics.ActorRestarts.Load() != 1 || f.logs.Count("governor restarted") != 1 || f.logs.Count("actor failed", "injected governor fault") != 1 {
		t.Fatalf("restart not counted or logged: %d restarts", f.metrics.ActorRestarts.Load())
	}
	// The reader resubmits what it had queued (refs 2 and 3) and retries ref 1: all go up.
	f.submit(1, 1, 2, 0)
	f.submit(1, 2, 1, 1)
	f.submit(1, 3, 1, 2)
	done := map[readercore.Ref]bool{}
	for len(done) < 3 {
		armed := f.clock.Armed()
		if n, _ := f.clock.Pending(); n > 0 {
			f.tick()
		}
		select {
		case <-armed:
		case m := <-f.reader.C():
			if r, ok := m.(readercore.TransferResult); ok {
				if r.Outcome != readercore.OK {
					t.Fatalf("after the restart: %+v", r)
				}
				done[r.Ref] = true
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("uploads after the restart: %d of 3 done", len(done))
		}
	}
}

// TestTransferTaskPanicIsNonTransient: a panic inside a transfer task becomes a
// non-transient result for the reader (which retries it later), never silence.
func TestTransferTaskPanicIsNonTransient(t *testing.T) {
	faults := &faultHooks{transfer: func(s *submitTransfer) {
		if s.Ref == 5 && s.Attempt == 1 {
			panic("injected transfer fault")
		}
	}}
	f := newGovFixture(t, governorcore.Config{}, faults)
	f.submit(1, 5, 1, 0)
	res := f.admitted(5, 1)
	if res.Outcome != readercore.NonTransient || !strings.Contains(res.Reason, "panicked") {
		t.Fatalf("panicking transfer: %+v, want a non-transient failure", res)
	}
	f.submit(1, 5, 2, 0)
	if res := f.admitted(5, 2); res.Outcome != readercore.OK {
		t.Fatalf("retry after the panic: %+v", res)
	}
	until(t, 5*time.Second, "no transfer running", func() (bool, string) {
		st := f.status()
		return st.Running == 0 && f.metrics.TransfersRunning.Load() == 0, ""
	})
	if f.metrics.TaskPanics.Load() != 1 {
		t.Fatalf("task panics %d, want 1", f.metrics.TaskPanics.Load())
	}
}

// The node-wide bound holds through the shell: with max_concurrent_uploads 2, a third
// upload is admitted only when one of the first two has finished (transferDone frees its
// slot in the core).
func TestGovernorBoundsUploadsInFlight(t *testing.T) {
	release := make(chan struct{})
	faults := &faultHooks{transfer: func(*submitTransfer) { <-release }}
	f := newGovFixture(t, governorcore.Config{MaxConcurrent: 2, PerStream: 2}, faults)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	for i := range 3 {
		f.submit(1, readercore.Ref(i+1), 1, i)
	}
	for range 2 {
		expect[transferAdmitted](t, f.reader, 10*time.Second)
	}
	if st := f.status(); st.InFlight != 2 || st.Queued != 1 || st.Running != 2 {
		t.Fatalf("at the bound: in flight %d, queued %d, running %d; want 2, 1, 2", st.InFlight, st.Queued, st.Running)
	}
	quiet[transferAdmitted](t, f.reader, 200*time.Millisecond)
	release <- struct{}{} // one upload goes on and finishes
	_, skipped := expect[readercore.TransferResult](t, f.reader, 10*time.Second)
	// The governor admits the third attempt as soon as it hears that the first ended, and
	// that admission may reach the reader before the task's result does (two senders).
	var a transferAdmitted
	if i := slices.IndexFunc(skipped, func(m any) bool { _, ok := m.(transferAdmitted); return ok }); i >= 0 {
		a = skipped[i].(transferAdmitted)
	} else {
		a, _ = expect[transferAdmitted](t, f.reader, 10*time.Second)
	}
	if a.Ref != 3 {
		t.Fatalf("admitted ref %d after a slot freed, want 3", a.Ref)
	}
	close(release)
}

// An admitted attempt whose reader has ended starts no upload, and gives its slot back at
// once: with a bound of one, the next attempt is not left waiting for a transferDone that
// never comes.
func TestGovernorFreesTheSlotOfAnEndedReader(t *testing.T) {
	f := newGovFixture(t, governorcore.Config{MaxConcurrent: 1, PerStream: 1}, nil)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	d := f.frags[0]
	f.sys.Root.Send(f.pid, &submitTransfer{Ctx: ended, Owner: 9, Stream: "g", Dir: f.dir, Ref: 1, Attempt: 1,
		Fragment: &d, Size: d.ObjectSize(), ReplyTo: f.reader.PID})
	f.submit(1, 2, 1, 1)
	a, _ := expect[transferAdmitted](t, f.reader, 10*time.Second)
	if a.Ref != 2 {
		t.Fatalf("admitted ref %d, want 2", a.Ref)
	}
	expect[readercore.TransferResult](t, f.reader, 10*time.Second)
	until(t, 10*time.Second, "the slot freed after the upload", func() (bool, string) {
		st := f.status()
		return st.InFlight == 0, fmt.Sprintf("in flight %d", st.InFlight)
	})
}

// TestGovernorEndedReaderAdmittedUncharged: a reader incarnation ends between its
// submission and its cancelOwner (its context is cancelled first): the governor may admit
// the submission in that window, finds nobody waiting and starts no upload. The bucket must
// not pay for it: the tokens go back with the slot, and the live reader's fragment behind it
// is admitted without waiting for a refill.
func TestGovernorEndedReaderAdmittedUncharged(t *testing.T) {
	// Fragments are 32 to 37 KiB; the bucket holds 40 KiB and refills at 1 KiB/s.
	f := newGovFixture(t, governorcore.Config{RateBytesPerSec: 1 << 10, BurstBytes: 40 << 10}, nil)
	before := f.status()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	d := f.frags[0]
	f.sys.Root.Send(f.pid, &submitTransfer{Ctx: ended, Owner: 9, Stream: "g", Dir: f.dir, Ref: 1, Attempt: 1,
		Fragment: &d, Size: d.ObjectSize(), ReplyTo: f.reader.PID})
	st := f.status()
	if st.Admitted != 1 || st.Queued != 0 || st.InFlight != 0 {
		t.Fatalf("after the ended reader's submission: %+v", st.Status)
	}
	if st.Tokens != before.Tokens {
		t.Fatalf("the ended reader's submission was charged: tokens %d, %d before (%d bytes)", st.Tokens, before.Tokens, d.ObjectSize())
	}
	f.submit(1, 2, 1, 1) // no clock advance: only the refunded tokens cover it
	if res := f.admitted(2, 1); res.Outcome != readercore.OK {
		t.Fatalf("the live reader's upload: %+v", res)
	}
}

// TestRestartedGovernorCountsItsPredecessorsUploads: at a restart the governor cancels the
// uploads it runs, but a task that does not heed its context (here: held before its upload)
// keeps running. The new incarnation adopts it: its slot stays taken until it reports, so a
// node bounded to one upload never runs two (before, the new governor started with every
// slot free and admitted another at once).
func TestRestartedGovernorCountsItsPredecessorsUploads(t *testing.T) {
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	var running, most atomic.Int64
	faults := &faultHooks{
		governor: func(msg any) {
			if s, ok := msg.(*submitTransfer); ok && s.Ref == 99 {
				panic("injected governor fault")
			}
		},
		transfer: func(s *submitTransfer) {
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			if s.Ref == 1 {
				entered <- struct{}{}
				<-release // deaf to its context, like a read of a hung disk
			}
		},
	}
	f := newGovFixture(t, governorcore.Config{MaxConcurrent: 1}, faults)
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	f.submit(1, 1, 1, 0)
	<-entered
	if a, _ := expect[transferAdmitted](t, f.reader, 10*time.Second); a.Ref != 1 {
		t.Fatalf("admitted %+v, want ref 1", a)
	}
	f.submit(1, 99, 1, 1) // the governor fails on it and restarts
	expect[governorRestarted](t, f.reader, 10*time.Second)

	f.submit(2, 5, 1, 2) // another reader's fragment: the only slot is still taken
	st := f.status()
	if st.Incarnation != 2 || st.InFlight != 1 || st.Queued != 1 || st.Running != 0 {
		t.Fatalf("after the restart: %+v, want incarnation 2 with the predecessor's upload in flight and ref 5 queued", st)
	}
	if f.logs.Count("governor restarted", `"transfers_ending":1`) != 1 {
		t.Fatalf("the restart did not log the upload it carries")
	}

	close(release) // the old task ends (its context was cancelled: a retriable result)
	for got := map[readercore.Ref]bool{}; !got[1] || !got[5]; {
		m := <-f.reader.C()
		if r, ok := m.(readercore.TransferResult); ok {
			got[r.Ref] = true
			if r.Ref == 5 && r.Outcome != readercore.OK {
				t.Fatalf("ref 5: %+v", r)
			}
		}
	}
	if m := most.Load(); m != 1 {
		t.Fatalf("%d uploads ran at once, bound 1", m)
	}
	if st := f.status(); st.InFlight != 0 || st.Queued != 0 {
		t.Fatalf("at the end: %+v", st)
	}
}
