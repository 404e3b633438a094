package segments

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/streamtier/streamtier/chunk"
)

// unhex decodes a hex string written with spaces and "|" separators for readability.
func unhex(t *testing.T, s string) []byte {
	t.Helper()
	s = strings.NewReplacer(" ", "", "|", "", "\n", "", "\t", "").Replace(s)
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad test vector %q: %v", s, err)
	}
	return b
}

// The vectors below are written by hand from the spec's byte table, not produced by the
// code under test.
func TestEntryVectors(t *testing.T) {
	sub, err := UncompressedSubBatch([][]byte{[]byte("a"), []byte("bc")})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		entry Entry
		want  string
	}{
		{"simple", SimpleEntry([]byte("hi")), "00000002 | 6869"},
		{"simple empty", SimpleEntry(nil), "00000000"},
		// 0x80 | none<<4, 2 records, uncompressed 11, length 11, then each record as a
		// simple entry.
		{"sub-batch none", sub, "80 | 0002 | 0000000b | 0000000b | 00000001 61 | 00000002 6263"},
		{"sub-batch zstd", CompressedSubBatch(CompressionZstd, 300, 1000, []byte{1, 2, 3}), "c0 | 012c | 000003e8 | 00000003 | 010203"},
		{"sub-batch user", CompressedSubBatch(CompressionUser, 1, 5, []byte{9}), "f0 | 0001 | 00000005 | 00000001 | 09"},
		{"sub-batch snappy", CompressedSubBatch(CompressionSnappy, 2, 7, nil), "a0 | 0002 | 00000007 | 00000000"},
		{"sub-batch lz4", CompressedSubBatch(CompressionLZ4, 2, 7, []byte{0xff}), "b0 | 0002 | 00000007 | 00000001 | ff"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := AppendEntry(nil, c.entry)
			if err != nil {
				t.Fatal(err)
			}
			if want := unhex(t, c.want); !bytes.Equal(got, want) {
				t.Fatalf("encoded\n% x\nwant\n% x", got, want)
			}
			if len(got) != c.entry.EncodedLen() {
				t.Fatalf("EncodedLen %d, encoded %d bytes", c.entry.EncodedLen(), len(got))
			}
			back, records, err := DecodeEntries(got)
			if err != nil {
				t.Fatal(err)
			}
			if len(back) != 1 || records != c.entry.RecordCount() || back[0].SubBatch != c.entry.SubBatch ||
				back[0].Compression != c.entry.Compression || back[0].Records != c.entry.Records ||
				back[0].UncompressedLen != c.entry.UncompressedLen || !bytes.Equal(back[0].Body, c.entry.Body) {
				t.Fatalf("decoded %+v (%d records), want %+v", back, records, c.entry)
			}
		})
	}
}

