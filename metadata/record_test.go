package metadata_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/streamtier/streamtier/metadata"
)

func TestManifestRecordRoundTrip(t *testing.T) {
	for _, rec := range []metadata.ManifestRecord{
		{},
		{Epoch: 1, RootUID: 0xdeadbeef, FirstOffset: 0, NextOffset: 0, TotalSize: 0, FirstTimestamp: -1},
		{Epoch: math.MaxUint64, RootUID: math.MaxUint64, FirstOffset: 5, NextOffset: math.MaxUint64, TotalSize: math.MaxUint64, FirstTimestamp: math.MaxInt64},
	} {
		b, err := rec.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		got, err := metadata.DecodeManifestRecord("k", b)
		if err != nil {
			t.Fatalf("decode %s: %v", b, err)
		}
		if got != rec {
			t.Fatalf("round trip of %+v gave %+v (document %s)", rec, got, b)
		}
	}
}

func TestManifestRecordDocument(t *testing.T) {
	rec := metadata.ManifestRecord{Epoch: 7, RootUID: 0xab, FirstOffset: 10, NextOffset: 20, TotalSize: 300, FirstTimestamp: 1700000000000}
	b, err := rec.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"version":1,"epoch":7,"rootUid":"00000000000000ab","firstOffset":10,"nextOffset":20,"totalSize":300,"firstTimestamp":1700000000000}`
	if string(b) != want {
		t.Fatalf("document\n got %s\nwant %s", b, want)
	}
}

func TestManifestRecordGarbage(t *testing.T) {
	const key = "/streamtier/streams/s1/manifest"
	good := `"version":1,"epoch":7,"rootUid":"00000000000000ab","firstOffset":10,"nextOffset":20,"totalSize":300`
	for _, tc := range []struct{ name, doc, want string }{
		{"empty", ``, "EOF"},
		{"not json", `hello`, "invalid character"},
		{"binary", "\x00\x01\xff", "invalid character"},
		{"array", `[1,2]`, "cannot unmarshal array"},
		{"missing field", `{` + good + `}`, `"firstTimestamp" missing`},
		{"missing version", `{"epoch":7,"rootUid":"00000000000000ab","firstOffset":10,"nextOffset":20,"totalSize":300,"firstTimestamp":-1}`, `"version" missing`},
		{"wrong version", `{"version":3,` + good[12:] + `,"firstTimestamp":-1}`, "version 3"},
		{"unknown field", `{` + good + `,"firstTimestamp":-1,"extra":1}`, `unknown field "extra"`},
		{"trailing data", `{` + good + `,"firstTimestamp":-1}{}`, "data after the document"},
		{"short uid", `{"version":1,"epoch":7,"rootUid":"ab","firstOffset":10,"nextOffset":20,"totalSize":300,"firstTimestamp":-1}`, "not 16 hex digits"},
		{"uppercase uid", `{"version":1,"epoch":7,"rootUid":"00000000000000AB","firstOffset":10,"nextOffset":20,"totalSize":300,"firstTimestamp":-1}`, "lowercase hex only"},
		{"negative offset", `{"version":1,"epoch":7,"rootUid":"00000000000000ab","firstOffset":-1,"nextOffset":20,"totalSize":300,"firstTimestamp":-1}`, "cannot unmarshal number -1"},
		{"first above next", `{"version":1,"epoch":7,"rootUid":"00000000000000ab","firstOffset":30,"nextOffset":20,"totalSize":300,"firstTimestamp":-1}`, "first offset 30 above next offset 20"},
		{"timestamp below -1", `{` + good + `,"firstTimestamp":-2}`, "first timestamp -2 below -1"},
		{"float", `{"version":1,"epoch":7.5,"rootUid":"00000000000000ab","firstOffset":10,"nextOffset":20,"totalSize":300,"firstTimestamp":-1}`, "cannot unmarshal number 7.5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := metadata.DecodeManifestRecord(key, []byte(tc.doc))
			if err == nil {
				t.Fatalf("decoded %q without error", tc.doc)
			}
			if !errors.Is(err, metadata.ErrCorruptRecord) {
				t.Fatalf("error %v does not wrap ErrCorruptRecord", err)
			}
			if !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q should name the key %s and say %q", err, key, tc.want)
			}
			if metadata.IsRetriable(err) {
				t.Fatalf("corrupt record error %v classified retriable", err)
			}
		})
	}
}

func TestEpochFormat(t *testing.T) {
	for _, e := range []uint64{0, 1, 9, 10, 12345678901234567890, math.MaxUint64} {
		s := metadata.FormatEpoch(e)
		if len(s) != 20 {
			t.Fatalf("epoch %d formatted as %q, not 20 digits", e, s)
		}
		got, err := metadata.ParseEpoch("k", []byte(s))
		if err != nil || got != e {
			t.Fatalf("parse %q = %d, %v; want %d", s, got, err, e)
		}
	}
	// Byte order is numeric order, which the persist transaction relies on.
	for _, p := range [][2]uint64{{0, 1}, {9, 10}, {99, 100}, {math.MaxUint64 - 1, math.MaxUint64}} {
		if !(metadata.FormatEpoch(p[0]) < metadata.FormatEpoch(p[1])) {
			t.Fatalf("%d < %d but %q >= %q", p[0], p[1], metadata.FormatEpoch(p[0]), metadata.FormatEpoch(p[1]))
		}
	}
	for _, bad := range []string{"", "1", "0000000000000000000x", "99999999999999999999", "+0000000000000000001", "000000000000000000001"} {
		if _, err := metadata.ParseEpoch("/p/epoch", []byte(bad)); !errors.Is(err, metadata.ErrCorruptRecord) || !strings.Contains(err.Error(), "/p/epoch") {
			t.Fatalf("parse %q: %v, want a corrupt record error naming the key", bad, err)
		}
	}
}
