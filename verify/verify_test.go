package verify_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/chunk"
	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/tiertest"
	"github.com/streamtier/streamtier/verify"
)

func TestCheckFragment(t *testing.T) {
	h := func(id uint64, records uint32, ts int64) fragment.LayoutChunk {
		return fragment.LayoutChunk{Header: chunk.Header{ChunkID: id, Records: records, Timestamp: ts}}
	}
	l := fragment.Layout{Size: 300, Chunks: []fragment.LayoutChunk{h(10, 5, 100), h(15, 5, 120)}}
	e := manifest.Entry{FirstOffset: 10, FirstTimestamp: 100, LastTimestamp: 120, Size: 300}
	if p := verify.CheckFragment(e, 20, l); len(p) != 0 {
		t.Fatalf("matching fragment: %v", p)
	}
	cases := []struct {
		e    manifest.Entry
		end  uint64
		want string
	}{
		{manifest.Entry{FirstOffset: 10, FirstTimestamp: 100, LastTimestamp: 120, Size: 299}, 20, "holds 300 bytes"},
		{manifest.Entry{FirstOffset: 9, FirstTimestamp: 100, LastTimestamp: 120, Size: 300}, 20, "first chunk id 10"},
		{e, 21, "end at offset 20"},
		{manifest.Entry{FirstOffset: 10, FirstTimestamp: 101, LastTimestamp: 120, Size: 300}, 20, "timestamps"},
	}
	for _, c := range cases {
		p := verify.CheckFragment(c.e, c.end, l)
		if len(p) != 1 || !strings.Contains(p[0], c.want) {
			t.Errorf("%+v end %d: %v, want one problem mentioning %q", c.e, c.end, p, c.want)
		}
	}
	if p := verify.CheckFragment(e, 20, fragment.Layout{}); len(p) != 1 {
		t.Fatalf("empty layout: %v", p)
	}
}

