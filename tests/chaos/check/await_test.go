package check

import (
	"testing"

	"github.com/streamtier/streamtier/manifest"
)

// An await answered persisted for an offset no manifest record covers is a violation,
// judged at once when the harness read the record after the answer, else at the next check;
// answers the records cover are fine.
func TestCheckerReportsAwaitBeyondTheRecords(t *testing.T) {
	tr := newTier(t)
	_, _, next := tr.three(0)
	c := tr.checker()
	mustCheck(t, c, false)
	c.AwaitPersisted(tStream, next-1, true)
	c.AwaitPersisted(tStream, 0, false)
	mustCheck(t, c, false)
	if v := rules(c); len(v) != 0 {
		t.Fatalf("answers the record covers: %v", v)
	}
	c.AwaitPersisted(tStream, next, true)
	wantRule(t, c, "await-unrecorded")

	tr2 := newTier(t)
	_, _, next2 := tr2.three(0)
	c2 := tr2.checker()
	c2.AwaitPersisted(tStream, next2+5, false) // etcd could not be read after the answer
	if v := rules(c2); len(v) != 0 {
		t.Fatalf("a deferred answer was judged before the check: %v", v)
	}
	mustCheck(t, c2, false)
	wantRule(t, c2, "await-unrecorded")
	if st := c2.Stats(); st.AwaitPersisted != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// An await answered "in a declared gap" for data the log never lost is a violation; inside
// what the harness deleted before it was persisted it is fine. A persisted answer for an
// offset the snapshot shows inside a gap is a violation.
func TestCheckerReportsAwaitGapAnswers(t *testing.T) {
	tr := newTier(t)
	_, _, next := tr.three(0)
	c := tr.checker()
	mustCheck(t, c, false)
	c.AwaitInGap(tStream, next/2)
	wantRule(t, c, "await-gap-over-data")

	tr2 := newTier(t)
	e0, _, _ := tr2.fragment(0, 10)
	e2, _, _ := tr2.fragment(20, 30)
	lostFrom, lostTo := tr2.ref.Chunk(10).Offset, tr2.ref.Chunk(20).Offset
	gap := manifest.Entry{FirstOffset: lostFrom, FirstTimestamp: -1, LastTimestamp: -1, Kind: manifest.KindGap}
	c2 := tr2.checker()
	c2.Lost(tStream, lostFrom, lostTo)
	tr2.persist([]manifest.Entry{e0, gap, e2}, 0, tr2.ref.Chunk(29).End(), 0)
	mustCheck(t, c2, false)
	c2.AwaitInGap(tStream, lostFrom)
	c2.AwaitInGap(tStream, lostTo-1)
	c2.AwaitPersisted(tStream, lostTo, true)
	mustCheck(t, c2, false)
	if v := rules(c2); len(v) != 0 {
		t.Fatalf("gap answers inside what the log lost: %v", v)
	}
	c2.AwaitPersisted(tStream, lostFrom+1, true)
	mustCheck(t, c2, false)
	wantRule(t, c2, "await-persisted-in-gap")
	if st := c2.Stats(); st.AwaitInGap != 2 || st.AwaitPersisted != 2 {
		t.Fatalf("stats %+v", st)
	}
}
