package actors

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
)

// reaperFixture is a reaper spawned through protoactor as the node spawns it, on a manual
// clock, deleting from a real S3 server behind the fault injector.
type reaperFixture struct {
	t     *testing.T
	w     *world
	clock *manualClock
	sys   *actor.ActorSystem
	pid   *actor.PID
	stats *ReaperStats
	m     *Metrics
	logs  *logBuffer
	stop  context.CancelFunc // cancels the node's context, as Node.Stop does
}

func newReaperFixture(t *testing.T, faults *faultHooks) *reaperFixture {
	t.Helper()
	f := &reaperFixture{t: t, w: newWorld(t, worldOptions{}), clock: newManualClock(), m: &Metrics{}}
	f.stats = &f.m.Reaper
	log, logs := testLogger(t)
	f.logs = logs
	f.sys = newSystem(t, log)
	g := newGuardian(log, f.clock, f.m)
	t.Cleanup(g.stop)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f.stop = cancel
	deps := reaperDeps{ctx: ctx, store: f.w.Store, keyPrefix: "streams", log: log, stats: f.stats, clock: f.clock,
		ledger: &reaperLedger{attempts: map[string]int{}}, faults: faults}
	var inc incarnations
	f.pid = f.sys.Root.Spawn(inc.props(g, func(i uint64) actor.Actor { return newReaper(deps, i) }))
	return f
}

// put stores n small objects under prefix and returns their keys.
func (f *reaperFixture) put(prefix string, n int) []string {
	f.t.Helper()
	var keys []string
	for i := range n {
		k := fmt.Sprintf("streams/r/%s/%03d", prefix, i)
		if err := f.w.Store.PutObject(context.Background(), k, []byte(k)); err != nil {
			f.t.Fatal(err)
		}
		keys = append(keys, k)
	}
	return keys
}

// left counts the objects still under prefix.
func (f *reaperFixture) left(prefix string) int {
	f.t.Helper()
	n := 0
	if err := f.w.Store.List(context.Background(), "streams/r/"+prefix+"/", func(s3io.ObjectInfo) error { n++; return nil }); err != nil {
		f.t.Fatal(err)
	}
	return n
}

// TestReaperRetriesOnTheClock: failed deletions wait for the retry delay (1 s, then 2 s)
// on the clock, not on a sleep, and succeed once S3 answers again.
func TestReaperRetriesOnTheClock(t *testing.T) {
	f := newReaperFixture(t, nil)
	keys := f.put("a", 3)
	f.w.Inj.Add(s3test.Rule{Method: "POST", Fault: s3test.FaultInternalError, Count: 2})
	f.sys.Root.Send(f.pid, &reapRequest{Stream: "r", Keys: keys})
	if d := f.clock.AwaitTimer(t, time.Hour, "first retry"); d != time.Second {
		t.Fatalf("first retry in %v, want 1s", d)
	}
	if f.stats.Queued.Load() != 3 || f.left("a") != 3 {
		t.Fatalf("after the first failure: %d queued, %d left", f.stats.Queued.Load(), f.left("a"))
	}
	f.clock.Advance(time.Second)
	if d := f.clock.AwaitTimer(t, time.Hour, "second retry"); d != 2*time.Second {
		t.Fatalf("second retry in %v, want 2s", d)
	}
	f.clock.Advance(time.Second)
	if n, _ := f.clock.Pending(); n != 1 || f.stats.Deleted.Load() != 0 {
		t.Fatalf("retried before its delay: %d timers, %d deleted", n, f.stats.Deleted.Load())
	}
	f.clock.Advance(time.Second)
	until(t, 10*time.Second, "keys deleted", func() (bool, string) {
		return f.stats.Deleted.Load() == 3, fmt.Sprintf("deleted %d", f.stats.Deleted.Load())
	})
	if f.left("a") != 0 || f.stats.Queued.Load() != 0 || f.stats.Failed.Load() != 0 || f.stats.Retries.Load() != 6 {
		t.Fatalf("at the end: %d left, %d queued, %d failed, %d retries", f.left("a"), f.stats.Queued.Load(), f.stats.Failed.Load(), f.stats.Retries.Load())
	}
}

