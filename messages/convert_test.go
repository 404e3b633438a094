package messages

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	"github.com/streamtier/streamtier/manifest"
)

func genEntry() *rapid.Generator[manifest.Entry] {
	return rapid.Custom(func(t *rapid.T) manifest.Entry {
		return manifest.Entry{
			FirstOffset:    rapid.Uint64().Draw(t, "first"),
			FirstTimestamp: rapid.Int64().Draw(t, "ts"),
			LastTimestamp:  rapid.Int64().Draw(t, "last"),
			Size:           rapid.Uint64().Draw(t, "size"),
			UID:            rapid.Uint64().Draw(t, "uid"),
			Kind:           manifest.Kind(rapid.IntRange(0, int(manifest.KindGap)).Draw(t, "kind")),
		}
	})
}

// TestManifestRoundTrip: any manifest survives conversion and the wire unchanged.
func TestManifestRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := manifest.Manifest{
			FirstOffset: rapid.Uint64().Draw(t, "first"), NextOffset: rapid.Uint64().Draw(t, "next"),
			FirstTimestamp: rapid.Int64().Draw(t, "fts"), FirstLastTimestamp: rapid.Int64().Draw(t, "flts"),
			TotalSize: rapid.Uint64().Draw(t, "size"), Entries: rapid.SliceOf(genEntry()).Draw(t, "entries"),
		}
		seq, uid := rapid.Uint64().Draw(t, "seq"), rapid.Uint64().Draw(t, "uid")
		wire, err := proto.Marshal(&ManifestSync{Stream: "s", Writer: "n1", RootSeq: seq, RootUid: uid, Epoch: 3, Manifest: FromManifest(m)})
		if err != nil {
			t.Fatal(err)
		}
		var sync ManifestSync
		if err := proto.Unmarshal(wire, &sync); err != nil {
			t.Fatal(err)
		}
		got, err := ToManifest(sync.Manifest)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Equal(m) {
			t.Fatalf("round trip changed the manifest:\n got %+v\nwant %+v", got, m)
		}
		if sync.RootSeq != seq || sync.RootUid != uid || sync.Epoch != 3 || sync.Stream != "s" || sync.Writer != "n1" {
			t.Fatalf("header fields changed: %+v", &sync)
		}
	})
}

// TestEditsRoundTrip: any edit list survives conversion and the wire unchanged.
func TestEditsRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		edits := rapid.SliceOf(rapid.Custom(func(t *rapid.T) manifest.Edit {
			return manifest.Edit{
				At: rapid.IntRange(0, math.MaxInt32).Draw(t, "at"), Remove: rapid.IntRange(0, math.MaxInt32).Draw(t, "remove"),
				Insert: rapid.SliceOf(genEntry()).Draw(t, "insert"), FirstOffset: rapid.Uint64().Draw(t, "first"),
				FirstTimestamp: rapid.Int64().Draw(t, "fts"), FirstLastTimestamp: rapid.Int64().Draw(t, "flts"),
				SetNextOffset: rapid.Bool().Draw(t, "set"), NextOffset: rapid.Uint64().Draw(t, "next"),
				SizeDelta: rapid.Int64().Draw(t, "delta"),
			}
		})).Draw(t, "edits")
		root := [4]uint64{rapid.Uint64().Draw(t, "seq"), rapid.Uint64().Draw(t, "uid"), rapid.Uint64().Draw(t, "parent-seq"), rapid.Uint64().Draw(t, "parent-uid")}
		wire, err := proto.Marshal(&ManifestEdits{Stream: "s", Writer: "n2", RootSeq: root[0], RootUid: root[1], ParentSeq: root[2], ParentUid: root[3], Epoch: 4, Edits: FromEdits(edits)})
		if err != nil {
			t.Fatal(err)
		}
		var msg ManifestEdits
		if err := proto.Unmarshal(wire, &msg); err != nil {
			t.Fatal(err)
		}
		if back := [4]uint64{msg.RootSeq, msg.RootUid, msg.ParentSeq, msg.ParentUid}; back != root || msg.Epoch != 4 || msg.Stream != "s" || msg.Writer != "n2" {
			t.Fatalf("header fields changed: %+v", &msg)
		}
		got, err := ToEdits(msg.Edits)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(edits) {
			t.Fatalf("%d edits back, want %d", len(got), len(edits))
		}
		for i := range edits {
			a, b := got[i], edits[i]
			if len(a.Insert) != len(b.Insert) {
				t.Fatalf("edit %d: %d inserted entries, want %d", i, len(a.Insert), len(b.Insert))
			}
			for j := range a.Insert {
				if a.Insert[j] != b.Insert[j] {
					t.Fatalf("edit %d entry %d: %+v, want %+v", i, j, a.Insert[j], b.Insert[j])
				}
			}
			a.Insert, b.Insert = nil, nil
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("edit %d: %+v, want %+v", i, a, b)
			}
		}
	})
}

