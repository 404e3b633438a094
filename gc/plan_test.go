package gc

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/tiertest"
)

// TestDecide covers every rule of remote-format.md "Garbage: what may be collected" (below
// the persisted next offset: older than the root or not; at or above it: fenced epoch,
// current epoch, a successor's epoch, a version 1 key; superseded roots; a prefix without
// an anchor: unclaimed, never collected; a stream that never persisted: its root kept),
// the grace period and its margin, streams whose references are unknown, and keys that are
// not streamtier's.
func TestDecide(t *testing.T) {
	const p = manifest.DefaultKeyPrefix
	now := time.Unix(1_800_000_000, 0)
	old, young := now.Add(-3*time.Hour), now.Add(-30*time.Second)
	rootT := now.Add(-2 * time.Hour) // when a's root was written
	afterRoot := rootT.Add(time.Minute)
	rec := metadata.ManifestRecord{Epoch: 2, RootUID: 5, FirstOffset: 100, NextOffset: 500}
	frag := func(stream string, off, epoch, uid uint64) string {
		return manifest.FragmentKey(p, stream, off, epoch, uid)
	}
	group := func(off, epoch, uid uint64) string {
		return manifest.GroupKey(p, "a", manifest.KindGroup, off, epoch, uid)
	}
	v1 := func(stream string, off, uid uint64, kind manifest.Kind) string {
		return tiertest.ObjectKey(p, stream, manifest.Entry{FirstOffset: off, UID: uid, Kind: kind}, 0, 1)
	}
	live := frag("a", 100, 2, 1)
	liveV1 := v1("a", 300, 2, manifest.KindFragment)
	root := manifest.RootKey(p, "a", 2, 5)
	states := map[string]StreamState{
		"a":      {Stream: "a", Anchored: true, Recorded: true, Record: rec, Revision: 4, Epoch: 2, Referenced: map[string]bool{live: true, liveV1: true, root: true}},
		"gone":   {Stream: "gone", Epoch: 0},
		"new":    {Stream: "new", Anchored: true},
		"bad":    {Stream: "bad", Anchored: true, Recorded: true, Err: errors.New("root X: corrupt")},
		"noroot": {Stream: "noroot", Anchored: true, Recorded: true, Record: rec, Epoch: 2, Referenced: map[string]bool{}},
	}
	type want struct{ list, reason string }

	cases := []struct {
		key      string
		modified time.Time
		want     want
	}{
		{live, old, want{"referenced", ""}},
		{liveV1, old, want{"referenced", ""}},
		{root, rootT, want{"referenced", ""}},
		// At or above the persisted next offset.
		{frag("a", 500, 2, 10), old, want{"pending", "a live writer may still persist it"}},
		{frag("a", 900, 3, 11), old, want{"pending", "epoch 3 (stored epoch 2)"}},
		{frag("a", 600, 1, 12), old, want{"orphans", "fenced"}},
		{frag("a", 700, 1, 13), young, want{"young", "fenced"}},
		{group(500, 1, 14), old, want{"orphans", "fenced"}},
		{group(500, 2, 15), old, want{"pending", "may still persist"}},
		{v1("a", 800, 16, manifest.KindFragment), old, want{"pending", "version 1 key"}},
		// Below it: older than the root or not.
		{frag("a", 50, 1, 20), old, want{"orphans", "dropped by retention"}},
		{v1("a", 60, 21, manifest.KindFragment), old, want{"orphans", "dropped by retention"}},
		{frag("a", 200, 2, 22), old, want{"orphans", "uploaded again"}},
		{v1("a", 200, 23, manifest.KindFragment), old, want{"orphans", "uploaded again"}},
		{frag("a", 200, 2, 24), afterRoot, want{"pending", "not older than the root"}},
		{frag("a", 300, 2, 25), rootT, want{"pending", "not older than the root"}},
		{frag("a", 400, 1, 26), afterRoot, want{"pending", "not older than the root"}},
		{group(10, 1, 27), old, want{"orphans", "dropped by retention"}},
		{group(300, 2, 28), old, want{"orphans", "rebalance that never persisted"}},
		{v1("a", 300, 29, manifest.KindKiloGroup), old, want{"orphans", "rebalance that never persisted"}},
		{group(300, 2, 30), afterRoot, want{"pending", "not older than the root"}},
		// Roots.
		{manifest.RootKey(p, "a", 1, 6), old, want{"orphans", "superseded root"}},
		{manifest.RootKey(p, "a", 2, 7), young, want{"young", "superseded root"}},
		// Other streams.
		{frag("gone", 0, 1, 1), old, want{"unclaimed", "no anchor"}},
		{frag("gone", 10, 9, 2), old, want{"unclaimed", "never collected"}},
		{manifest.RootKey(p, "gone", 9, 3), old, want{"unclaimed", "no anchor"}},
		{frag("new", 0, 1, 1), old, want{"pending", "never persisted a manifest"}},
		{v1("new", 10, 2, manifest.KindFragment), old, want{"pending", "version 1"}},
		{manifest.RootKey(p, "new", 1, 3), old, want{"pending", "never collected for want of a record"}},
		{frag("noroot", 0, 1, 1), old, want{"pending", "not in the listing"}},
		{frag("noroot", 600, 1, 2), old, want{"orphans", "fenced"}},
		{frag("bad", 0, 1, 1), old, want{"undecided", "corrupt"}},
		{frag("unexamined", 0, 1, 1), old, want{"undecided", "not examined"}},
		{p + "/notes.txt", old, want{"foreign", ""}},
	}
	var objs []s3io.ObjectInfo
	for _, c := range cases {
		objs = append(objs, s3io.ObjectInfo{Key: c.key, Size: 1, LastModified: c.modified})
	}
	check := func(plan Plan, grace time.Duration) {
		t.Helper()
		got := map[string]want{}
		for list, os := range map[string][]Orphan{"orphans": plan.Orphans, "young": plan.Young, "pending": plan.Pending, "undecided": plan.Undecided, "unclaimed": plan.Unclaimed} {
			for _, o := range os {
				if _, dup := got[o.Key]; dup {
					t.Errorf("%s in two lists", o.Key)
				}
				got[o.Key] = want{list, o.Reason}
			}
		}
		for _, k := range plan.Foreign {
			got[k] = want{"foreign", ""}
		}
		referenced := 0
		for _, c := range cases {
			w := c.want
			// Grace zero still keeps the clock margin: 30 s old is young.
			if w.list == "referenced" {
				referenced++
				if g, ok := got[c.key]; ok {
					t.Errorf("referenced %s listed as %s", c.key, g.list)
				}
				continue
			}
			g := got[c.key]
			if g.list != w.list || !strings.Contains(g.reason, w.reason) {
				t.Errorf("grace %s: %s: %s %q; want %s mentioning %q", grace, c.key, g.list, g.reason, w.list, w.reason)
			}
		}
		if plan.Scanned != len(cases) || plan.Bytes != int64(len(cases)) || plan.Referenced != referenced {
			t.Errorf("counts: scanned %d bytes %d referenced %d", plan.Scanned, plan.Bytes, plan.Referenced)
		}
	}
	plan := Decide(objs, p, states, now, time.Hour)
	check(plan, time.Hour)
	if plan.Revisions["a"] != 4 {
		t.Fatalf("revisions: %v", plan.Revisions)
	}
	// Grace zero keeps the one-minute margin, and still nothing pending.
	check(Decide(objs, p, states, now, 0), 0)
	// However old: a pending object stays pending a year on.
	for _, o := range Decide(objs, p, states, now.Add(365*24*time.Hour), time.Hour).Orphans {
		if strings.Contains(o.Key, "/a/data/00000000000000000500-") {
			t.Fatalf("pending %s collected a year on", o.Key)
		}
	}
}
