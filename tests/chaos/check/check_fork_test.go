package check

import (
	"fmt"
	"testing"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// Timelines that fork off each other: a diverged log's truncation, a deposed writer's
// suffix cut, and records that mix two timelines.

// forkLoad is the load of a timeline forking off tr's: another seed and a higher epoch.
func (tr *tier) forkLoad() loadgen.Config {
	cfg := tr.load
	cfg.Seed ^= 0x5eed
	cfg.Epoch = 2
	return cfg
}

// forked writes three fragments of the load, checks them, and has the harness fork the log
// at chunk 30 (inside the third fragment, [25,40)): the local log holds another timeline from
// there. It returns the entries, the fork's offset and the new timeline.
func (tr *tier) forked(c *Checker) ([]manifest.Entry, uint64, *Reference) {
	es, _, _ := tr.three(0)
	mustCheck(tr.t, c, false)
	at := tr.ref.Chunk(30).Offset
	if err := c.Forked(tStream, at, tr.forkLoad()); err != nil {
		tr.t.Fatal(err)
	}
	nt, err := NewReferenceAt(tr.forkLoad(), at)
	if err != nil {
		tr.t.Fatal(err)
	}
	if !c.ForkPending(tStream) {
		tr.t.Fatal("a fork below the acknowledged next offset is not pending")
	}
	return es, at, nt
}

// A fork followed as the spec asks: the remote tier keeps the old timeline while the node has
// not resolved (no violation), is cut back to the fork exactly (the straddling fragment
// replaced by its prefix), then holds the new timeline's chunks from there. The checker sees
// the truncation record, or (watch behind) only the bucket holding the new chunks.
func TestCheckerFollowsAFork(t *testing.T) {
	t.Run("cut-and-appends-in-one-persist", func(t *testing.T) {
		// The cut's own persist failed; its retry carried the new timeline's first
		// fragment: the next offset falls from above the fork to above it.
		tr := newTier(t)
		c := tr.checker()
		es, at, nt := tr.forked(c)
		prefix, _, _ := tr.fragmentOf(tr.ref, 25, 30, 5000)
		nf, _, _ := tr.fragmentOf(nt, 0, 3, 7000)
		if nt.Chunk(2).End() >= tr.ref.Chunk(39).End() || nt.Chunk(2).End() <= at {
			t.Fatalf("want a next offset between the fork and the old one: %d", nt.Chunk(2).End())
		}
		tr.persist([]manifest.Entry{es[0], es[1], prefix, nf}, 0, nt.Chunk(2).End(), 0)
		mustCheck(t, c, true)
		if v := rules(c); len(v) != 0 {
			t.Fatalf("a cut persisted with the new timeline's first fragment: %v", v)
		}
		if st := c.Stats(); c.ForkPending(tStream) || st.ForksFollowed != 1 {
			t.Fatalf("fork not followed: %+v", st)
		}
	})
	for _, seen := range []bool{true, false} {
		t.Run(fmt.Sprintf("truncation-record-seen=%t", seen), func(t *testing.T) {
			tr := newTier(t)
			c := tr.checker()
			es, at, nt := tr.forked(c)
			mustCheck(t, c, false) // not resolved yet: the old timeline is still there
			prefix, _, _ := tr.fragmentOf(tr.ref, 25, 30, 5000)
			tr.persist([]manifest.Entry{es[0], es[1], prefix}, 0, at, 0)
			if seen {
				mustCheck(t, c, false)
				if c.ForkPending(tStream) {
					t.Fatal("the truncation to the fork did not settle it")
				}
			}
			nf, _, _ := tr.fragmentOf(nt, 0, 12, 7000)
			tr.persist([]manifest.Entry{es[0], es[1], prefix, nf}, 0, nt.Chunk(11).End(), 0)
			mustCheck(t, c, true)
			if v := rules(c); len(v) != 0 {
				t.Fatalf("a fork followed as it should be: %v", v)
			}
			st := c.Stats()
			if c.ForkPending(tStream) || st.Forks != 1 || st.ForksFollowed != 1 {
				t.Fatalf("fork not followed: %+v", st)
			}
			if seen != (st.Truncations == 1) {
				t.Fatalf("truncations %d, truncation record seen %t", st.Truncations, seen)
			}
		})
	}
}

// Truncations that break the fork rule are each reported: one that cuts below the fork
// (acknowledged shared chunks lost), one that keeps old-timeline chunks above it, old
// chunks uploaded again after the cut, and a remote tier that never follows.
func TestCheckerReportsBrokenForkTruncation(t *testing.T) {
	t.Run("below", func(t *testing.T) {
		tr := newTier(t)
		c := tr.checker()
		es, _, _ := tr.forked(c)
		tr.persist(es[:2], 0, es[2].FirstOffset, 0) // cut at 25, the fork is at 30
		mustCheck(t, c, false)
		wantRule(t, c, "truncated-below-divergence")
	})
	t.Run("above", func(t *testing.T) {
		tr := newTier(t)
		c := tr.checker()
		es, _, _ := tr.forked(c)
		kept, _, _ := tr.fragmentOf(tr.ref, 25, 35, 5000) // old chunks 30..34 kept
		tr.persist([]manifest.Entry{es[0], es[1], kept}, 0, tr.ref.Chunk(34).End(), 0)
		mustCheck(t, c, false)
		// The record alone may be the cut with new chunks in the same persist: the check's
		// fragments show the old chunks kept.
		wantRule(t, c, "bytes-differ")
	})
	t.Run("old-chunks-again", func(t *testing.T) {
		tr := newTier(t)
		c := tr.checker()
		es, at, _ := tr.forked(c)
		prefix, _, _ := tr.fragmentOf(tr.ref, 25, 30, 5000)
		tr.persist([]manifest.Entry{es[0], es[1], prefix}, 0, at, 0)
		mustCheck(t, c, false)
		old, _, _ := tr.fragmentOf(tr.ref, 30, 40, 6000) // the old timeline's chunks, uploaded after the cut
		tr.persist([]manifest.Entry{es[0], es[1], prefix, old}, 0, tr.ref.Chunk(39).End(), 0)
		mustCheck(t, c, false)
		wantRule(t, c, "bytes-differ")
	})
	t.Run("never-followed", func(t *testing.T) {
		tr := newTier(t)
		c := tr.checker()
		tr.forked(c)
		mustCheck(t, c, false)
		if v := rules(c); len(v) != 0 {
			t.Fatalf("a fork not resolved yet, mid-soak: %v", v)
		}
		mustCheck(t, c, true)
		wantRule(t, c, "fork-not-followed")
	})
}

// deposed has the remote tier follow a leader elected at epoch 2 from the end of the three
// fragments (chunk 40 of the load: no truncation due), tiering ten of its chunks, then has
// the harness cut that deposed leader's suffix away at chunk 30 of the load, below the
// epoch-2 timeline's start, and write a timeline at epoch 3 from there (a replica rejoining
// the new leader). It returns the entries, the epoch-2 fragment, the cut and the epoch-3
// timeline.
func (tr *tier) deposed(c *Checker) ([]manifest.Entry, manifest.Entry, uint64, *Reference) {
	es, _, next := tr.three(0)
	mustCheck(tr.t, c, false)
	bumped := tr.load
	bumped.Seed ^= 0xb0b
	bumped.Epoch = 2
	if err := c.Forked(tStream, next, bumped); err != nil {
		tr.t.Fatal(err)
	}
	if c.ForkPending(tStream) {
		tr.t.Fatal("a leader going on from the log's end left a fork pending")
	}
	t1, err := NewReferenceAt(bumped, next)
	if err != nil {
		tr.t.Fatal(err)
	}
	f1, _, _ := tr.fragmentOf(t1, 0, 10, 6000)
	tr.persist(append(es[:3:3], f1), 0, t1.Chunk(9).End(), 0)
	mustCheck(tr.t, c, false)
	if v := rules(c); len(v) != 0 {
		tr.t.Fatalf("the epoch-2 leader's chunks tiered: %v", v)
	}
	rejoined := tr.load
	rejoined.Seed ^= 0xc0c
	rejoined.Epoch = 3
	at := tr.ref.Chunk(30).Offset
	if err := c.Forked(tStream, at, rejoined); err != nil {
		tr.t.Fatal(err)
	}
	if !c.ForkPending(tStream) {
		tr.t.Fatal("a cut below the deposed leader's suffix is not pending")
	}
	t2, err := NewReferenceAt(rejoined, at)
	if err != nil {
		tr.t.Fatal(err)
	}
	return es, f1, at, t2
}

// A replica cutting a deposed leader's higher-epoch suffix away below its first chunk, then
// following a new leader (a fork below the latest fork): the remote tier cut back to the cut
// (the straddling fragment replaced by its prefix, the deposed leader's fragment dropped)
// and the epoch-3 timeline tiered is right; cutting only at the deposed leader's start, or
// never cutting, is reported.
func TestCheckerFollowsADeposedSuffixCut(t *testing.T) {
	t.Run("followed", func(t *testing.T) {
		tr := newTier(t)
		c := tr.checker()
		es, _, at, t2 := tr.deposed(c)
		mustCheck(t, c, false) // not resolved yet: the old timelines are still there
		prefix, _, _ := tr.fragmentOf(tr.ref, 25, 30, 5000)
		tr.persist([]manifest.Entry{es[0], es[1], prefix}, 0, at, 0)
		mustCheck(t, c, false)
		nf, _, _ := tr.fragmentOf(t2, 0, 12, 7000)
		tr.persist([]manifest.Entry{es[0], es[1], prefix, nf}, 0, t2.Chunk(11).End(), 0)
		mustCheck(t, c, true)
		if v := rules(c); len(v) != 0 {
			t.Fatalf("a deposed suffix cut followed as it should be: %v", v)
		}
		if st := c.Stats(); c.ForkPending(tStream) || st.Forks != 2 || st.ForksFollowed != 1 || st.Truncations != 1 {
			t.Fatalf("the cut not followed: %+v", st)
		}
	})
	t.Run("cut-at-the-deposed-start", func(t *testing.T) {
		tr := newTier(t)
		c := tr.checker()
		es, _, _, _ := tr.deposed(c)
		tr.persist(es, 0, tr.ref.Chunk(39).End(), 0) // the epoch-2 chunks dropped, the load's 30..39 kept
		mustCheck(t, c, false)
		wantRule(t, c, "bytes-differ")
	})
	t.Run("never-followed", func(t *testing.T) {
		tr := newTier(t)
		c := tr.checker()
		tr.deposed(c)
		mustCheck(t, c, true) // the epoch-2 fragment still above the cut at the end
		wantRule(t, c, "fork-not-followed")
	})
}

// Old-timeline chunks above the fork next to new-timeline ones (with every chunk one offset,
// so that both timelines have a chunk at every offset) are two histories mixed.
func TestCheckerReportsMixedTimelines(t *testing.T) {
	one := loadgen.Config{Seed: 9, MinDataBytes: 200, MaxDataBytes: 900, MinEntries: 1, MaxEntries: 1, StartTimestamp: 1_700_000_000_000}
	tr := newTierLoad(t, one)
	c := tr.checker()
	es, at, nt := tr.forked(c)
	kept, _, _ := tr.fragmentOf(tr.ref, 25, 35, 5000) // old 30..34
	nf, _, _ := tr.fragmentOf(nt, 5, 12, 7000)        // new from offset 35 on
	if kept.FirstOffset != 25 || at != 30 || nf.FirstOffset != 35 {
		t.Fatalf("one offset per chunk expected: %d %d %d", kept.FirstOffset, at, nf.FirstOffset)
	}
	// Between two checks: the checker sees no regression, only the bucket.
	tr.persist([]manifest.Entry{es[0], es[1], kept, nf}, 0, nt.Chunk(11).End(), 0)
	mustCheck(t, c, false)
	wantRule(t, c, "mixed-timelines")

	// The same with the old fragment the checker had already compared before the fork
	// ([25,40), old 30..39) kept whole, and the new timeline appended after it.
	tr2 := newTierLoad(t, one)
	c2 := tr2.checker()
	es2, _, nt2 := tr2.forked(c2)
	after, _, _ := tr2.fragmentOf(nt2, 10, 15, 7000) // new from offset 40 on
	tr2.persist(append(es2[:3:3], after), 0, nt2.Chunk(14).End(), 0)
	mustCheck(t, c2, false)
	wantRule(t, c2, "mixed-timelines")
}
