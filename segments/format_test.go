package segments

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/streamtier/streamtier/chunk"
)

func errorsIs(err, target error) bool { return errors.Is(err, target) }

func TestFileNames(t *testing.T) {
	if got := SegmentName(3699); got != "00000000000000003699.segment" {
		t.Fatalf("SegmentName: %s", got)
	}
	if got := IndexName(18446744073709551615); got != "18446744073709551615.index" {
		t.Fatalf("IndexName: %s", got)
	}
	if id, err := ParseSegmentName("00000000000000003699.segment"); err != nil || id != 3699 {
		t.Fatalf("ParseSegmentName: %d %v", id, err)
	}
	for _, bad := range []string{"3699.segment", "0000000000000000369x.segment", "00000000000000003699.index", "99999999999999999999.segment"} {
		if _, err := ParseSegmentName(bad); err == nil {
			t.Errorf("ParseSegmentName(%q): no error", bad)
		}
	}
}

func TestIndexRecordVector(t *testing.T) {
	// The first record of the RabbitMQ index: chunk 0, its timestamp, epoch 1, position 8, user.
	want := unhex(t, "0000000000000000 | 000001a2296cbe39 | 0000000000000001 | 00000008 | 00")
	got := AppendIndexRecord(nil, IndexRecord{ChunkID: 0, Timestamp: 0x1a2296cbe39, Epoch: 1, Position: 8, Type: chunk.TypeUser})
	if !bytes.Equal(got, want) {
		t.Fatalf("record\n% x\nwant\n% x", got, want)
	}
}

func indexBytes(recs ...IndexRecord) []byte {
	b := bytes.Clone(indexFileHeader)
	for _, r := range recs {
		b = AppendIndexRecord(b, r)
	}
	return b
}

func TestParseIndex(t *testing.T) {
	r1 := IndexRecord{ChunkID: 10, Timestamp: 1, Epoch: 1, Position: 8, Type: chunk.TypeUser}
	r2 := IndexRecord{ChunkID: 12, Timestamp: 2, Epoch: 1, Position: 100, Type: chunk.TypeTrackingDelta}
	good := indexBytes(r1, r2)
	zero := make([]byte, IndexRecordSize)
	cases := []struct {
		name    string
		in      []byte
		records int
		err     string
	}{
		{"clean", good, 2, ""},
		{"header only", indexBytes(), 0, ""},
		{"partial last record", append(bytes.Clone(good), 0, 0, 0, 1, 2), 2, ""},
		{"zero tail", append(append(bytes.Clone(good), zero...), zero...), 2, ""},
		{"zero tail and partial zeros", append(append(bytes.Clone(good), zero...), 0, 0), 2, ""},
		{"data after zero record", append(append(bytes.Clone(good), zero...), indexBytes(r2)[8:]...), 0, "non-zero data at byte"},
		{"bad header", append([]byte("OSIL"), good[4:]...), 0, "file header"},
		{"short header", []byte("OSI"), 0, "file header"},
		{"ids go back", indexBytes(r2, r1), 0, "does not follow"},
		{"bad type", indexBytes(IndexRecord{ChunkID: 1, Position: 8, Type: 9}), 0, "unknown chunk type"},
		{"position in header", indexBytes(IndexRecord{ChunkID: 1, Position: 4}), 0, "before the file header ends"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := ParseIndex("x.index", c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "x.index") {
					t.Fatalf("error %v, want one naming x.index and containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(f.Records) != c.records || f.ValidLen != int64(FileHeaderSize+c.records*IndexRecordSize) {
				t.Fatalf("%d records, valid length %d", len(f.Records), f.ValidLen)
			}
			if c.records == 2 && (f.Records[0] != r1 || f.Records[1] != r2) {
				t.Fatalf("records %+v", f.Records)
			}
		})
	}
}
