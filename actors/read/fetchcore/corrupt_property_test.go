package fetchcore

import (
	"errors"
	"testing"

	"pgregory.net/rapid"
)

// TestPropertyCorruptHeaderNeverDelivered: one chunk of one object has a bit flipped where
// its data CRC does not look (the header's timestamp, record count or trailer length) or
// its index record disagrees with it. Whatever the range sizes, the budget and the order the answers come in, the read
// delivers every chunk before that one byte for byte, never that chunk or any after it,
// and fails with ErrCorrupt.
func TestPropertyCorruptHeaderNeverDelivered(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := genWorld(t)
		w.visible = len(w.leaves)
		var keys []string
		for _, l := range w.leaves {
			if !l.Gap {
				keys = append(keys, l.Key)
			}
		}
		o := w.objects[rapid.SampledFrom(keys).Draw(t, "object")]
		bad := rapid.IntRange(0, len(o.records)-1).Draw(t, "chunk")
		pristine := map[uint64]string{}
		for _, x := range w.objects {
			for i, r := range x.records {
				pristine[r.ChunkID] = string(x.chunks[i])
			}
		}
		switch rapid.SampledFrom([]string{"timestamp", "index", "records", "trailer"}).Draw(t, "where") {
		case "timestamp":
			o.corruptTimestamp(bad)
		case "index":
			o.corruptIndex(bad)
		case "records":
			o.corruptHeader(bad, 7)
		case "trailer":
			o.corruptHeader(bad, 43)
		}
		badID := o.records[bad].ChunkID

		rangeSize := int64(rapid.IntRange(1, 5000).Draw(t, "range"))
		cfg := Config{RangeSize: rangeSize, Budget: int64(rapid.IntRange(1, 30000).Draw(t, "budget")),
			MaxConcurrency: rapid.IntRange(1, 8).Draw(t, "ceiling"), LeavesAhead: rapid.IntRange(1, 3).Draw(t, "ahead")}
		c, err := New(cfg, w.leaves[0].First)
		if err != nil {
			t.Fatal(err)
		}
		next := w.leaves[0].First
		var failed error
		var pending []Event // answers not yet given, one picked at random each step
		take := func(effs []Effect) {
			for _, e := range effs {
				switch e := e.(type) {
				case Get:
					b := w.objects[e.Key].bytes[e.Off : e.Off+e.Len]
					pending = append(pending, RangeDone{ID: e.ID, Data: append([]byte(nil), b...)})
				case FetchIndex:
					pending = append(pending, IndexFetched{ID: e.ID, Records: w.objects[e.Key].records})
				case NeedLeaves:
					pending = append(pending, w.walk(e, OK))
				case ArmTimer:
					pending = append(pending, TimerFired{ID: e.ID})
				case Deliver:
					it := e.Item
					if it.Kind != ItemChunk {
						next = it.End
						continue
					}
					if it.Offset >= badID && it.Offset < o.end {
						t.Fatalf("delivered chunk %s at or after the corrupt chunk %d of %s", it, badID, o.key)
					}
					if got := string(it.Assemble(nil)); it.Offset != next || got != pristine[it.Offset] {
						t.Fatalf("chunk %s: not the source's next chunk (expected offset %d)", it, next)
					}
					next = it.End
					pending = append(pending, Consumed{Bytes: int64(it.Size())})
				case Fail:
					failed = e.Err
				case End:
					t.Fatalf("the read ended at %d past the corrupt chunk %d", e.At, badID)
				}
			}
		}
		take(c.Start())
		for failed == nil {
			if len(pending) == 0 {
				t.Fatalf("nothing pending, no failure (%s)", c.Status())
			}
			i := rapid.IntRange(0, len(pending)-1).Draw(t, "answer")
			ev := pending[i]
			pending = append(pending[:i], pending[i+1:]...)
			take(c.Step(ev))
		}
		if !errors.Is(failed, ErrCorrupt) || next != badID {
			t.Fatalf("failed with %v after delivering up to %d: want ErrCorrupt at the corrupt chunk %d", failed, next, badID)
		}
	})
}
