package resolve

import (
	"fmt"
	"strings"
	"testing"

	"github.com/streamtier/streamtier/manifest"
)

const kp, st = "streams", "s"

// v3 is a read version 3 root of the lineage seq <- parent (uid = seq*100 + epoch, so that
// tests name parents by seq and epoch).
func v3(seq, epoch, parentSeq, parentEpoch uint64) Root {
	var puid uint64
	if parentSeq > 0 {
		puid = uid(parentSeq, parentEpoch)
	}
	return Root{Key: manifest.SeqRootKey(kp, st, seq), Version: 3, Known: true,
		Lineage: manifest.Lineage{Seq: seq, Epoch: epoch, UID: uid(seq, epoch), ParentSeq: parentSeq, ParentUID: puid}}
}

func uid(seq, epoch uint64) uint64 { return seq*100 + epoch }

// v2 is a version 1 or 2 root (its key carries epoch and uid).
func v2(epoch, u uint64) Root {
	return Root{Key: manifest.RootKey(kp, st, epoch, u), Version: 2, Known: true, Lineage: manifest.Lineage{Epoch: epoch, UID: u}}
}

func rec(seq, epoch uint64) *Record { return &Record{Seq: seq, Epoch: epoch, UID: uid(seq, epoch)} }

func TestDecide(t *testing.T) {
	firstOfV2 := v3(1, 2, 0, 0)
	firstOfV2.ParentUID = 0xabc
	unread := Root{Key: manifest.SeqRootKey(kp, st, 6), Version: 3, Lineage: manifest.Lineage{Seq: 6}}
	for _, c := range []struct {
		name     string
		in       Input
		want     Action
		root     uint64 // seq of Decision.Root (0: none)
		next     uint64
		upgrade  bool
		strays   int
		inReason string
	}{
		{name: "new stream: no anchor, no record, no root",
			in: Input{}, want: ActionNew, next: 1},
		{name: "anchored, never persisted, no root",
			in: Input{Anchor: true}, want: ActionNew, next: 1},
		{name: "no record, no anchor, roots: etcd lost the stream",
			in: Input{Roots: []Root{v3(4, 1, 3, 1), v3(5, 1, 4, 1)}}, want: ActionMetadataMissing, root: 5, next: 6, inReason: "node recover"},
		{name: "no record, an anchor, the first root: adopt",
			in: Input{Anchor: true, Roots: []Root{v3(1, 1, 0, 0)}}, want: ActionAdopt, root: 1, next: 2},
		{name: "no record, an anchor, a chain: behind",
			in: Input{Anchor: true, Roots: []Root{v3(1, 1, 0, 0), v3(2, 1, 1, 1)}}, want: ActionMetadataBehind, root: 2, next: 3},
		{name: "no record, an anchor, only version 2 roots: missing",
			in: Input{Anchor: true, Roots: []Root{v2(1, 7)}}, want: ActionMetadataMissing, next: 1, root: 0, inReason: "version 1 or 2 roots"},
		{name: "record lost after this writer saw it, nothing listed",
			in: Input{Anchor: true, PersistedBefore: true}, want: ActionMetadataMissing, next: 1},
		{name: "record without anchor",
			in: Input{Record: rec(3, 1), StoredEpoch: 1, Roots: []Root{v3(3, 1, 2, 1)}}, want: ActionMetadataMissing, root: 3, next: 4},
		{name: "record's root and nothing above",
			in: Input{Anchor: true, Record: rec(3, 1), StoredEpoch: 1, Roots: []Root{v3(3, 1, 2, 1)}}, want: ActionResolve, next: 4},
		{name: "a child of the record: adopt",
			in: Input{Anchor: true, Record: rec(3, 1), StoredEpoch: 1, Roots: []Root{v3(3, 1, 2, 1), v3(4, 2, 3, 1)}}, want: ActionAdopt, root: 4, next: 5},
		{name: "a chain of two: behind",
			in: Input{Anchor: true, Record: rec(3, 1), StoredEpoch: 1, Roots: []Root{v3(3, 1, 2, 1), v3(4, 1, 3, 1), v3(5, 1, 4, 1)}}, want: ActionMetadataBehind, root: 5, next: 6, inReason: "node recover"},
		{name: "a chain whose record root was reaped: behind",
			in: Input{Anchor: true, Record: rec(3, 1), StoredEpoch: 1, Roots: []Root{v3(7, 1, 6, 1), v3(8, 1, 7, 1)}}, want: ActionMetadataBehind, root: 8, next: 9},
		{name: "a fenced stray on top: ignored, resolve the record",
			in: Input{Anchor: true, Record: rec(3, 2), StoredEpoch: 2, Roots: []Root{v3(3, 2, 2, 2), v3(4, 1, 3, 2)}}, want: ActionResolve, next: 5, strays: 1},
		{name: "a stray below a child: the child is adopted, the stray skipped",
			in: Input{Anchor: true, Record: rec(3, 2), StoredEpoch: 2, Roots: []Root{v3(4, 1, 3, 2), v3(5, 2, 3, 2)}}, want: ActionAdopt, root: 5, next: 6, strays: 1},
		{name: "a child below the stored epoch that a root names: a chain, behind",
			in: Input{Anchor: true, Record: rec(3, 2), StoredEpoch: 2, Roots: []Root{v3(4, 1, 3, 2), v3(5, 2, 4, 1)}}, want: ActionMetadataBehind, root: 5, next: 6},
		{name: "only version 2 roots, a version 1 record: resolve and upgrade",
			in: Input{Anchor: true, Record: &Record{Epoch: 2, UID: 0xabc}, StoredEpoch: 2, Roots: []Root{v2(1, 0x111), v2(2, 0xabc)}}, want: ActionResolve, next: 1, upgrade: true},
		{name: "a version 1 record and its version 3 child: adopt",
			in: Input{Anchor: true, Record: &Record{Epoch: 2, UID: 0xabc}, StoredEpoch: 2, Roots: []Root{v2(2, 0xabc), firstOfV2}}, want: ActionAdopt, root: 1, next: 2},
		{name: "a version 1 record under a version 3 root built on another version 2 root: behind",
			in: Input{Anchor: true, Record: &Record{Epoch: 1, UID: 0x111}, StoredEpoch: 1, Roots: []Root{v2(1, 0x111), firstOfV2}}, want: ActionMetadataBehind, root: 1, next: 2},
		{name: "a marker: deleted, tombstone written back",
			in: Input{Marker: true, Anchor: true, Record: rec(3, 1), Roots: []Root{v3(3, 1, 2, 1)}}, want: ActionDeleted, next: 4},
		{name: "an etcd tombstone: deleted",
			in: Input{Tombstone: true, Roots: []Root{v3(3, 1, 2, 1)}}, want: ActionDeleted, next: 4},
		{name: "a root above the record not read yet",
			in: Input{Anchor: true, Record: rec(5, 1), StoredEpoch: 1, Roots: []Root{v3(5, 1, 4, 1), unread}}, want: ActionFetch, next: 7},
		{name: "two children of the record: behind, named",
			in: Input{Anchor: true, Record: rec(3, 1), StoredEpoch: 1, Roots: []Root{withUID(v3(4, 1, 3, 1), 1), withUID(v3(4, 1, 3, 1), 2)}}, want: ActionMetadataBehind, root: 4, next: 5, inReason: "2 children"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(c.in)
			if d.Action != c.want {
				t.Fatalf("action %v, want %v (%s)", d.Action, c.want, d.Reason)
			}
			if c.root != 0 && d.Root.Seq != c.root {
				t.Fatalf("root %v, want seq %d", d.Root, c.root)
			}
			if d.NextSeq != c.next || d.Upgrade != c.upgrade || len(d.Strays) != c.strays {
				t.Fatalf("next %d upgrade %v strays %v, want %d %v %d", d.NextSeq, d.Upgrade, d.Strays, c.next, c.upgrade, c.strays)
			}
			if c.want != ActionFetch && d.Reason == "" || !strings.Contains(d.Reason, c.inReason) {
				t.Fatalf("reason %q does not say %q", d.Reason, c.inReason)
			}
		})
	}
}

