package replicacore

import (
	"testing"

	"github.com/streamtier/streamtier/manifest"
)

// benchManifest is a root of n fragments of 100 offsets each.
func benchManifest(b *testing.B, n int) manifest.Manifest {
	m := manifest.Empty()
	for i := range n {
		e, err := manifest.AppendEdit(m, manifest.Entry{FirstOffset: m.NextOffset, FirstTimestamp: int64(i), LastTimestamp: int64(i), Size: 64 << 20, UID: uint64(i + 1)}, m.NextOffset+100)
		if err != nil {
			b.Fatal(err)
		}
		if m, err = m.Apply(e); err != nil {
			b.Fatal(err)
		}
	}
	return m
}

// BenchmarkApplyBroadcast: a replica applying one persist's five appends to a root of 1000
// entries (the common case: one broadcast per persist).
func BenchmarkApplyBroadcast(b *testing.B) {
	base := benchManifest(b, 1000)
	c, err := New(Config{Stream: "s1", Node: "r1"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.Step(WriterChanged{Writer: "n1", Epoch: 1}); err != nil {
		b.Fatal(err)
	}
	if _, err := c.Step(Sync{From: "n1", Root: Root{Seq: 1, UID: 1}, Epoch: 1, Manifest: base}); err != nil {
		b.Fatal(err)
	}
	// Five appends on top of base; replaying them needs the replica back at base each time.
	m := base
	var eds []manifest.Edit
	for i := range 5 {
		e, err := manifest.AppendEdit(m, manifest.Entry{FirstOffset: m.NextOffset, FirstTimestamp: int64(2000 + i), LastTimestamp: int64(2000 + i), Size: 64 << 20, UID: uint64(5000 + i)}, m.NextOffset+100)
		if err != nil {
			b.Fatal(err)
		}
		eds = append(eds, e)
		if m, err = m.Apply(e); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		parent := Root{Seq: uint64(i + 1), UID: uint64(i + 1)}
		c.has, c.manifest, c.root = true, base, parent
		if _, err := c.Step(Edits{From: "n1", Root: Root{Seq: parent.Seq + 1, UID: parent.UID + 1}, Parent: parent, Epoch: 1, Edits: eds}); err != nil {
			b.Fatal(err)
		}
		if c.root.Seq != parent.Seq+1 {
			b.Fatalf("broadcast not applied: root %s", c.root)
		}
	}
}

// BenchmarkSync: a replica checking and taking a whole root of 1000 entries.
func BenchmarkSync(b *testing.B) {
	m := benchManifest(b, 1000)
	c, err := New(Config{Stream: "s1", Node: "r1"})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := c.Step(Sync{From: "n1", Root: Root{Seq: uint64(i + 1), UID: uint64(i + 1)}, Epoch: 1, Manifest: m}); err != nil {
			b.Fatal(err)
		}
	}
}