// TestReaperRestartKeepsItsRetries: a panic in the reaper mid-run restarts it; the new
// incarnation logs it, re-arms the retry of the keys whose deletion had failed (held in
// the ledger that outlives it) and deletes new requests.
func TestReaperRestartKeepsItsRetries(t *testing.T) {
	f := newReaperFixture(t, &faultHooks{reaper: func(msg any) {
		if r, ok := msg.(*reapRequest); ok && r.Stream == "poison" {
			panic("injected reaper fault")
		}
	}})
	keys := f.put("a", 3)
	f.w.Inj.Add(s3test.Rule{Method: "POST", Fault: s3test.FaultInternalError, Count: 1})
	f.sys.Root.Send(f.pid, &reapRequest{Stream: "r", Keys: keys})
	f.clock.AwaitTimer(t, time.Hour, "retry of the failed keys")
	f.sys.Root.Send(f.pid, &reapRequest{Stream: "poison", Keys: []string{"streams/r/poison"}})
	until(t, 10*time.Second, "reaper restarted", func() (bool, string) {
		return f.logs.Count("reaper restarted", `"keys_due":3`) == 1, ""
	})
	f.clock.Advance(f.clock.AwaitTimer(t, time.Hour, "retry re-armed by the new incarnation"))
	until(t, 10*time.Second, "failed keys deleted after the restart", func() (bool, string) {
		return f.left("a") == 0, fmt.Sprintf("%d left", f.left("a"))
	})
	more := f.put("b", 2)
	f.sys.Root.Send(f.pid, &reapRequest{Stream: "r", Keys: more})
	// The keys leave the bucket before the reaper counts them: wait for both.
	until(t, 10*time.Second, "new keys deleted and counted", func() (bool, string) {
		return f.left("b") == 0 && f.stats.Deleted.Load() == 5, fmt.Sprintf("%d left, %d counted", f.left("b"), f.stats.Deleted.Load())
	})
	if f.m.ActorRestarts.Load() != 1 || f.stats.Deleted.Load() != 5 {
		t.Fatalf("%d restarts, %d deleted; want 1 and 5", f.m.ActorRestarts.Load(), f.stats.Deleted.Load())
	}
}

// TestReaperAtStopLeavesDeletionsQuietly: deletions asked for once the node is stopping
// (every stream's last persist may ask) are not attempted on the cancelled context; they are
// counted as left for garbage collection and said once, not warned about per request or key.
func TestReaperAtStopLeavesDeletionsQuietly(t *testing.T) {
	f := newReaperFixture(t, nil)
	f.stop()
	var all []string
	for i := range 3 {
		keys := f.put(fmt.Sprint("s", i), 2)
		all = append(all, keys...)
		f.sys.Root.Send(f.pid, &reapRequest{Stream: "r", Keys: keys})
	}
	until(t, 10*time.Second, "deletions counted as left", func() (bool, string) {
		return f.stats.Failed.Load() == int64(len(all)), fmt.Sprintf("failed %d", f.stats.Failed.Load())
	})
	for i := range 3 {
		if n := f.left(fmt.Sprint("s", i)); n != 2 {
			t.Fatalf("s%d: %d objects left, want 2 (nothing is deleted on a cancelled context)", i, n)
		}
	}
	if n := f.logs.Count("the node is stopping"); n != 1 {
		t.Fatalf("%d stop notes, want 1", n)
	}
	if n := f.logs.Count(`"level":"warn"`); n != 0 {
		t.Fatalf("%d warnings at stop, want none", n)
	}
}

// TestReaperStoppedMidBatchLeavesItQuietly: a batch whose DeleteObjects fails because the
// node stopped while it was on its way is not retried (nothing would retry it) and not
// warned about key by key: its keys are left for garbage collection, said once.
func TestReaperStoppedMidBatchLeavesItQuietly(t *testing.T) {
	f := newReaperFixture(t, nil)
	keys := f.put("a", 3)
	hit := make(chan string, 1)
	f.w.Inj.Add(s3test.Rule{Method: "POST", Fault: s3test.FaultDelay, Delay: time.Hour, Hit: hit})
	f.sys.Root.Send(f.pid, &reapRequest{Stream: "r", Keys: keys})
	select {
	case <-hit: // the batch is held by the server
	case <-time.After(10 * time.Second):
		t.Fatal("the batch never reached S3")
	}
	f.stop()
	until(t, 10*time.Second, "the batch counted as left", func() (bool, string) {
		return f.stats.Failed.Load() == 3, fmt.Sprintf("failed %d", f.stats.Failed.Load())
	})
	if f.left("a") != 3 || f.stats.Queued.Load() != 0 || f.stats.Deleted.Load() != 0 {
		t.Fatalf("%d left, %d queued, %d deleted; want 3, 0, 0", f.left("a"), f.stats.Queued.Load(), f.stats.Deleted.Load())
	}
	if n := f.logs.Count("the node is stopping"); n != 1 {
		t.Fatalf("%d stop notes, want 1", n)
	}
	if n := f.logs.Count(`"level":"warn"`); n != 0 {
		t.Fatalf("%d warnings at stop, want none", n)
	}
}
