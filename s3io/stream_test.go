package s3io_test

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"io"
	"testing"

	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
)

// TestStreams: a streamed PUT with the object's CRC-32 stores it; one whose CRC does not
// match the body is refused (by the body check, before the server) and stores nothing; a body that fails fails the
// PUT with its error. A streamed ranged GET reads the range; one past the object's end
// ends with io.ErrUnexpectedEOF.
func TestStreams(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{})
	st := newStore(t, srv.Config())
	ctx := context.Background()
	body := bytes.Repeat([]byte("streamtier"), 100_000)
	crc := crc32.ChecksumIEEE(body)
	if err := st.PutObjectStream(ctx, "data/a", bytes.NewReader(body), int64(len(body)), crc); err != nil {
		t.Fatal(err)
	}
	if got, err := st.GetObject(ctx, "data/a"); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("get: %v (%d bytes)", err, len(got))
	}
	if err := st.PutObjectStream(ctx, "data/b", bytes.NewReader(body), int64(len(body)), crc+1); err == nil {
		t.Fatal("a body that does not match its CRC was stored")
	}
	if _, err := st.Head(ctx, "data/b"); err == nil {
		t.Fatal("the refused object exists")
	}
	boom := errors.New("boom")
	failing := io.MultiReader(bytes.NewReader(body[:1000]), iotestErr{boom})
	if err := st.PutObjectStream(ctx, "data/c", failing, int64(len(body)), crc); !errors.Is(err, boom) {
		t.Fatalf("a failing body: %v, want its error", err)
	}

	rc, err := st.GetRangeStream(ctx, "data/a", 10, 500_000)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(got, body[10:500_010]) {
		t.Fatalf("range stream: %v (%d bytes)", err, len(got))
	}
	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}
	rc, err = st.GetRangeStream(ctx, "data/a", int64(len(body))-10, 100)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(rc); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a range past the end: %v, want io.ErrUnexpectedEOF", err)
	}
	rc.Close()
}

// iotestErr is a reader that fails.
type iotestErr struct{ err error }

func (r iotestErr) Read([]byte) (int, error) { return 0, r.err }

// TestStreamedPutChecksItsBody: through a server that ignores the checksum header (the
// injector strips it), a streamed PUT whose body does not match its declared CRC-32 fails
// with ErrBodyMismatch, retriable, and stores nothing; a body that ends early fails too; a
// matching body is stored. A ranged GET through FaultCorruptResponse returns one bit
// flipped.
func TestStreamedPutChecksItsBody(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{})
	inj := s3test.NewInjector(t, srv)
	st := newStore(t, inj.Config())
	ctx := context.Background()
	body := bytes.Repeat([]byte("streamtier"), 100_000)
	crc := crc32.ChecksumIEEE(body)
	inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: `^ignored/`, Fault: s3test.FaultIgnoreChecksum})

	err := st.PutObjectStream(ctx, "ignored/bad", bytes.NewReader(body), int64(len(body)), crc^1)
	if !errors.Is(err, s3io.ErrBodyMismatch) || !s3io.IsRetriable(err) {
		t.Fatalf("a body that does not match its CRC: %v, want a retriable ErrBodyMismatch", err)
	}
	if _, err := st.Head(ctx, "ignored/bad"); !s3io.IsNotFound(err) {
		t.Fatalf("the refused object: %v, want not found", err)
	}
	short := io.LimitReader(bytes.NewReader(body), 1000)
	if err := st.PutObjectStream(ctx, "ignored/short", short, int64(len(body)), crc); !errors.Is(err, s3io.ErrBodyMismatch) {
		t.Fatalf("a body that ends early: %v, want ErrBodyMismatch", err)
	}
	if _, err := st.Head(ctx, "ignored/short"); !s3io.IsNotFound(err) {
		t.Fatalf("the short object: %v, want not found", err)
	}
	if err := st.PutObjectStream(ctx, "ignored/good", bytes.NewReader(body), int64(len(body)), crc); err != nil {
		t.Fatal(err)
	}
	if inj.Hits() != 3 {
		t.Fatalf("%d PUTs went through the rule, want 3", inj.Hits())
	}

	inj.Add(s3test.Rule{Method: "GET", KeyRegexp: `^ignored/good$`, Fault: s3test.FaultCorruptResponse, Count: 1, AfterBytes: 7})
	rc, err := st.GetRangeStream(ctx, "ignored/good", 100, 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	want := bytes.Clone(body[100:1100])
	want[7] ^= 1
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("corrupted range: %v, %d bytes, equal to the flipped one: %v", err, len(got), bytes.Equal(got, want))
	}
}
