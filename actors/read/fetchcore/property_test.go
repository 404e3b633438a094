package fetchcore

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// world is the model's remote tier: leaves in order (fragments built as objects, gaps
// between), a visible prefix that grows (uploads), a first live leaf that moves up
// (retention: the objects below it answer 404), and the shell's outstanding requests.
type world struct {
	leaves  []Leaf
	objects map[string]*testObject
	visible int // leaves the manifest lists: [first, visible)
	first   int // index of the first live leaf (always a fragment)

	gets    map[uint64]Get
	indexes map[uint64]FetchIndex
	walks   map[uint64]NeedLeaves
	timers  map[uint64]bool
	now     time.Duration

	// what the consumer saw
	expect     uint64 // the next offset an item must start at (the first chunk may start below)
	started    bool
	unconsumed []int64
	items      []Item            // the chunks of unconsumed, checked again when consumed
	bufs       map[uint64][]byte // buffers lent to the core (RangeDone ID) and not released
	copies     map[uint64][]byte // the shell's copies of chunks across responses (Item.Copy), not released
	ended      bool
	endAt      uint64
	maxChunk   int64
	held       int64 // the core's Held after the previous step
}

func (w *world) next() uint64 { return w.leaves[w.visible-1].End }

func (w *world) firstOffset() uint64 { return w.leaves[w.first].First }

func (w *world) live(key string) bool {
	for i := w.first; i < len(w.leaves); i++ {
		if w.leaves[i].Key == key {
			return true
		}
	}
	return false
}

func genWorld(t *rapid.T) *world {
	w := &world{objects: map[string]*testObject{}, bufs: map[uint64][]byte{}, copies: map[uint64][]byte{}, gets: map[uint64]Get{}, indexes: map[uint64]FetchIndex{}, walks: map[uint64]NeedLeaves{}, timers: map[uint64]bool{}}
	n := rapid.IntRange(1, 8).Draw(t, "leaves")
	off := rapid.Uint64Range(0, 5).Draw(t, "base")
	for i := 0; i < n; i++ {
		if i > 0 && !w.leaves[i-1].Gap && rapid.IntRange(0, 4).Draw(t, "gap?") == 0 {
			end := off + rapid.Uint64Range(1, 5).Draw(t, "gap")
			w.leaves = append(w.leaves, Leaf{First: off, End: end, Gap: true})
			off = end
			continue
		}
		sizes := rapid.SliceOfN(rapid.IntRange(0, 3000), 1, 6).Draw(t, "chunks")
		o := buildObject(fmt.Sprintf("o%d", i), off, sizes, uint64(i+1))
		for _, c := range o.chunks {
			w.maxChunk = max(w.maxChunk, int64(len(c)))
		}
		w.objects[o.key] = o
		w.leaves = append(w.leaves, o.leaf())
		off = o.end
	}
	if w.leaves[len(w.leaves)-1].Gap { // the manifest's last leaf may be a gap: fine
	}
	w.visible = rapid.IntRange(1, len(w.leaves)).Draw(t, "visible")
	return w
}

// walk answers NeedLeaves as the shell does: fresh from the leaf holding From (or the first
// live one), otherwise on from From in what the manifest lists; up to two leaves.
func (w *world) walk(e NeedLeaves, outcome Outcome) LeavesFetched {
	ev := LeavesFetched{ID: e.ID, First: w.firstOffset(), Next: w.next(), Outcome: outcome}
	if outcome != OK {
		ev.Err = fmt.Errorf("injected %s", outcome)
		return ev
	}
	from := e.From
	if e.Fresh {
		from = max(from, w.firstOffset())
	}
	i := sort.Search(w.visible, func(i int) bool { return w.leaves[i].End > from })
	if !e.Fresh && i < w.visible && w.leaves[i].First != from {
		i = w.visible // a stale walk asks past its own leaves only at their end
	}
	for ; i < w.visible && len(ev.Leaves) < 2; i++ {
		ev.Leaves = append(ev.Leaves, w.leaves[i])
	}
	ev.Done = i == w.visible
	return ev
}

