package governorcore

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The bound and the work-conserving share under random submissions, completions,
// cancellations, time and restarts, checked after every step:
//   - bound: at most max transfers run, and no stream above the cap when one is set;
//   - FIFO within a stream: each admission is its stream's oldest queued submission;
//   - fair choice: no admission goes to a stream while another stream with a submission
//     queued (and under the cap) runs fewer transfers;
//   - work-conserving: without a rate, a free slot never coexists with a queued submission
//     that may run (a lone stream takes every slot);
//   - convergence, "within one fragment once contended": without a rate, a completion or a
//     tick never widens the spread (most minus fewest running) among the streams waiting,
//     beyond one; so once they are within one of each other they stay so, and a stream that
//     took every slot alone gives them back as its uploads end, never preempted;
//   - no starvation: while a stream waits with nothing running, at most streams-1
//     admissions of other streams pass it; and at the end, completing everything admits
//     everything;
//   - every id is admitted at most once, never after it was superseded or canceled; a
//     resubmission keeps its turn; a resubmission of a running reference abandons exactly
//     that admission (its slot counts no more), a late Done of an abandoned one changes
//     nothing, and no two admissions of one owner and reference run at once.
func TestPropertyBoundAndShare(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		max := rapid.IntRange(1, 6).Draw(t, "max")
		share := 0 // the hard cap: none in most runs (the default)
		if rapid.IntRange(0, 3).Draw(t, "capped") == 0 {
			share = rapid.IntRange(1, max).Draw(t, "share")
		}
		cfg := Config{MaxConcurrent: max, PerStream: share}
		if rapid.Bool().Draw(t, "paced") {
			cfg.RateBytesPerSec = rapid.Int64Range(1, 1000).Draw(t, "rate")
		}
		g := New(cfg, t0)
		now := t0
		streams := []string{"a", "b", "c", "d"}
		var order []Submission             // the model's queue, in turn order
		running := map[uint64]Submission{} // admitted, not done nor abandoned
		perStream := map[string]int{}
		gone := map[uint64]bool{}      // admitted, superseded or canceled
		abandoned := map[uint64]bool{} // abandoned, their task maybe still hung
		var wantAbandoned []uint64     // what the next decision must abandon
		abandonedSince := 0            // abandoned since New or the last restart (Status counts these)
		passed := map[string]int{}     // admissions of others while the stream waits with nothing running
		var next uint64
		underCap := func(st string) bool { return share == 0 || perStream[st] < share }
		// waiting: the streams with a submission queued that may run more.
		waiting := func() map[string]bool {
			w := map[string]bool{}
			for _, s := range order {
				if underCap(s.Stream) {
					w[s.Stream] = true
				}
			}
			return w
		}
		spread := func(w map[string]bool) int {
			lo, hi := -1, -1
			for st := range w {
				n := perStream[st]
				if lo < 0 || n < lo {
					lo = n
				}
				if n > hi {
					hi = n
				}
			}
			return hi - lo
		}
		stop := func(id uint64) {
			st := running[id].Stream
			if perStream[st]--; perStream[st] == 0 {
				delete(perStream, st)
			}
			delete(running, id)
		}
		check := func(d Decision) {
			for _, id := range d.Superseded {
				gone[id] = true
			}
			if !slices.Equal(d.Abandoned, wantAbandoned) {
				t.Fatalf("abandoned %v, the model says %v", d.Abandoned, wantAbandoned)
			}
			wantAbandoned = nil
			for _, s := range d.Admit {
				if gone[s.ID] {
					t.Fatalf("id %d admitted after it was admitted, superseded or canceled", s.ID)
				}
				for _, r := range running {
					if s.Ref != 0 && r.Owner == s.Owner && r.Ref == s.Ref {
						t.Fatalf("id %d admitted while %d of the same owner %d and ref %d runs", s.ID, r.ID, s.Owner, s.Ref)
					}
				}
				// FIFO within the stream, and the fair choice among the streams waiting.
				j := slices.IndexFunc(order, func(o Submission) bool { return o.Stream == s.Stream })
				if j < 0 || order[j].ID != s.ID {
					t.Fatalf("%d admitted ahead of an older submission of stream %s; queue %v", s.ID, s.Stream, order)
				}
				if !underCap(s.Stream) {
					t.Fatalf("%d admitted with stream %s at its cap %d", s.ID, s.Stream, share)
				}
				for st := range waiting() {
					if perStream[st] < perStream[s.Stream] {
						t.Fatalf("%d admitted to stream %s running %d while stream %s runs %d and waits; queue %v",
							s.ID, s.Stream, perStream[s.Stream], st, perStream[st], order)
					}
				}
				// No starvation: a stream waiting with nothing running is passed at most
				// once by each other stream.
				for st := range waiting() {
					if st != s.Stream && perStream[st] == 0 {
						if passed[st]++; passed[st] > len(streams)-1 {
							t.Fatalf("stream %s waits with nothing running and was passed %d times", st, passed[st])
						}
					}
				}
				delete(passed, s.Stream)
				order = slices.DeleteFunc(order, func(o Submission) bool { return o.ID == s.ID })
				gone[s.ID] = true
				running[s.ID] = s
				perStream[s.Stream]++
			}
			if len(running) > max {
				t.Fatalf("%d transfers running, bound %d", len(running), max)
			}
			for st, n := range perStream {
				if share > 0 && n > share {
					t.Fatalf("stream %s runs %d, cap %d", st, n, share)
				}
			}
			if cfg.Unlimited() && len(running) < max {
				for _, s := range order {
					if underCap(s.Stream) {
						t.Fatalf("%d (stream %s) waits with a free slot (%d of %d running)", s.ID, s.Stream, len(running), max)
					}
				}
			}
			var q []uint64
			for _, s := range g.pending {
				q = append(q, s.ID)
			}
			var want []uint64
			for _, s := range order {
				want = append(want, s.ID)
			}
			if !slices.Equal(q, want) {
				t.Fatalf("queue %v, the model says %v", q, want)
			}
			if st := g.Status(); st.InFlight != len(running) || st.Abandoned != uint64(abandonedSince) {
				t.Fatalf("status in flight %d, abandoned %d; the model says %d, %d", st.InFlight, st.Abandoned, len(running), abandonedSince)
			}
		}
		// converging checks a completion or a tick: the spread among the streams waiting
		// before it does not widen beyond one (without a rate: with one, a freed slot may
		// wait for the bucket).
		converging := func(before map[string]bool, was int, d Decision) {
			check(d)
			if !cfg.Unlimited() {
				return
			}
			after := waiting()
			for st := range after {
				if !before[st] {
					return // a stream began waiting: not a completion's doing
				}
			}
			if len(after) > 1 {
				if sp := spread(after); sp > was && sp > 1 {
					t.Fatalf("spread among waiting streams widened from %d to %d: %v", was, sp, perStream)
				}
			}
		}
		for i, steps := 0, rapid.IntRange(1, 120).Draw(t, "steps"); i < steps; i++ {
			switch rapid.IntRange(0, 6).Draw(t, "op") {
			case 0, 1, 5:
				next++
				s := Submission{ID: next, Size: rapid.Int64Range(1, 300).Draw(t, "size"),
					Stream: rapid.SampledFrom(streams).Draw(t, "stream"), Ref: rapid.Uint64Range(0, 3).Draw(t, "ref")}
				s.Owner = uint64(s.Stream[0]) // one reader per stream
				if op := rapid.IntRange(0, 2).Draw(t, "resubmit running"); op == 0 && len(running) > 0 {
					// The owner of a running admission resubmits its reference (its deadline passed).
					var refs []Submission
					for _, r := range running {
						if r.Ref != 0 {
							refs = append(refs, r)
						}
					}
					slices.SortFunc(refs, func(a, b Submission) int { return int(a.ID) - int(b.ID) })
					if len(refs) > 0 {
						r := rapid.SampledFrom(refs).Draw(t, "running ref")
						s.Stream, s.Owner, s.Ref = r.Stream, r.Owner, r.Ref
					}
				}
				for id, r := range running {
					if s.Ref != 0 && r.Owner == s.Owner && r.Ref == s.Ref {
						wantAbandoned = append(wantAbandoned, id)
						abandoned[id] = true
						abandonedSince++
						stop(id)
					}
				}
				if j := slices.IndexFunc(order, func(o Submission) bool { return s.Ref != 0 && o.Owner == s.Owner && o.Ref == s.Ref }); j >= 0 {
					order[j] = s // supersedes in place
				} else {
					order = append(order, s)
				}
				check(g.Submit(now, s))
			case 2:
				// A running transfer ends, or an abandoned one's hung task at last (changes nothing).
				ids := make([]uint64, 0, len(running)+len(abandoned))
				for id := range running {
					ids = append(ids, id)
				}
				for id := range abandoned {
					ids = append(ids, id)
				}
				if len(ids) == 0 {
					continue
				}
				slices.Sort(ids)
				id := rapid.SampledFrom(ids).Draw(t, "done")
				before := waiting()
				was := spread(before)
				if _, ok := running[id]; ok {
					stop(id)
				}
				converging(before, was, g.Done(now, id))
			case 3:
				now = now.Add(time.Duration(rapid.Int64Range(0, int64(time.Second)).Draw(t, "advance")))
				before := waiting()
				converging(before, spread(before), g.Tick(now))
			case 4:
				owner := uint64(rapid.SampledFrom(streams).Draw(t, "cancel")[0])
				for _, id := range g.CancelOwner(owner) {
					gone[id] = true
				}
				order = slices.DeleteFunc(order, func(s Submission) bool { return s.Owner == owner })
				for st := range passed {
					if !waiting()[st] {
						delete(passed, st)
					}
				}
			case 6:
				// The governor restarts: a new core resumes the bucket with an empty queue (the
				// readers submit again) and adopts the transfers still running, which keep
				// their slots until their Done; abandoned ones are not carried.
				carried := slices.Collect(maps.Values(running))
				slices.SortFunc(carried, func(a, b Submission) int { return int(a.ID) - int(b.ID) })
				g = Resume(cfg, g.Status().Tokens, now)
				g.Adopt(carried)
				for _, s := range order {
					gone[s.ID] = true
				}
				order, abandonedSince = nil, 0
				clear(passed)
				check(g.Tick(now))
			}
		}
		// Draining: completing everything admits everything still queued, eventually.
		for guard := 0; len(order) > 0 || len(running) > 0; guard++ {
			if guard > 10_000 {
				t.Fatalf("the queue does not drain: %v queued, %d running", order, len(running))
			}
			for id := range running {
				stop(id)
				check(g.Done(now, id))
				break
			}
			if len(running) == 0 {
				now = now.Add(time.Second)
				check(g.Tick(now))
			}
		}
	})
}

// With N streams each queueing a backlog, the admissions interleave: between two
// admissions of one stream, every other stream with work gets its turn.
func TestRoundRobinUnderTheShare(t *testing.T) {
	g := New(Config{MaxConcurrent: 4, PerStream: 1}, t0)
	var admitted []string
	var running []uint64 // in admission order: the oldest transfer ends first
	take := func(d Decision) {
		for _, s := range d.Admit {
			admitted = append(admitted, s.Stream)
			running = append(running, s.ID)
		}
	}
	id := uint64(0)
	for _, st := range []string{"a", "b", "c", "d"} {
		for range 5 {
			id++
			take(g.Submit(t0, Submission{ID: id, Stream: st, Size: 1}))
		}
	}
	for len(admitted) < 20 {
		first := running[0]
		running = running[1:]
		take(g.Done(t0, first))
	}
	got := fmt.Sprint(admitted)
	if got != "[a b c d a b c d a b c d a b c d a b c d]" {
		t.Fatalf("admission order %s, want the streams in turn", got)
	}
}
