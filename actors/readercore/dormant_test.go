package readercore

import (
	"testing"

	"pgregory.net/rapid"
)

// A snapshot gives back exactly the status it was made of, whatever the status: compact
// when it has only a dormant core's fields set, whole otherwise.
func TestSnapshotGivesBackTheStatus(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		st := rapid.Make[Status]().Draw(t, "status")
		if rapid.Bool().Draw(t, "dormant-like") { // only the fields a dormant core sets
			st = Status{Phase: st.Phase, Epoch: st.Epoch, Revision: st.Revision, PersistedFirst: st.PersistedFirst,
				PersistedNext: st.PersistedNext, First: st.First, Next: st.Next, TotalSize: st.TotalSize, Entries: st.Entries,
				DrainNext: st.DrainNext, PersistState: st.PersistState, LastPersistAt: st.LastPersistAt,
				OldestUnpersistedTimestamp: st.OldestUnpersistedTimestamp, LastPersistError: st.LastPersistError,
				LastUploadError: st.LastUploadError, HeldBound: st.HeldBound, Counters: st.Counters}
			if sn := Snap(st); sn.whole != nil {
				t.Fatalf("kept whole: %+v", st)
			}
		}
		sn := Snap(st)
		if got := sn.Status(); got != st {
			t.Fatalf("snapshot gave back\n%+v\nfor\n%+v", got, st)
		}
	})
}
