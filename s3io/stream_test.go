package s3io_test

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"io"
	"testing"
	"time"

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
	checkNoWholeObject(t, st, "data/b", int64(len(body)))
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
// with ErrBodyMismatch, retriable, and no whole object is stored; a body that ends early
// fails too; a matching body is stored. What a server does with the aborted request is
// its own: it may drop it or keep what it received, even after the client returned
// (FaultKeepPartial does, and waits for nothing). The test asserts only what s3io
// guarantees: never a whole object, and the caller's delete of its key leaves none. A
// ranged GET through FaultCorruptResponse returns one bit flipped. Before, the test
// asserted that nothing was stored and failed in 1 of 3 loaded runs (versitygw kept a
// partial object); with FaultKeepPartial it failed every time.
func TestStreamedPutChecksItsBody(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{})
	inj := s3test.NewInjector(t, srv)
	st := newStore(t, inj.Config())
	ctx := context.Background()
	body := bytes.Repeat([]byte("streamtier"), 100_000)
	size := int64(len(body))
	crc := crc32.ChecksumIEEE(body)
	kept := make(chan int64, 2)
	inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: `^ignored/`, Fault: s3test.FaultIgnoreChecksum})
	inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: `^kept/`, Fault: s3test.FaultKeepPartial, Kept: kept})

	for _, prefix := range []string{"ignored/", "kept/"} {
		err := st.PutObjectStream(ctx, prefix+"bad", bytes.NewReader(body), size, crc^1)
		if !errors.Is(err, s3io.ErrBodyMismatch) || !s3io.IsRetriable(err) {
			t.Fatalf("%s: a body that does not match its CRC: %v, want a retriable ErrBodyMismatch", prefix, err)
		}
		short := io.LimitReader(bytes.NewReader(body), 1000)
		if err := st.PutObjectStream(ctx, prefix+"short", short, size, crc); !errors.Is(err, s3io.ErrBodyMismatch) {
			t.Fatalf("%s: a body that ends early: %v, want ErrBodyMismatch", prefix, err)
		}
		if prefix == "kept/" { // the server has kept both before they are looked at
			for range 2 {
				select {
				case n := <-kept:
					if n >= size {
						t.Fatalf("the server received %d bytes of an aborted put of %d", n, size)
					}
				case <-time.After(30 * time.Second):
					t.Fatal("the injector kept no partial object within 30s")
				}
			}
		}
		for _, key := range []string{prefix + "bad", prefix + "short"} {
			n := checkNoWholeObject(t, st, key, size)
			if prefix == "kept/" && n < 0 {
				t.Fatalf("%s: the kept partial object is missing", key)
			}
			callerDeletes(t, st, key)
			checkNoWholeObject(t, st, key, size) // a late commit can only be partial
		}
		if _, err := st.Head(ctx, "kept/bad"); prefix == "kept/" && !s3io.IsNotFound(err) {
			t.Fatalf("kept/bad after the caller's delete: %v, want not found", err)
		}
	}
	if err := st.PutObjectStream(ctx, "ignored/good", bytes.NewReader(body), size, crc); err != nil {
		t.Fatal(err)
	}
	if err := st.PutObjectStream(ctx, "kept/good", bytes.NewReader(body), size, crc); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"ignored/good", "kept/good"} {
		if got, err := st.GetObject(ctx, key); err != nil || !bytes.Equal(got, body) {
			t.Fatalf("%s: %v (%d bytes)", key, err, len(got))
		}
	}
	if inj.Hits() != 6 {
		t.Fatalf("%d PUTs went through the rules, want 6", inj.Hits())
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
