package governorcore

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The bounds and the share under random submissions, completions, cancellations and time:
// the node-wide bound and every stream's share are never exceeded; an admission never
// passes over an earlier queued submission whose stream had room (FIFO and fair: no stream
// waits behind more than its share of another's); without a rate nothing that may run is
// left waiting; every id is admitted at most once, never after it was superseded or
// canceled; a resubmission keeps its turn. A resubmission of a running reference abandons
// exactly that admission (its slot and share count no more; the bounds are checked on the
// admissions not abandoned), a late Done of an abandoned one changes nothing, and no two
// admissions of one owner and reference run at once.
func TestPropertyBoundAndShare(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		max := rapid.IntRange(1, 6).Draw(t, "max")
		share := rapid.IntRange(0, max).Draw(t, "share")
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
		var next uint64
		stop := func(id uint64) {
			st := running[id].Stream
			if perStream[st]--; perStream[st] == 0 {
				delete(perStream, st)
			}
			delete(running, id)
		}
		check := func(d Decision) {
			pre := slices.Clone(order)
			for _, id := range d.Superseded {
				gone[id] = true
			}
			if !slices.Equal(d.Abandoned, wantAbandoned) {
				t.Fatalf("abandoned %v, the model says %v", d.Abandoned, wantAbandoned)
			}
			wantAbandoned = nil
			admitted := map[uint64]bool{}
			for _, s := range d.Admit {
				if gone[s.ID] {
					t.Fatalf("id %d admitted after it was admitted, superseded or canceled", s.ID)
				}
				for _, r := range running {
					if s.Ref != 0 && r.Owner == s.Owner && r.Ref == s.Ref {
						t.Fatalf("id %d admitted while %d of the same owner %d and ref %d runs", s.ID, r.ID, s.Owner, s.Ref)
					}
				}
				gone[s.ID], admitted[s.ID] = true, true
				running[s.ID] = s
				perStream[s.Stream]++
			}
			order = slices.DeleteFunc(order, func(s Submission) bool { return admitted[s.ID] })
			if len(running) > max {
				t.Fatalf("%d transfers running, bound %d", len(running), max)
			}
			for st, n := range perStream {
				if share > 0 && n > share {
					t.Fatalf("stream %s runs %d, share %d", st, n, share)
				}
			}
			// Fairness: every submission left queued ahead of an admitted one had no room.
			last := -1
			for i, s := range pre {
				if admitted[s.ID] {
					last = i
				}
			}
			for _, s := range pre[:last+1] {
				if !admitted[s.ID] && (share == 0 || perStream[s.Stream] < share) {
					t.Fatalf("%d (stream %s, %d running) passed over although its stream had room; queue %v", s.ID, s.Stream, perStream[s.Stream], pre)
				}
			}
			if cfg.Unlimited() && len(running) < max {
				for _, s := range order {
					if share == 0 || perStream[s.Stream] < share {
						t.Fatalf("%d (stream %s) waits with a free slot and room in its share", s.ID, s.Stream)
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
				if _, ok := running[id]; ok {
					stop(id)
				}
				check(g.Done(now, id))
			case 3:
				now = now.Add(time.Duration(rapid.Int64Range(0, int64(time.Second)).Draw(t, "advance")))
				check(g.Tick(now))
			case 4:
				owner := uint64(rapid.SampledFrom(streams).Draw(t, "cancel")[0])
				for _, id := range g.CancelOwner(owner) {
					gone[id] = true
				}
				order = slices.DeleteFunc(order, func(s Submission) bool { return s.Owner == owner })
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