func (w *world) take(t *rapid.T, effs []Effect, c *Core, budgetBound int64) {
	issued := false
	defer func() { w.held = c.Held() }()
	for _, e := range effs {
		switch e := e.(type) {
		case Get:
			w.gets[e.ID] = e
			issued = true
		case Cancel:
			delete(w.gets, e.ID)
		case FetchIndex:
			w.indexes[e.ID] = e
		case NeedLeaves:
			w.walks[e.ID] = e
		case ArmTimer:
			w.timers[e.ID] = true
		case Release:
			lent := w.bufs
			if e.Copy {
				lent = w.copies
			}
			b, ok := lent[e.ID]
			if !ok {
				t.Fatalf("%s: not lent, or released twice", e)
			}
			for i := range b { // the shell reuses it: a chunk still cut from it would change
				b[i] = 0xEE
			}
			delete(lent, e.ID)
		case Fail:
			t.Fatalf("core failed: %v", e.Err)
		case End:
			if w.ended {
				t.Fatalf("end reported twice")
			}
			if e.At != w.next() || w.expect != e.At {
				t.Fatalf("end at %d: manifest next %d, delivered up to %d", e.At, w.next(), w.expect)
			}
			w.ended, w.endAt = true, e.At
		case Deliver:
			it := e.Item
			if it.Parts != nil { // as the shell does: copied at once, the parts may be released next
				if _, dup := w.copies[it.Copy]; dup || it.Copy == 0 {
					t.Fatalf("%s: copy id %d reused", it, it.Copy)
				}
				it.Chunk = it.Assemble(make([]byte, 0, it.Size()))
				w.copies[it.Copy], it.Parts = it.Chunk, nil
			}
			w.check(t, it)
		}
	}
	st := c.Status()
	var out int64
	for _, g := range w.gets {
		out += g.Len
	}
	var unc int64
	for _, n := range w.unconsumed {
		unc += n
	}
	if st.Unconsumed != unc {
		t.Fatalf("core counts %d unconsumed bytes, the consumer holds %d", st.Unconsumed, unc)
	}
	if st.Settled < 0 || st.Settled > c.srch.ceiling || st.Concurrency < 1 || st.Concurrency > c.srch.ceiling {
		t.Fatalf("concurrency %d, settled %d: want both in [1, ceiling %d] (settled 0: none yet)", st.Concurrency, st.Settled, c.srch.ceiling)
	}
	if out+st.Buffered+unc > c.Held() {
		t.Fatalf("held %d below what is out (%d requested, %d buffered, %d unconsumed)", c.Held(), out, st.Buffered, unc)
	}
	if issued && c.Held() > w.held && c.Held() > budgetBound { // a new range, not a retry
		t.Fatalf("held %d after a new GET, above max(budget, largest chunk + range) = %d (%s)", c.Held(), budgetBound, st)
	}
}

// consume is the consumer done with its first k chunks: they must still be the source's
// bytes (no buffer they were cut from was released before).
func (w *world) consume(t *rapid.T, k int) Consumed {
	var n int64
	for i, b := range w.unconsumed[:k] {
		n += b
		var o *testObject
		for _, x := range w.objects {
			if it := w.items[i]; it.Offset >= x.first && it.Offset < x.end {
				o = x
			}
		}
		if !bytesEqual(o, w.items[i]) {
			t.Fatalf("chunk %s changed before the consumer was done with it: its buffer was released early", w.items[i])
		}
	}
	w.unconsumed, w.items = w.unconsumed[k:], w.items[k:]
	return Consumed{Bytes: n}
}