func TestGzipSubBatchVector(t *testing.T) {
	// The caller compresses: here a real gzip stream of two records laid out as simple entries.
	plain := unhex(t, "00000003 787878 | 00000001 79")
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	if _, err := zw.Write(plain); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := AppendEntry(nil, CompressedSubBatch(CompressionGzip, 2, uint32(len(plain)), z.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte{0x90, 0x00, 0x02, 0, 0, 0, byte(len(plain)), 0, 0, 0, byte(z.Len())}, z.Bytes()...)
	if !bytes.Equal(got, want) {
		t.Fatalf("encoded\n% x\nwant\n% x", got, want)
	}
}

// A whole chunk written by hand from the spec table: user chunk 7, epoch 3, timestamp
// 1700000000000, a simple entry "hi" and an uncompressed sub-batch ["a", "bc"], trailer aabb.
func TestChunkVector(t *testing.T) {
	data := "00000002 6869 | 80 0002 0000000b 0000000b 00000001 61 00000002 6263"
	want := unhex(t, `
		50 | 00 | 0002 | 00000003 | 0000018bcfe56800 | 0000000000000003 | 0000000000000007
		| 4901c709 | 0000001c | 00000002 | 00 | 000000`+data+"aabb")
	sub, err := UncompressedSubBatch([][]byte{[]byte("a"), []byte("bc")})
	if err != nil {
		t.Fatal(err)
	}
	spec := ChunkSpec{Type: chunk.TypeUser, Epoch: 3, Timestamp: 1700000000000,
		Entries: []Entry{SimpleEntry([]byte("hi")), sub}, Trailer: []byte{0xaa, 0xbb}}
	got, h, err := EncodeChunk([]byte("prefix"), spec, 7)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:6], []byte("prefix")) || !bytes.Equal(got[6:], want) {
		t.Fatalf("chunk\n% x\nwant\n% x", got[6:], want)
	}
	if h.ChunkID != 7 || h.Records != 3 || h.Entries != 2 || h.DataCRC != 0x4901c709 || h.Size() != int64(len(want)) || h.NextID() != 10 {
		t.Fatalf("header %+v", h)
	}
	if vh, err := VerifyChunk(want); err != nil || vh != h {
		t.Fatalf("VerifyChunk: %+v, %v; want %+v", vh, err, h)
	}
	bad := bytes.Clone(want)
	bad[chunk.HeaderSize] ^= 1
	if _, err := VerifyChunk(bad); !errorsIs(err, ErrChunkCRC) {
		t.Fatalf("VerifyChunk of a flipped data byte: %v, want ErrChunkCRC", err)
	}
	if _, err := VerifyChunk(want[:len(want)-1]); err == nil {
		t.Fatal("VerifyChunk of a short chunk: no error")
	}
}

// A tracking chunk is one simple entry using one offset, as in the RabbitMQ directory.
func TestTrackingChunkVector(t *testing.T) {
	body := []byte{0, 2, 'i', 'd', 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 4}
	spec := ChunkSpec{Type: chunk.TypeTrackingSnapshot, Epoch: 1, Timestamp: 5, Entries: []Entry{SimpleEntry(body)}}
	got, h, err := EncodeChunk(nil, spec, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got[1] != 2 || h.Entries != 1 || h.Records != 1 || h.DataLen != uint32(4+len(body)) || h.TrailerLen != 0 {
		t.Fatalf("tracking chunk header %+v", h)
	}
	for _, bad := range []ChunkSpec{
		{Type: chunk.TypeTrackingDelta, Entries: nil},
		{Type: chunk.TypeTrackingDelta, Entries: []Entry{SimpleEntry(nil), SimpleEntry(nil)}},
		{Type: chunk.TypeTrackingSnapshot, Entries: []Entry{CompressedSubBatch(0, 2, 0, nil)}},
		{Type: chunk.TypeUser},
		{Type: 3, Entries: []Entry{SimpleEntry(nil)}},
		{Type: chunk.TypeUser, Entries: []Entry{CompressedSubBatch(8, 1, 0, nil)}},
		{Type: chunk.TypeUser, Entries: []Entry{CompressedSubBatch(0, 0, 0, nil)}},
		{Type: chunk.TypeUser, Entries: make([]Entry, 65536)},
	} {
		if _, _, err := EncodeChunk(nil, bad, 1); err == nil {
			t.Errorf("EncodeChunk(%+v): no error", bad.Type)
		}
	}
}

func TestDecodeEntriesRefusesBadInput(t *testing.T) {
	for name, in := range map[string]string{
		"short simple header":   "000000",
		"simple body too long":  "00000005 6162",
		"short sub-batch":       "80 0001 00000001",
		"sub-batch too long":    "80 0001 00000001 00000009 61",
		"reserved bits":         "81 0001 00000001 00000001 61",
		"zero-record sub-batch": "80 0000 00000001 00000001 61",
	} {
		if _, _, err := DecodeEntries(unhex(t, in)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := UncompressedSubBatch(nil); err == nil {
		t.Error("UncompressedSubBatch of no records: no error")
	}
	if _, err := UncompressedSubBatch(make([][]byte, 65536)); err == nil {
		t.Error("UncompressedSubBatch of 65536 records: no error")
	}
}
