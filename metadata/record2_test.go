package metadata_test

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
)

func TestManifestRecordV2Document(t *testing.T) {
	rec := metadata.ManifestRecord{Seq: 12, Epoch: 7, RootUID: 0xab, FirstOffset: 10, NextOffset: 20, TotalSize: 300, FirstTimestamp: 1700000000000}
	b, err := rec.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"version":2,"seq":12,"epoch":7,"rootUid":"00000000000000ab","firstOffset":10,"nextOffset":20,"totalSize":300,"firstTimestamp":1700000000000}`
	if string(b) != want {
		t.Fatalf("document\n got %s\nwant %s", b, want)
	}
	got, err := metadata.DecodeManifestRecord("k", b)
	if err != nil || got != rec {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if rec.RecordVersion() != 2 || (metadata.ManifestRecord{Epoch: 1}).RecordVersion() != 1 {
		t.Fatal("RecordVersion")
	}
	if k := rec.RootKey("p", "s"); k != manifest.SeqRootKey("p", "s", 12) {
		t.Fatalf("v2 record root key %q", k)
	}
	if k := (metadata.ManifestRecord{Epoch: 7, RootUID: 0xab}).RootKey("p", "s"); k != manifest.RootKey("p", "s", 7, 0xab) {
		t.Fatalf("v1 record root key %q", k)
	}
}

func TestManifestRecordV2RoundTrip(t *testing.T) {
	for _, rec := range []metadata.ManifestRecord{
		{Seq: 1, Epoch: 1, RootUID: 1, FirstTimestamp: -1},
		{Seq: math.MaxUint64, Epoch: math.MaxUint64, RootUID: math.MaxUint64, FirstOffset: 5, NextOffset: math.MaxUint64, TotalSize: math.MaxUint64, FirstTimestamp: math.MaxInt64},
	} {
		b, err := rec.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		got, err := metadata.DecodeManifestRecord("k", b)
		if err != nil || got != rec {
			t.Fatalf("round trip of %+v gave %+v, %v (document %s)", rec, got, err, b)
		}
	}
}

func TestManifestRecordV2Refusals(t *testing.T) {
	const rest = `"epoch":7,"rootUid":"00000000000000ab","firstOffset":10,"nextOffset":20,"totalSize":300,"firstTimestamp":-1}`
	for _, tc := range []struct{ name, doc, want string }{
		{"version 2 without seq", `{"version":2,` + rest, `field "seq" missing`},
		{"version 2 with seq 0", `{"version":2,"seq":0,` + rest, "seq 0"},
		{"version 1 with a seq", `{"version":1,"seq":3,` + rest, "version 1 with a seq"},
		{"negative seq", `{"version":2,"seq":-1,` + rest, "cannot unmarshal"},
		{"version 3", `{"version":3,"seq":1,` + rest, "version 3, this build reads versions 1 to 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := metadata.DecodeManifestRecord("/x/manifest", []byte(tc.doc))
			if !errors.Is(err, metadata.ErrCorruptRecord) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "/x/manifest") {
				t.Fatalf("err %v, want ErrCorruptRecord naming the key and %q", err, tc.want)
			}
		})
	}
}

// FuzzManifestRecord: no document panics the decoder; whatever decodes is a valid record
// that encodes to a document decoding to the same record, of the version its seq says.
func FuzzManifestRecord(f *testing.F) {
	for _, rec := range []metadata.ManifestRecord{
		{Seq: 12, Epoch: 7, RootUID: 0xab, FirstOffset: 10, NextOffset: 20, TotalSize: 300, FirstTimestamp: 1},
		{Epoch: 7, RootUID: 0xab, FirstOffset: 10, NextOffset: 20, TotalSize: 300, FirstTimestamp: -1},
	} {
		b, _ := rec.MarshalJSON()
		f.Add(b)
	}
	f.Add([]byte(`{"version":2,"seq":0}`))
	f.Add([]byte(`{"version":2,"seq":1,"epoch":1,"rootUid":"0000000000000001","firstOffset":3,"nextOffset":2,"totalSize":0,"firstTimestamp":-1}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		rec, err := metadata.DecodeManifestRecord("k", doc)
		if err != nil {
			if !errors.Is(err, metadata.ErrCorruptRecord) {
				t.Fatalf("refusal not classified as corrupt: %v", err)
			}
			return
		}
		if err := rec.Validate(); err != nil {
			t.Fatalf("decoded an invalid record: %v", err)
		}
		b, err := rec.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if v := []byte(`{"version":2,`); rec.Seq > 0 != bytes.HasPrefix(b, v) {
			t.Fatalf("record %+v encoded as %s", rec, b)
		}
		back, err := metadata.DecodeManifestRecord("k", b)
		if err != nil || back != rec {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", rec, back, err)
		}
	})
}