func (w *world) check(t *rapid.T, it Item) {
	if w.ended {
		t.Fatalf("item %s after the end", it)
	}
	switch it.Kind {
	case ItemChunk:
		if it.Offset > w.expect || it.End <= w.expect || (w.started && it.Offset != w.expect) {
			t.Fatalf("chunk %s does not follow offset %d", it, w.expect)
		}
		var o *testObject
		for _, x := range w.objects {
			if it.Offset >= x.first && it.Offset < x.end {
				o = x
			}
		}
		if o == nil || !bytesEqual(o, it) {
			t.Fatalf("chunk %s: bytes differ from the source", it)
		}
		w.unconsumed = append(w.unconsumed, int64(len(it.Chunk)))
		w.items = append(w.items, it)
	case ItemGap:
		if it.Offset != w.expect {
			t.Fatalf("gap %s does not follow offset %d", it, w.expect)
		}
		found := false
		for _, l := range w.leaves {
			found = found || (l.Gap && l.First <= it.Offset && l.End == it.End)
		}
		if !found {
			t.Fatalf("gap %s is no gap of the source", it)
		}
	case ItemSkipped:
		if it.Offset != w.expect || it.End > w.firstOffset() {
			t.Fatalf("skipped %s: expected at %d, retention only removed below %d", it, w.expect, w.firstOffset())
		}
	}
	w.started = true
	w.expect = it.End
}

