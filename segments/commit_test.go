package segments

import (
	"sync"
	"testing"
	"time"
)

func fired(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestCommittedOffsetSemantics(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{})
	if _, ok := l.Committed(); ok || l.CommittedNext() != 0 {
		t.Fatal("a new log has a committed offset")
	}
	hs := appendN(t, l, 6, 1) // chunks of 1, 2, 3, 1, 2, 3 records
	if l.CommittedNext() != 0 {
		t.Fatal("appends moved the committed offset")
	}
	steps := []struct {
		commit uint64
		next   uint64
	}{
		{hs[0].ChunkID, hs[0].NextID()},
		{hs[2].ChunkID + 1, hs[2].NextID()}, // inside chunk 2: the whole chunk
		{hs[1].ChunkID, hs[2].NextID()},     // lower: ignored
		{hs[4].ChunkID, hs[4].NextID()},
		{hs[5].ChunkID, hs[5].NextID()},
	}
	for _, s := range steps {
		if err := l.SetCommitted(s.commit); err != nil {
			t.Fatal(err)
		}
		if l.CommittedNext() != s.next {
			t.Fatalf("after SetCommitted(%d): committed next %d, want %d", s.commit, l.CommittedNext(), s.next)
		}
	}
	if id, ok := l.Committed(); !ok || id != hs[5].ChunkID {
		t.Fatalf("Committed %d %v", id, ok)
	}

	// A replica may learn of a commit before writing the chunk: it counts once written.
	ahead := l.NextOffset() + 4
	if err := l.SetCommitted(ahead); err != nil {
		t.Fatal(err)
	}
	if l.CommittedNext() != l.NextOffset() {
		t.Fatalf("commit ahead: committed next %d, next %d", l.CommittedNext(), l.NextOffset())
	}
	more := appendN(t, l, 4, 1) // ids next, +1, +3, +6: the third one holds ahead
	if l.CommittedNext() != more[2].NextID() {
		t.Fatalf("committed next %d after writing up to the commit, want %d (chunks %+v)", l.CommittedNext(), more[2].NextID(), more)
	}
}

// After a reopen the chunk a commit names is found through the index files.
func TestCommittedResolvedFromIndex(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{MaxSegmentChunks: 7})
	hs := appendN(t, l, 40, 1)
	l.Close()
	for _, i := range []int{0, 3, 6, 7, 20, 38, 39} {
		for _, off := range []uint64{hs[i].ChunkID, hs[i].NextID() - 1} {
			l := mustOpen(t, dir, Options{MaxSegmentChunks: 7})
			if err := l.SetCommitted(off); err != nil {
				t.Fatal(err)
			}
			if l.CommittedNext() != hs[i].NextID() {
				t.Fatalf("commit of %d (chunk %d) after reopen: committed next %d, want %d", off, i, l.CommittedNext(), hs[i].NextID())
			}
			l.Close()
		}
	}
}

func TestCommitListeners(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{})
	hs := appendN(t, l, 3, 1)
	c1 := l.NotifyWhenCommittedPast(hs[1].ChunkID)
	c2 := l.NotifyWhenCommittedPast(hs[2].ChunkID)
	if fired(c1) || fired(c2) {
		t.Fatal("listener fired before any commit")
	}
	l.SetCommitted(hs[0].ChunkID)
	if fired(c1) || fired(c2) {
		t.Fatal("listener fired before its offset was committed")
	}
	l.SetCommitted(hs[1].ChunkID)
	if !fired(c1) || fired(c2) {
		t.Fatal("commit of chunk 1 should fire exactly the first listener")
	}
	if !fired(l.NotifyWhenCommittedPast(hs[0].ChunkID)) {
		t.Fatal("a listener for a committed offset did not fire at once")
	}
	// Committing ahead fires when the chunk is written.
	l.SetCommitted(l.NextOffset() + 10)
	if !fired(c2) {
		t.Fatal("listener of chunk 2 did not fire")
	}
	c3 := l.NotifyWhenCommittedPast(l.NextOffset())
	if fired(c3) {
		t.Fatal("listener for an unwritten chunk fired")
	}
	appendN(t, l, 1, 1)
	if !fired(c3) {
		t.Fatal("listener did not fire when a chunk under the commit was written")
	}
	c4 := l.NotifyWhenCommittedPast(1 << 40)
	l.Close()
	if !fired(c4) {
		t.Fatal("Close left a listener waiting")
	}
}

// Registration racing with commits never loses a wake-up.
func TestCommitListenerRace(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{})
	const n = 2000
	ids := make([]uint64, n)
	for i := range n {
		h, _, err := l.Append(userChunk(1, 1, "x"))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = h.ChunkID
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, id := range ids {
			l.SetCommitted(id)
		}
	}()
	deadline := time.After(30 * time.Second) // a failure guard, not synchronisation
	for _, id := range ids {
		select {
		case <-l.NotifyWhenCommittedPast(id):
		case <-deadline:
			t.Fatalf("listener for %d never fired (committed next %d)", id, l.CommittedNext())
		}
	}
	wg.Wait()
}
