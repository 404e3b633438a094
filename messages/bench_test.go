package messages

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/streamtier/streamtier/manifest"
)

func benchRoot(n int) manifest.Manifest {
	m := manifest.Manifest{FirstTimestamp: 1, FirstLastTimestamp: 1}
	for i := range n {
		m.Entries = append(m.Entries, manifest.Entry{FirstOffset: uint64(i) * 100, FirstTimestamp: int64(i), LastTimestamp: int64(i), Size: 64 << 20, UID: uint64(i) * 7919})
		m.TotalSize += 64 << 20
	}
	m.NextOffset = uint64(n) * 100
	return m
}

// BenchmarkBroadcastRoundTrip: a persist's five appends, converted, marshalled, unmarshalled
// and converted back, as one broadcast travels from writer to replica.
func BenchmarkBroadcastRoundTrip(b *testing.B) {
	var edits []manifest.Edit
	for i := range 5 {
		edits = append(edits, manifest.Edit{At: 1000 + i, Insert: []manifest.Entry{{FirstOffset: uint64(i) * 100, Size: 64 << 20, UID: uint64(i)}},
			SetNextOffset: true, NextOffset: uint64(i+1) * 100, SizeDelta: 64 << 20})
	}
	b.ReportAllocs()
	var size int
	for b.Loop() {
		wire, err := proto.Marshal(&ManifestEdits{Stream: "s1", Writer: "n1", RootSeq: 9, RootUid: 0x9a3f, ParentSeq: 8, ParentUid: 0x77e1, Epoch: 2, Edits: FromEdits(edits)})
		if err != nil {
			b.Fatal(err)
		}
		size = len(wire)
		var msg ManifestEdits
		if err := proto.Unmarshal(wire, &msg); err != nil {
			b.Fatal(err)
		}
		if _, err := ToEdits(msg.Edits); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(size), "wire-bytes")
}

// BenchmarkSyncRoundTrip: a whole root of 1000 entries as a sync.
func BenchmarkSyncRoundTrip(b *testing.B) {
	m := benchRoot(1000)
	b.ReportAllocs()
	var size int
	for b.Loop() {
		wire, err := proto.Marshal(&ManifestSync{Stream: "s1", Writer: "n1", RootSeq: 9, RootUid: 0x9a3f, Epoch: 2, Manifest: FromManifest(m)})
		if err != nil {
			b.Fatal(err)
		}
		size = len(wire)
		var msg ManifestSync
		if err := proto.Unmarshal(wire, &msg); err != nil {
			b.Fatal(err)
		}
		if _, err := ToManifest(msg.Manifest); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(size), "wire-bytes")
}