func pickID[V any](t *rapid.T, m map[uint64]V, label string) uint64 {
	ids := make([]uint64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return rapid.SampledFrom(ids).Draw(t, label)
}

// TestPropertyReadsSourceExactly drives a core against the model world with random chunk
// and range sizes, completions in any order, failures and short reads at any byte,
// retention racing the read (404s), uploads growing the tier and budget changes. The items
// delivered tile the offsets from the start to the end, chunks byte for byte the source's,
// gaps the source's gaps, skipped ranges only below the retention point; held bytes stay
// within max(budget, largest chunk + range size) whenever a GET is issued; and the core
// never waits for nothing (a request, a timer or the consumer is always pending).
func TestPropertyReadsSourceExactly(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := genWorld(t)
		rangeSize := int64(rapid.IntRange(1, 5000).Draw(t, "range"))
		budget := int64(rapid.IntRange(1, 30000).Draw(t, "budget"))
		cfg := Config{RangeSize: rangeSize, Budget: budget, MaxConcurrency: rapid.IntRange(1, 8).Draw(t, "ceiling"),
			LeavesAhead: rapid.IntRange(1, 3).Draw(t, "ahead"), MaxNotFound: 1000}
		from := w.leaves[0].First
		if rapid.Bool().Draw(t, "mid") {
			from = rapid.Uint64Range(w.leaves[0].First, w.next()-1).Draw(t, "from")
		}
		w.expect = from
		c, err := New(cfg, from)
		if err != nil {
			t.Fatal(err)
		}
		bound := func() int64 { return max(budget, w.maxChunk+rangeSize) }
		w.take(t, c.Start(), c, bound())
		step := func(ev Event) { w.take(t, c.Step(ev), c, bound()) }

		for i, steps := 0, rapid.IntRange(0, 300).Draw(t, "steps"); i < steps; i++ {
			if w.ended { // the consumer asks again: the tier may have grown
				w.ended = false
				step(Resume{})
			}
			switch rapid.IntRange(0, 9).Draw(t, "action") {
			case 0, 1, 2: // a GET answers: full, short, failed mid-way, 404 if retention took it
				if len(w.gets) == 0 {
					continue
				}
				id := pickID(t, w.gets, "get")
				g := w.gets[id]
				delete(w.gets, id)
				w.now += time.Duration(rapid.IntRange(0, 20).Draw(t, "dt")) * time.Millisecond
				ev := RangeDone{ID: id, At: w.now}
				if !w.live(g.Key) {
					ev.Outcome, ev.Err = NotFound, fmt.Errorf("404")
				} else {
					data := w.objects[g.Key].bytes[g.Off : g.Off+g.Len]
					switch rapid.IntRange(0, 3).Draw(t, "answer") {
					case 0:
						data = data[:rapid.Int64Range(0, g.Len-1).Draw(t, "short")]
					case 1:
						data = data[:rapid.Int64Range(0, g.Len).Draw(t, "cut")]
						ev.Outcome, ev.Err = Retriable, fmt.Errorf("reset")
					}
					ev.Data = append([]byte(nil), data...)
				}
				w.bufs[id] = ev.Data
				step(ev)
			case 3:
				if len(w.walks) == 0 {
					continue
				}
				id := pickID(t, w.walks, "walk")
				e := w.walks[id]
				delete(w.walks, id)
				out := OK
				if rapid.IntRange(0, 4).Draw(t, "walk-fails") == 0 {
					out = Retriable
				}
				step(w.walk(e, out))
			case 4:
				if len(w.indexes) == 0 {
					continue
				}
				id := pickID(t, w.indexes, "index")
				e := w.indexes[id]
				delete(w.indexes, id)
				ev := IndexFetched{ID: id}
				switch {
				case !w.live(e.Key):
					ev.Outcome, ev.Err = NotFound, fmt.Errorf("404")
				case rapid.IntRange(0, 3).Draw(t, "index-fails") == 0:
					ev.Outcome, ev.Err = Retriable, fmt.Errorf("503")
				default:
					ev.Records = w.objects[e.Key].records
				}
				step(ev)
			case 5:
				if len(w.timers) == 0 {
					continue
				}
				id := pickID(t, w.timers, "timer")
				delete(w.timers, id)
				step(TimerFired{ID: id})
			case 6:
				if len(w.unconsumed) == 0 {
					continue
				}
				step(w.consume(t, rapid.IntRange(1, len(w.unconsumed)).Draw(t, "consume")))
			case 7:
				budget = int64(rapid.IntRange(1, 30000).Draw(t, "new-budget"))
				step(SetBudget{Bytes: budget})
			case 8: // an upload: the manifest lists one more leaf
				if w.visible < len(w.leaves) {
					w.visible++
				}
			case 9: // retention: the first live leaf moves up to a later fragment
				var frags []int
				for j := w.first + 1; j < w.visible; j++ {
					if !w.leaves[j].Gap {
						frags = append(frags, j)
					}
				}
				if len(frags) > 0 && rapid.IntRange(0, 2).Draw(t, "retain?") == 0 {
					w.first = rapid.SampledFrom(frags).Draw(t, "retain")
				}
			}
		}
		// Settle: everything answers, the whole tier is listed, the consumer takes all.
		w.visible = len(w.leaves)
		for i := 0; !w.ended || w.endAt != w.next(); i++ {
			if w.ended {
				w.ended = false
				step(Resume{})
			}
			if i > 100000 {
				t.Fatalf("no end after %d settling steps: %s", i, c.Status())
			}
			switch {
			case len(w.unconsumed) > 0:
				step(w.consume(t, len(w.unconsumed)))
			case len(w.gets) > 0:
				id := pickID(t, w.gets, "settle-get")
				g := w.gets[id]
				delete(w.gets, id)
				w.now += time.Millisecond
				ev := RangeDone{ID: id, At: w.now}
				if w.live(g.Key) {
					ev.Data = append([]byte(nil), w.objects[g.Key].bytes[g.Off:g.Off+g.Len]...)
				} else {
					ev.Outcome, ev.Err = NotFound, fmt.Errorf("404")
				}
				w.bufs[id] = ev.Data
				step(ev)
			case len(w.walks) > 0:
				id := pickID(t, w.walks, "settle-walk")
				e := w.walks[id]
				delete(w.walks, id)
				step(w.walk(e, OK))
			case len(w.indexes) > 0:
				id := pickID(t, w.indexes, "settle-index")
				e := w.indexes[id]
				delete(w.indexes, id)
				ev := IndexFetched{ID: id, Records: w.objects[e.Key].records}
				if !w.live(e.Key) {
					ev = IndexFetched{ID: id, Outcome: NotFound, Err: fmt.Errorf("404")}
				}
				step(ev)
			case len(w.timers) > 0:
				id := pickID(t, w.timers, "settle-timer")
				delete(w.timers, id)
				step(TimerFired{ID: id})
			default:
				t.Fatalf("deadlock: nothing pending and no end (%s)", c.Status())
			}
		}
		if w.expect != w.next() {
			t.Fatalf("ended at %d, delivered up to %d", w.endAt, w.expect)
		}
		if len(w.unconsumed) > 0 {
			step(w.consume(t, len(w.unconsumed)))
		}
		if len(w.bufs) > 0 || len(w.copies) > 0 {
			t.Fatalf("%d buffers lent to the core and %d copies of chunks were never released after everything was consumed", len(w.bufs), len(w.copies))
		}
	})
}
