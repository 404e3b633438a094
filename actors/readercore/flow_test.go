package readercore

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/streamtier/streamtier/chunk"
	"github.com/streamtier/streamtier/manifest"
)

// retryWorld drives a core's transfers through random failures, successes and the passing
// of time, executing its retry timer effects as the shell does, and checks the one-timer
// contract: at most one retry timer is armed, it is armed whenever a transfer waits, and a
// firing resubmits exactly the transfers whose own backoff has run out.
type retryWorld struct {
	t       *rapid.T
	c       *Core
	now     time.Duration
	timer   Ref // armed retry timer, 0 when none
	timerAt time.Duration
	next    uint64 // next chunk id
	pos     int64
	// per transfer: its attempt in flight (0 while waiting), when its retry is due, failures
	inFlight map[Ref]int
	due      map[Ref]time.Duration
	nonTrans map[Ref]int
	trans    map[Ref]int
	done     map[Ref]bool
}

func (w *retryWorld) step(ev Event) []Effect {
	effs, err := w.c.Step(ev)
	if err != nil {
		w.t.Fatalf("%T%+v: %v", ev, ev, err)
	}
	for _, e := range effs {
		switch e := e.(type) {
		case SubmitTransfer:
			w.inFlight[e.Ref] = e.Attempt
		case ResubmitTransfer:
			if _, waiting := w.due[e.Ref]; !waiting {
				w.t.Fatalf("resubmit of ref %d, which waits for no retry", e.Ref)
			}
			if d := w.due[e.Ref]; d > w.now {
				w.t.Fatalf("ref %d resubmitted at %s, its retry is due at %s", e.Ref, w.now, d)
			}
			delete(w.due, e.Ref)
			w.inFlight[e.Ref] = e.Attempt
		case ArmRetryTimer:
			if w.timer != 0 {
				w.t.Fatalf("retry timer %d armed while %d is armed", e.Ref, w.timer)
			}
			w.timer, w.timerAt = e.Ref, w.now+e.After
		case CancelRetryTimer:
			if e.Ref != w.timer {
				w.t.Fatalf("cancel of retry timer %d, %d is armed", e.Ref, w.timer)
			}
			w.timer = 0
		}
	}
	return effs
}

// check: a waiting transfer always has the timer armed at or before its due time.
func (w *retryWorld) check() {
	for ref, d := range w.due {
		if w.timer == 0 || w.timerAt > d {
			w.t.Fatalf("ref %d waits for %s, the retry timer is %d at %s", ref, d, w.timer, w.timerAt)
		}
	}
	if st := w.c.Status(); st.WaitingRetry != len(w.due) || st.RetryArmed != (w.timer != 0) {
		w.t.Fatalf("status: %d waiting, armed %t; world: %d waiting, timer %d", st.WaitingRetry, st.RetryArmed, len(w.due), w.timer)
	}
}

func (w *retryWorld) pick(m map[Ref]int, label string) (Ref, bool) {
	if len(m) == 0 {
		return 0, false
	}
	refs := sortedKeys(m)
	return refs[rapid.IntRange(0, len(refs)-1).Draw(w.t, label)], true
}

func sortedKeys[V any](m map[Ref]V) []Ref {
	refs := make([]Ref, 0, len(m))
	for r := range m {
		refs = append(refs, r)
	}
	for i := range refs { // insertion sort: a handful of refs
		for j := i; j > 0 && refs[j] < refs[j-1]; j-- {
			refs[j], refs[j-1] = refs[j-1], refs[j]
		}
	}
	return refs
}

