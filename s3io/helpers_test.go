package s3io_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
)

// newStore builds a store for cfg or fails the test.
func newStore(t testing.TB, cfg s3io.Config) *s3io.Store {
	t.Helper()
	st, err := s3io.NewStore(context.Background(), cfg)
	if err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	return st
}

// genLog writes a generated log into a fresh directory and cuts it into fragments.
func genLog(t testing.TB, spec s3test.LogSpec, target int64) (string, []fragment.Description) {
	t.Helper()
	dir := t.TempDir()
	chunks, err := s3test.WriteLog(dir, spec)
	if err != nil {
		t.Fatalf("WriteLog: %v", err)
	}
	walked, err := s3test.ReadLog(dir)
	if err != nil {
		t.Fatalf("ReadLog: %v", err)
	}
	if len(walked) != len(chunks) {
		t.Fatalf("walked %d chunks, wrote %d", len(walked), len(chunks))
	}
	return dir, s3test.Describe(walked, target)
}

// checkStored GETs key and compares it byte for byte with the object the segment files
// make for d, then reads it back verified.
func checkStored(t testing.TB, st *s3io.Store, key, dir string, d fragment.Description) {
	t.Helper()
	ctx := context.Background()
	want, err := s3test.ExpectedObject(dir, d)
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.GetObject(ctx, key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: stored %d bytes differ from the %d the segments make (first difference at %d)", key, len(got), len(want), firstDiff(got, want))
	}
	obj, err := st.ReadFragment(ctx, key)
	if err != nil {
		t.Fatalf("ReadFragment %s: %v", key, err)
	}
	if obj.Layout.Size != d.Size || len(obj.Layout.Chunks) != len(d.Chunks) {
		t.Fatalf("%s: layout S=%d with %d chunks, want S=%d with %d", key, obj.Layout.Size, len(obj.Layout.Chunks), d.Size, len(d.Chunks))
	}
	for i, c := range obj.Layout.Chunks {
		if c.Header != d.Chunks[i].Header || c.Position != int64(d.Chunks[i].Position) {
			t.Fatalf("%s: chunk %d is %+v at %d, want %+v at %d", key, i, c.Header, c.Position, d.Chunks[i].Header, d.Chunks[i].Position)
		}
	}
}

// checkAbsent asserts that nothing was stored under key (HEAD says 404, the listing of the
// key as prefix is empty): for a request the server refused after its whole body (a bad
// checksum). After a request the client aborted, see checkNoWholeObject.
func checkAbsent(t testing.TB, st *s3io.Store, key string) {
	t.Helper()
	ctx := context.Background()
	if _, err := st.Head(ctx, key); !s3io.IsNotFound(err) {
		t.Fatalf("head %s after a failed put: %v, want not found", key, err)
	}
	n := 0
	if err := st.List(ctx, key, func(s3io.ObjectInfo) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d objects listed under %s after a failed put", n, key)
	}
}

// checkNoWholeObject asserts what an aborted PUT of size bytes guarantees whatever the
// server does with it: no whole object under key. A server may keep what it received of
// the request (versitygw's posix backend sometimes commits it, at times after the client
// returned), so a shorter object is no failure: its key is new (callers never put twice
// under one key) and no manifest names it; the caller deletes it or leaves it to gc. It
// returns the size of the partial object found, -1 when none.
func checkNoWholeObject(t testing.TB, st *s3io.Store, key string, size int64) int64 {
	t.Helper()
	info, err := st.Head(context.Background(), key)
	switch {
	case s3io.IsNotFound(err):
		return -1
	case err != nil:
		t.Fatalf("head %s after an aborted put: %v", key, err)
	case info.Size >= size:
		t.Fatalf("%s: a whole object (%d bytes, %d declared) after an aborted put", key, info.Size, size)
	}
	t.Logf("%s: the server kept %d of the %d bytes of the aborted put (garbage no manifest names)", key, info.Size, size)
	return info.Size
}

// callerDeletes deletes key as the caller of an aborted put does.
func callerDeletes(t testing.TB, st *s3io.Store, key string) {
	t.Helper()
	if failed, err := st.DeleteObjects(context.Background(), []string{key}); err != nil || len(failed) > 0 {
		t.Fatalf("delete %s: %v %v", key, err, failed)
	}
}

func firstDiff(a, b []byte) int {
	for i := 0; i < min(len(a), len(b)); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// wantClass fails unless err is classified as want.
func wantClass(t testing.TB, err error, want s3io.Class) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want class %v", want)
	}
	if got := s3io.Classify(err); got != want {
		t.Fatalf("class %v, want %v: %v", got, want, err)
	}
}

// requests is how many requests of op the store made.
func requests(st *s3io.Store, op s3io.Op) uint64 { return st.Metrics().Snapshot()[op].Requests }

func keyFor(name string, i int) string {
	return fmt.Sprintf("streams/test/%s/data/%020d.fragment", name, i)
}

var errStop = errors.New("stop")