func withUID(r Root, u uint64) Root {
	r.UID = u
	return r
}

func TestDecideFetchThenDecide(t *testing.T) {
	listed := []Root{v3(3, 1, 2, 1), {Key: manifest.SeqRootKey(kp, st, 4), Version: 3, Lineage: manifest.Lineage{Seq: 4}}}
	in := Input{Anchor: true, Record: rec(3, 1), StoredEpoch: 1, Roots: listed}
	d := Decide(in)
	if d.Action != ActionFetch || fmt.Sprint(d.Need) != fmt.Sprint([]string{manifest.SeqRootKey(kp, st, 4)}) {
		t.Fatalf("%v need %v", d.Action, d.Need)
	}
	in.Roots[1] = in.Roots[1].WithLineage(v3(4, 1, 3, 1).Lineage)
	if d := Decide(in); d.Action != ActionAdopt || d.Root.Seq != 4 {
		t.Fatalf("after reading: %v %v", d.Action, d.Root)
	}
}

func TestDecideMarkerWithoutTombstone(t *testing.T) {
	d := Decide(Input{Marker: true})
	if d.Action != ActionDeleted || !d.RestoreTombstone {
		t.Fatalf("%+v", d)
	}
	if d := Decide(Input{Marker: true, Tombstone: true}); d.RestoreTombstone {
		t.Fatal("tombstone restored though present")
	}
}

func TestDecideRecordRootUnlisted(t *testing.T) {
	d := Decide(Input{Anchor: true, Record: rec(3, 1), StoredEpoch: 1})
	if d.Action != ActionResolve || !d.RecordRootUnlisted {
		t.Fatalf("%+v", d)
	}
	d = Decide(Input{Anchor: true, Record: &Record{Epoch: 2, UID: 5}, Roots: []Root{v2(2, 5)}})
	if d.RecordRootUnlisted {
		t.Fatal("version 2 record root listed but reported unlisted")
	}
}

func TestActionStalled(t *testing.T) {
	for a := ActionFetch; a <= ActionMetadataBehind; a++ {
		if a.Stalled() != (a == ActionMetadataMissing || a == ActionMetadataBehind) || strings.HasPrefix(a.String(), "Action(") {
			t.Fatalf("%v", a)
		}
	}
}
