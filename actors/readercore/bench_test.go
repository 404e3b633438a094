package readercore

import (
	"fmt"
	"testing"

	"github.com/streamtier/streamtier/chunk"
)

// benchDrain drives a stream of small chunks through the core the way the shell would:
// every drained chunk is a Step; every cut is answered by a successful upload, and every
// persist by a success, so the pipeline never backs up. It reports the core's cost per
// drained chunk (ns/op) and the events it handles per second.
func benchDrain(b *testing.B, target uint64, chunkSize int64) {
	c, err := New(Config{StreamID: "bench", Epoch: 1, FragmentTargetSize: target, PersistThreshold: 5})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.Step(Resolved{Manifest: c.persisted}); err != nil {
		b.Fatal(err)
	}
	if _, err := c.Step(LogOpened{}); err != nil {
		b.Fatal(err)
	}
	h := chunk.Header{Records: 10, Timestamp: 1, Epoch: 1, DataLen: uint32(chunkSize - chunk.HeaderSize)}
	loc := chunk.Location{Segment: "00000000000000000000.segment", Position: 8, Size: chunkSize}
	var uid uint64
	var rev int64
	events := 0
	var follow []Event
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		effs, err := c.Step(ChunkDrained{Header: h, Location: loc})
		if err != nil {
			b.Fatal(err)
		}
		events++
		h.ChunkID = h.NextID()
		loc.Position += chunkSize
		if loc.Position > 500_000_000 { // segment roll
			loc.Segment, loc.Position = fmt.Sprintf("%020d.segment", h.ChunkID), 8
		}
		for len(effs) > 0 {
			follow = follow[:0]
			for _, e := range effs {
				switch e := e.(type) {
				case SubmitTransfer:
					uid++
					follow = append(follow, TransferResult{Ref: e.Ref, Attempt: e.Attempt, Outcome: OK, UID: uid})
				case UploadGroup:
					uid++
					follow = append(follow, GroupUploadResult{Ref: e.Ref, Attempt: e.Attempt, Outcome: OK, UID: uid})
				case StartPersist:
					rev++
					follow = append(follow, PersistResult{Ref: e.Ref, Outcome: PersistOK, Revision: e.ExpectedRevision + 1, RootUID: uint64(rev)})
				}
			}
			effs = nil
			for _, ev := range follow {
				more, err := c.Step(ev)
				if err != nil {
					b.Fatal(err)
				}
				events++
				effs = append(effs[:0:0], more...)
			}
		}
	}
	b.StopTimer()
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(events)/s, "events/s")
	}
}

// BenchmarkDrainSmallChunks: 1 KiB chunks into 64 MiB fragments (the default target).
func BenchmarkDrainSmallChunks(b *testing.B) { benchDrain(b, DefaultFragmentTargetSize, 1024) }

// BenchmarkDrainSmallFragments: 1 KiB chunks into 64 KiB fragments, so that cuts, uploads,
// completions and persists weigh in too (a cut every 64 chunks; every upload is answered at
// once, so the pipeline drains at each completion and each cut is persisted on its own).
func BenchmarkDrainSmallFragments(b *testing.B) { benchDrain(b, 64<<10, 1024) }