// TestOlderFormatReadsAsNoRoot: a replica message of the older format (the manifest record's
// etcd Version in field 3, now reserved) decodes with the field skipped: no root, no parent
// (0/0), which a replica refuses for a broadcast and for a non-empty sync.
func TestOlderFormatReadsAsNoRoot(t *testing.T) {
	edits, err := proto.Marshal(&ManifestEdits{Stream: "s", Writer: "n1", Epoch: 2})
	if err != nil {
		t.Fatal(err)
	}
	sync, err := proto.Marshal(&ManifestSync{Stream: "s", Writer: "n1", Epoch: 2, Manifest: FromManifest(manifest.EmptyAt(10))})
	if err != nil {
		t.Fatal(err)
	}
	withVersion := func(b []byte) []byte { // field 3, varint 41: what the older format wrote
		return protowire.AppendVarint(protowire.AppendTag(b, 3, protowire.VarintType), 41)
	}
	var e ManifestEdits
	if err := proto.Unmarshal(withVersion(edits), &e); err != nil {
		t.Fatal(err)
	}
	if e.RootSeq != 0 || e.RootUid != 0 || e.ParentSeq != 0 || e.ParentUid != 0 || e.Epoch != 2 || e.Stream != "s" {
		t.Fatalf("older broadcast read as %+v", &e)
	}
	var s ManifestSync
	if err := proto.Unmarshal(withVersion(sync), &s); err != nil {
		t.Fatal(err)
	}
	if s.RootSeq != 0 || s.RootUid != 0 || s.Epoch != 2 || s.Manifest.GetNextOffset() != 10 {
		t.Fatalf("older sync read as %+v", &s)
	}
}

// TestBadMessagesRefused: values that cannot be manifest values are refused with
// ErrBadMessage and a message that says what was wrong.
func TestBadMessagesRefused(t *testing.T) {
	cases := []struct {
		name string
		run  func() error
	}{
		{"nil manifest", func() error { _, err := ToManifest(nil); return err }},
		{"nil entry in manifest", func() error {
			_, err := ToManifest(&Manifest{Entries: []*Entry{{}, nil}})
			return err
		}},
		{"unknown kind", func() error { _, err := ToEntry(&Entry{Kind: 5}); return err }},
		{"nil edit", func() error { _, err := ToEdits([]*Edit{{}, nil}); return err }},
		{"negative at", func() error { _, err := ToEdit(&Edit{At: -1}); return err }},
		{"negative remove", func() error { _, err := ToEdit(&Edit{Remove: -3}); return err }},
		{"huge at", func() error { _, err := ToEdit(&Edit{At: math.MaxInt32 + 1}); return err }},
		{"bad inserted kind", func() error { _, err := ToEdit(&Edit{Insert: []*Entry{{Kind: 9}}}); return err }},
	}
	for _, c := range cases {
		err := c.run()
		if !errors.Is(err, ErrBadMessage) {
			t.Errorf("%s: got %v, want ErrBadMessage", c.name, err)
		}
	}
	if _, err := ToEdits([]*Edit{{}, {At: -2}}); err == nil || err.Error() != "edit 2 of 2: bad cluster message: edit splice at -2 removing 0 is out of range" {
		t.Errorf("error does not name the edit: %v", err)
	}
}