// TestVerify verifies hand-written streams, then breaks one object or chunk at a time and
// checks that each break is a finding naming the object.
func TestVerify(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	be := tiertest.StartBackends(ctx, t, false)
	meta, store := be.Meta, be.Store
	env := tiertest.Env{Store: store, Meta: meta}
	run := func(stream, dir string) verify.Report {
		t.Helper()
		r, err := verify.Stream(ctx, verify.Options{Store: store, Meta: meta, Stream: stream, LogDir: dir})
		if err != nil {
			t.Fatalf("verify %s: %v", stream, err)
		}
		return r
	}
	expectFinding := func(r verify.Report, key, what string) {
		t.Helper()
		for _, f := range r.Findings {
			if f.Key == key && strings.Contains(f.Problem, what) {
				return
			}
		}
		t.Fatalf("no finding on %s mentioning %q: %+v", key, what, r.Findings)
	}

	a := tiertest.Write(t, env, tiertest.Spec{Stream: "a", Seed: 1, Chunks: 80, Rebalance: 3, RetainBytes: 60_000, DeleteDropped: true})
	r := run("a", a.Dir)
	if !r.OK() {
		t.Fatalf("clean stream: %+v", r.Findings)
	}
	live := 0
	for _, k := range a.Live {
		if strings.HasSuffix(k, ".fragment") {
			live++
		}
	}
	if r.Fragments != live || r.Groups == 0 || r.LocalCompared != r.Chunks || r.LocalAbsent != 0 || r.FirstOffset == 0 || r.NextOffset != a.Manifest.NextOffset {
		t.Fatalf("report: %+v (want %d fragments, groups, every chunk compared)", r, live)
	}
	if r := run("a", ""); !r.OK() || r.LocalCompared != 0 || len(r.Notes) == 0 {
		t.Fatalf("without a local log: %+v", r)
	}
	// From the bucket alone (no metadata store): the same root, the same checks.
	fb, err := verify.Stream(ctx, verify.Options{Store: store, Stream: "a", LogDir: a.Dir, FromBucket: true})
	if err != nil || !fb.OK() || fb.Fragments != r.Fragments || fb.Groups != r.Groups || fb.LocalCompared != r.LocalCompared || fb.NextOffset != r.NextOffset || fb.RootKey != r.RootKey {
		t.Fatalf("from the bucket: %+v %v (through etcd: %+v)", fb, err, r)
	}
	if _, err := verify.Stream(ctx, verify.Options{Store: store, Stream: "absent", FromBucket: true}); !errors.Is(err, verify.ErrUnknownStream) {
		t.Fatalf("an absent stream from the bucket: %v", err)
	}
	// The same with the version 1 keys of earlier buckets.
	a1 := tiertest.Write(t, env, tiertest.Spec{Stream: "a1", Seed: 1, Chunks: 80, Rebalance: 3, RetainBytes: 60_000, DeleteDropped: true, KeyVersion: 1})
	if r := run("a1", a1.Dir); !r.OK() || r.Fragments != live || r.Groups == 0 || r.LocalCompared != r.Chunks {
		t.Fatalf("version 1 keys: %+v", r)
	}

	// A fragment whose bytes changed in S3: the chunk CRC fails.
	b := tiertest.Write(t, env, tiertest.Spec{Stream: "b", Seed: 2})
	frag := b.KeyOf(b.Manifest.Entries[1])
	body, err := store.GetObject(ctx, frag)
	if err != nil {
		t.Fatal(err)
	}
	body[fragment.ObjectHeaderSize+chunk.HeaderSize+5] ^= 0xff
	if err := store.PutObject(ctx, frag, body); err != nil {
		t.Fatal(err)
	}
	expectFinding(run("b", b.Dir), frag, "CRC")

	// A missing fragment.
	c := tiertest.Write(t, env, tiertest.Spec{Stream: "c", Seed: 3})
	gone := c.KeyOf(c.Manifest.Entries[0])
	if _, err := store.DeleteObjects(ctx, []string{gone}); err != nil {
		t.Fatal(err)
	}
	expectFinding(run("c", c.Dir), manifest.EntryListPrefix(manifest.DefaultKeyPrefix, "c", c.Manifest.Entries[0]), "missing")

	// A fragment whose key says a later epoch than the root naming it.
	g := tiertest.Write(t, env, tiertest.Spec{Stream: "g", Seed: 6})
	ge := g.Manifest.Entries[1]
	later := manifest.FragmentKey(manifest.DefaultKeyPrefix, "g", ge.FirstOffset, 9, ge.UID)
	gbody, err := store.GetObject(ctx, g.KeyOf(ge))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.PutObject(ctx, later, gbody); err != nil {
		t.Fatal(err)
	}
	if _, err := store.DeleteObjects(ctx, []string{g.KeyOf(ge)}); err != nil {
		t.Fatal(err)
	}
	if rg := run("g", g.Dir); len(rg.Findings) != 1 || rg.Findings[0].Key != later || !strings.Contains(rg.Findings[0].Problem, "epoch 9 referenced by a root of epoch 1") {
		t.Fatalf("object of a later epoch: %+v", rg.Findings)
	}

	// A local chunk that differs from the uploaded one.
	d := tiertest.Write(t, env, tiertest.Spec{Stream: "d", Seed: 4})
	ch := d.Chunks[3]
	seg := filepath.Join(d.Dir, ch.Location.Segment)
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xde, 0xad}, ch.Location.Position+chunk.HeaderSize+2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	rd := run("d", d.Dir)
	if len(rd.Findings) != 1 || rd.Findings[0].Offset != ch.Header.ChunkID || !strings.Contains(rd.Findings[0].Problem, "differs from the local log") {
		t.Fatalf("changed local chunk: %+v", rd.Findings)
	}

	// A corrupt group object.
	e := tiertest.Write(t, env, tiertest.Spec{Stream: "e", Seed: 5, Chunks: 60, Rebalance: 3})
	var group manifest.Entry
	for _, en := range e.Manifest.Entries {
		if en.Kind != manifest.KindFragment {
			group = en
			break
		}
	}
	gkey := e.KeyOf(group)
	if err := store.PutObject(ctx, gkey, []byte("OSIG\x00\x00\x00\x01short")); err != nil {
		t.Fatal(err)
	}
	re := run("e", e.Dir)
	if re.OK() || !strings.Contains(re.Findings[0].Problem, gkey) {
		t.Fatalf("corrupt group: %+v", re.Findings)
	}

	// A corrupt root object.
	if err := store.PutObject(ctx, a.RootKey, []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	expectFinding(run("a", a.Dir), a.RootKey, "root object")

	// Unknown streams are errors; an anchored stream that never persisted is a note.
	if _, err := verify.Stream(ctx, verify.Options{Store: store, Meta: meta, Stream: "nope"}); !errors.Is(err, verify.ErrUnknownStream) {
		t.Fatalf("unknown stream: %v", err)
	}
	if _, err := verify.Stream(ctx, verify.Options{Store: store, Meta: meta, Stream: "no/pe"}); err == nil {
		t.Fatal("hostile stream id accepted")
	}
	if err := meta.Anchor(ctx, "fresh"); err != nil {
		t.Fatal(err)
	}
	if r := run("fresh", ""); !r.OK() || len(r.Notes) == 0 {
		t.Fatalf("anchored, never persisted: %+v", r)
	}
}
