package gc

import (
	"fmt"
	"testing"
	"time"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/s3io"
)

// BenchmarkDecide decides over a listing of 100,000 fragments of 10 streams (and their
// roots), a tenth of them unreferenced and older than the root.
func BenchmarkDecide(b *testing.B) {
	const p, streams, perStream = manifest.DefaultKeyPrefix, 10, 10_000
	now := time.Now()
	var objs []s3io.ObjectInfo
	states := map[string]StreamState{}
	for s := range streams {
		id := fmt.Sprintf("stream-%d", s)
		rec := metadata.ManifestRecord{Epoch: 1, RootUID: 1, NextOffset: perStream * 100}
		st := StreamState{Stream: id, Anchored: true, Recorded: true, Record: rec, Epoch: 1, Referenced: map[string]bool{}}
		root := manifest.RootKey(p, id, 1, 1)
		st.Referenced[root] = true
		objs = append(objs, s3io.ObjectInfo{Key: root, LastModified: now.Add(-time.Hour)})
		for i := range perStream {
			key := manifest.FragmentKey(p, id, uint64(i*100), 1, uint64(i+1))
			objs = append(objs, s3io.ObjectInfo{Key: key, Size: 64 << 20, LastModified: now.Add(-2 * time.Hour)})
			if i%10 != 0 {
				st.Referenced[key] = true
			}
		}
		states[id] = st
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		plan := Decide(objs, p, states, now, time.Hour)
		if len(plan.Orphans) != streams*perStream/10 {
			b.Fatalf("%d orphans", len(plan.Orphans))
		}
	}
}
