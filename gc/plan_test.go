package gc

import (
	"errors"
	"strings"
	"testing"
	"time"

	"streamtier/manifest"
	"streamtier/metadata"
	"streamtier/s3io"
)

func TestParseKey(t *testing.T) {
	const p = "tier/one"
	good := map[string]Key{
		manifest.FragmentKey(p, "s-1", 42, 0xabc):                                  {Stream: "s-1", Kind: KindFragment, Offset: 42, UID: 0xabc},
		manifest.GroupKey(p, "s-1", manifest.KindGroup, 7, 1):                      {Stream: "s-1", Kind: KindGroup, Offset: 7, UID: 1},
		manifest.GroupKey(p, "s.2", manifest.KindKiloGroup, 0, 0xffffffffffffffff): {Stream: "s.2", Kind: KindKiloGroup, UID: 0xffffffffffffffff},
		manifest.GroupKey(p, "s", manifest.KindMegaGroup, 9, 2):                    {Stream: "s", Kind: KindMegaGroup, Offset: 9, UID: 2},
		manifest.RootKey(p, "s", 3, 0x10):                                          {Stream: "s", Kind: KindRoot, Epoch: 3, UID: 0x10},
	}
	for key, want := range good {
		got, err := ParseKey(p, key)
		if err != nil || got != want {
			t.Errorf("ParseKey(%q) = %+v, %v; want %+v", key, got, err, want)
		}
	}
	frag := manifest.FragmentKey(p, "s", 42, 0xabc)
	h4 := strings.Split(frag, "/")[2]
	bad := []string{
		"other/" + frag,
		p + "/readme.txt",
		strings.Replace(frag, h4, "0000", 1),
		strings.Replace(frag, ".fragment", ".frag", 1),
		strings.Replace(frag, "/data/", "/meta/", 1),
		strings.Replace(frag, "-0000000000000abc", "-0000000000000ABC", 1),
		strings.Replace(frag, "-0000000000000abc", "-abc", 1),
		strings.Replace(frag, "/data/", "/dat/", 1),
		manifest.StreamPrefix(p, "s") + "meta/root-1.manifest",
		manifest.StreamPrefix(p, "s") + "meta/00000000000000000001-0000000000000001.bgroup",
		manifest.StreamPrefix(p, "s") + "meta/x/y",
	}
	for _, key := range bad {
		if k, err := ParseKey(p, key); err == nil {
			t.Errorf("ParseKey(%q) accepted: %+v", key, k)
		}
	}
}

// TestDecide covers every reason, the grace period, streams whose references are unknown,
// and keys that are not streamtier's.
func TestDecide(t *testing.T) {
	const p = manifest.DefaultKeyPrefix
	now := time.Unix(1_800_000_000, 0)
	old, young := now.Add(-2*time.Hour), now.Add(-time.Minute)
	rec := metadata.ManifestRecord{Epoch: 2, RootUID: 5, FirstOffset: 100, NextOffset: 500}
	live := manifest.FragmentKey(p, "a", 100, 1)
	root := manifest.RootKey(p, "a", 2, 5)
	states := map[string]StreamState{
		"a":    {Stream: "a", Anchored: true, Recorded: true, Record: rec, Revision: 4, Referenced: map[string]bool{live: true, root: true}},
		"gone": {Stream: "gone"},
		"new":  {Stream: "new", Anchored: true},
		"bad":  {Stream: "bad", Anchored: true, Recorded: true, Err: errors.New("root X: corrupt")},
	}
	objs := []s3io.ObjectInfo{
		{Key: live, Size: 10, LastModified: old},
		{Key: root, Size: 3, LastModified: old},
		{Key: manifest.FragmentKey(p, "a", 500, 2), LastModified: old},                 // above next
		{Key: manifest.FragmentKey(p, "a", 50, 3), LastModified: old},                  // below first
		{Key: manifest.FragmentKey(p, "a", 200, 4), LastModified: old},                 // duplicate
		{Key: manifest.RootKey(p, "a", 1, 6), LastModified: old},                       // superseded root
		{Key: manifest.GroupKey(p, "a", manifest.KindGroup, 10, 7), LastModified: old}, // group below first
		{Key: manifest.GroupKey(p, "a", manifest.KindGroup, 300, 8), LastModified: old},
		{Key: manifest.FragmentKey(p, "a", 600, 9), LastModified: young}, // in the grace period
		{Key: manifest.FragmentKey(p, "gone", 0, 1), LastModified: old},
		{Key: manifest.FragmentKey(p, "new", 0, 1), LastModified: old},
		{Key: manifest.FragmentKey(p, "bad", 0, 1), LastModified: old},
		{Key: manifest.FragmentKey(p, "unexamined", 0, 1), LastModified: old},
		{Key: p + "/notes.txt", LastModified: old},
	}
	plan := Decide(objs, p, states, now, time.Hour)
	if plan.Scanned != len(objs) || plan.Bytes != 13 || plan.Referenced != 2 {
		t.Fatalf("counts: %+v", plan)
	}
	want := map[string]string{
		manifest.FragmentKey(p, "a", 500, 2):                  "never persisted",
		manifest.FragmentKey(p, "a", 50, 3):                   "dropped by retention",
		manifest.FragmentKey(p, "a", 200, 4):                  "uploaded again",
		manifest.RootKey(p, "a", 1, 6):                        "superseded root",
		manifest.GroupKey(p, "a", manifest.KindGroup, 10, 7):  "dropped by retention",
		manifest.GroupKey(p, "a", manifest.KindGroup, 300, 8): "rebalance that never persisted",
		manifest.FragmentKey(p, "gone", 0, 1):                 "no anchor",
		manifest.FragmentKey(p, "new", 0, 1):                  "never persisted a manifest",
	}
	if len(plan.Orphans) != len(want) {
		t.Fatalf("orphans: %+v", plan.Orphans)
	}
	for _, o := range plan.Orphans {
		if w, ok := want[o.Key]; !ok || !strings.Contains(o.Reason, w) {
			t.Errorf("orphan %s: reason %q, want it to mention %q", o.Key, o.Reason, w)
		}
	}
	if len(plan.Young) != 1 || plan.Young[0].Key != manifest.FragmentKey(p, "a", 600, 9) {
		t.Fatalf("young: %+v", plan.Young)
	}
	if len(plan.Undecided) != 2 || !strings.Contains(plan.Undecided[0].Reason+plan.Undecided[1].Reason, "corrupt") {
		t.Fatalf("undecided: %+v", plan.Undecided)
	}
	if len(plan.Foreign) != 1 || plan.Foreign[0] != p+"/notes.txt" {
		t.Fatalf("foreign: %v", plan.Foreign)
	}
	if plan.Revisions["a"] != 4 {
		t.Fatalf("revisions: %v", plan.Revisions)
	}
	// Grace zero collects the young one too; nothing referenced is ever an orphan.
	plan = Decide(objs, p, states, now, 0)
	if len(plan.Orphans) != len(want)+1 || len(plan.Young) != 0 {
		t.Fatalf("grace 0: %d orphans, %d young", len(plan.Orphans), len(plan.Young))
	}
	for _, o := range plan.Orphans {
		if o.Key == live || o.Key == root {
			t.Fatalf("referenced %s collected", o.Key)
		}
	}
}