// TestRetryTimerMultiplexes: however failures, successes and time interleave, a stream has
// at most one retry timer, and each waiting transfer is resubmitted at the first firing at
// or after its own due time (a non-transient failure's 1 s doubling, a retriable one's
// jittered 10 ms doubling), never before it.
func TestRetryTimerMultiplexes(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		c, err := New(Config{StreamID: "s", FragmentTargetSize: 1000, PersistThreshold: 1000, PersistInterval: time.Hour})
		if err != nil {
			rt.Fatal(err)
		}
		w := &retryWorld{t: rt, c: c, pos: 8, inFlight: map[Ref]int{}, due: map[Ref]time.Duration{},
			nonTrans: map[Ref]int{}, trans: map[Ref]int{}, done: map[Ref]bool{}}
		w.step(Resolved{Manifest: manifest.Empty()})
		w.step(LogOpened{})
		for i := 0; i < 6; i++ { // six fragments of one chunk
			h := chunk.Header{ChunkID: w.next, Records: 1, DataLen: 1000 - chunk.HeaderSize}
			w.step(ChunkDrained{Header: h, Location: chunk.Location{Segment: "s0", Position: w.pos, Size: 1000}})
			w.next, w.pos = h.NextID(), w.pos+1000
		}
		rt.Repeat(map[string]func(*rapid.T){
			"fail": func(rt *rapid.T) {
				ref, ok := w.pick(w.inFlight, "failing")
				if !ok {
					rt.Skip("nothing in flight")
				}
				res := TransferResult{Ref: ref, Attempt: w.inFlight[ref], At: w.now}
				var delay time.Duration
				if rapid.Bool().Draw(rt, "retriable") {
					res.Outcome, res.Jitter = Retriable, rapid.Float64Range(0, 0.999).Draw(rt, "jitter")
					w.trans[ref]++
					if w.trans[ref] == 1 {
						delay = -1 // resubmitted at once
					} else {
						delay = w.c.transientDelay(w.trans[ref], res.Jitter)
					}
				} else {
					res.Outcome = NonTransient
					w.nonTrans[ref]++
					delay = w.c.uploadRetryDelay(w.nonTrans[ref])
				}
				delete(w.inFlight, ref)
				if delay >= 0 {
					w.due[ref] = w.now + delay
				} else {
					w.due[ref] = w.now // the immediate resubmission clears it
				}
				w.step(res)
				if delay < 0 {
					if _, still := w.due[ref]; still {
						rt.Fatalf("ref %d not resubmitted at once after its first retriable failure", ref)
					}
				}
			},
			"succeed": func(rt *rapid.T) {
				ref, ok := w.pick(w.inFlight, "succeeding")
				if !ok {
					rt.Skip("nothing in flight")
				}
				w.step(TransferResult{Ref: ref, Attempt: w.inFlight[ref], Outcome: OK, UID: uint64(ref), At: w.now})
				delete(w.inFlight, ref)
				w.done[ref] = true
			},
			"late ok of a waiting transfer": func(rt *rapid.T) {
				refs := sortedKeys(w.due)
				if len(refs) == 0 {
					rt.Skip("nothing waits")
				}
				ref := refs[rapid.IntRange(0, len(refs)-1).Draw(rt, "late")]
				w.step(TransferResult{Ref: ref, Attempt: 1, Outcome: OK, UID: uint64(ref), At: w.now})
				delete(w.due, ref)
				w.done[ref] = true
			},
			"time passes": func(rt *rapid.T) {
				w.now += time.Duration(rapid.Int64Range(0, int64(3*time.Second)).Draw(rt, "wait"))
				for w.timer != 0 && w.timerAt <= w.now {
					ref, at := w.timer, w.timerAt
					w.timer = 0
					saved := w.now
					w.now = at // the timer fires at its time; the shell stamps it then
					w.step(RetryTimer{Ref: ref, At: at})
					for r, d := range w.due {
						if d <= at {
							rt.Fatalf("ref %d due at %s still waits after the timer fired at %s", r, d, at)
						}
					}
					w.now = saved
				}
			},
			"": func(rt *rapid.T) { w.check() },
		})
	})
}

// The default bound on bytes not yet durable is sized from the uploads one stream may run:
// every one of them, as many uploaded fragments waiting for the persist that batches them,
// the fragment assembling and one more, so that the bound does not stop a lone stream
// before its upload slots do. An explicit setting is kept as it is.
func TestDefaultUnpersistedBoundFollowsUploadsInFlight(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want uint64
	}{
		{Config{}, 6 * DefaultFragmentTargetSize}, // a core alone: 2 uploads in flight
		{Config{UploadsInFlight: 24}, 50 * DefaultFragmentTargetSize},
		{Config{UploadsInFlight: 24, FragmentTargetSize: 8 << 20}, 50 * 8 << 20},
		{Config{UploadsInFlight: 24, MaxUnpersistedBytes: 256 << 20}, 256 << 20},
	} {
		if got := tc.cfg.withDefaults().MaxUnpersistedBytes; got != tc.want {
			t.Errorf("%+v: bound %d, want %d", tc.cfg, got, tc.want)
		}
	}
}
