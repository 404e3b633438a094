package segments

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/streamtier/streamtier/chunk"
)

// openIdle opens a log whose active files close after a short idle time, and returns a
// channel that receives after each idle close.
func openIdle(t *testing.T, dir string) (*Log, <-chan struct{}) {
	t.Helper()
	l := mustOpen(t, dir, Options{IdleClose: 20 * time.Millisecond})
	closed := make(chan struct{}, 16)
	l.mu.Lock()
	l.idleHook = func() { closed <- struct{}{} }
	l.mu.Unlock()
	return l, closed
}

func awaitIdle(t *testing.T, l *Log, closed <-chan struct{}) {
	t.Helper()
	for l.OpenFiles() != 0 {
		select {
		case <-closed:
		case <-time.After(10 * time.Second): // a failure guard, not synchronisation
			t.Fatal("the idle log kept its files open")
		}
	}
}

// A log holds no file once opened, its active files while written, none again once idle;
// what it wrote before and after reads back, and a reopen recovers the same log.
func TestIdleLogClosesItsFiles(t *testing.T) {
	dir := t.TempDir()
	l, closed := openIdle(t, dir)
	if l.OpenFiles() != 0 {
		t.Fatalf("a freshly opened log holds %d files, want none until it is written", l.OpenFiles())
	}
	before := appendN(t, l, 5, 1)
	if l.OpenFiles() != 2 {
		t.Fatalf("a log being written holds %d files, want 2", l.OpenFiles())
	}
	awaitIdle(t, l, closed)
	if err := l.Sync(); err != nil {
		t.Fatalf("sync of an idle-closed log: %v", err)
	}
	after := appendN(t, l, 5, 1)
	if l.OpenFiles() != 2 {
		t.Fatalf("append did not reopen the active files: %d open", l.OpenFiles())
	}
	if err := l.SetCommitted(after[4].ChunkID); err != nil {
		t.Fatal(err)
	}
	awaitIdle(t, l, closed)
	rd, err := l.NewReader(0)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	for i, want := range append(before, after...) {
		h, _, err := rd.Next()
		if err != nil || h.ChunkID != want.ChunkID || h.Size() != want.Size() {
			t.Fatalf("chunk %d: got %+v, %v; want chunk id %d", i, h, err, want.ChunkID)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatalf("close of an idle-closed log: %v", err)
	}
	l2 := mustOpen(t, dir, Options{})
	if l2.NextOffset() != l.NextOffset() || len(l2.Segments()) != 1 {
		t.Fatalf("reopened log: next %d, %d segments; want next %d in one segment", l2.NextOffset(), len(l2.Segments()), l.NextOffset())
	}
}

// A roll while idle-closed creates the new segment and keeps the old one whole.
func TestIdleLogRolls(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{IdleClose: 20 * time.Millisecond, MaxSegmentChunks: 3})
	closed := make(chan struct{}, 16)
	l.mu.Lock()
	l.idleHook = func() { closed <- struct{}{} }
	l.mu.Unlock()
	appendN(t, l, 3, 1)
	awaitIdle(t, l, closed)
	appendN(t, l, 2, 1)
	if n := len(l.Segments()); n != 2 {
		t.Fatalf("%d segments after the roll, want 2", n)
	}
	next := l.NextOffset()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2 := mustOpen(t, dir, Options{})
	if l2.NextOffset() != next || len(l2.Segments()) != 2 {
		t.Fatalf("reopened: next %d, %d segments; want %d in 2", l2.NextOffset(), len(l2.Segments()), next)
	}
}

// The goroutine-free listener is called at once when the offset is committed, on a later
// commit, and when the log closes.
func TestOnCommittedPast(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{})
	hs := appendN(t, l, 3, 1)
	var calls []string
	l.OnCommittedPast(hs[1].ChunkID, func() { calls = append(calls, "second") })
	l.OnCommittedPast(1<<40, func() { calls = append(calls, "far") })
	if len(calls) != 0 {
		t.Fatalf("called before any commit: %v", calls)
	}
	l.SetCommitted(hs[0].ChunkID)
	if len(calls) != 0 {
		t.Fatalf("called before its offset was committed: %v", calls)
	}
	l.SetCommitted(hs[2].ChunkID)
	if len(calls) != 1 || calls[0] != "second" {
		t.Fatalf("after the commit: %v, want [second]", calls)
	}
	l.OnCommittedPast(hs[0].ChunkID, func() { calls = append(calls, "now") })
	if len(calls) != 2 {
		t.Fatalf("a committed offset's listener was not called at once: %v", calls)
	}
	l.Close()
	if len(calls) != 3 || calls[2] != "far" {
		t.Fatalf("close left a listener uncalled: %v", calls)
	}
}

// A forgotten listener is never called and no longer held; the others keep their order,
// and forgetting one that fired, or 0, does nothing.
func TestForgetListener(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{})
	hs := appendN(t, l, 4, 1)
	var calls []string
	ids := map[string]ListenerID{}
	for i, name := range []string{"a", "b", "c", "d"} {
		ids[name] = l.OnCommittedPast(hs[i].ChunkID, func() { calls = append(calls, name) })
	}
	ch := l.NotifyWhenCommittedPast(hs[3].ChunkID)
	if l.Listeners() != 5 {
		t.Fatalf("%d listeners, want 5", l.Listeners())
	}
	l.Forget(ids["b"])
	l.Forget(ids["d"])
	l.Forget(0)
	if l.Listeners() != 3 {
		t.Fatalf("%d listeners after forgetting two, want 3", l.Listeners())
	}
	l.SetCommitted(hs[2].ChunkID)
	if !slices.Equal(calls, []string{"a", "c"}) {
		t.Fatalf("calls %v, want [a c]", calls)
	}
	l.Forget(ids["a"]) // fired: nothing to do
	if l.Listeners() != 1 {
		t.Fatalf("%d listeners, want the channel's", l.Listeners())
	}
	l.SetCommitted(hs[3].ChunkID)
	<-ch
	if l.Listeners() != 0 || !slices.Equal(calls, []string{"a", "c"}) {
		t.Fatalf("%d listeners, calls %v", l.Listeners(), calls)
	}
	if id := l.OnCommittedPast(hs[0].ChunkID, func() {}); id != 0 {
		t.Fatalf("a listener called at once has id %d, want 0", id)
	}
}

// An idle reader holds neither its file nor a buffer; Suspend closes the file and the next
// read reopens it where the reader stood.
func TestReaderHoldsNothingWhileIdle(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{})
	rd, err := l.NewReader(0)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if rd.HoldsFile() || rd.buf != nil {
		t.Fatal("a reader at the end of an empty log holds a file or a buffer")
	}
	hs := appendN(t, l, 4, 1)
	l.SetCommitted(hs[1].ChunkID)
	for i := range 2 {
		if h, _, err := rd.Next(); err != nil || h.ChunkID != hs[i].ChunkID {
			t.Fatalf("chunk %d: %+v, %v", i, h, err)
		}
	}
	if !rd.HoldsFile() {
		t.Fatal("a reading reader holds no file")
	}
	if _, _, err := rd.Next(); !errors.Is(err, ErrEndOfStream) {
		t.Fatalf("want end of stream, got %v", err)
	}
	if rd.buf != nil {
		t.Fatal("the buffer was kept at the end of the stream")
	}
	if err := rd.Suspend(); err != nil || rd.HoldsFile() {
		t.Fatalf("suspend: %v, holds file %v", err, rd.HoldsFile())
	}
	l.SetCommitted(hs[3].ChunkID)
	for i := 2; i < 4; i++ {
		if h, _, err := rd.Next(); err != nil || h.ChunkID != hs[i].ChunkID {
			t.Fatalf("chunk %d after suspend: %+v, %v", i, h, err)
		}
	}
}

// A read-ahead buffer filled while the next chunk was not yet (fully) written is not used
// for that chunk once it is committed: the reader reads it afresh. Without that, the torn
// header in the buffer would fail the reader at the same place forever.
func TestReaderDoesNotTrustBytesReadBeforeCommit(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	a := appendN(t, l, 1, 1)[0]
	l.SetCommitted(a.ChunkID)
	// What a concurrent pread may see of a chunk being written: part of it, here zeros.
	f, err := os.OpenFile(filepath.Join(dir, SegmentName(0)), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	end := l.Segments()[0].Size
	if _, err := f.WriteAt(make([]byte, chunk.HeaderSize), end); err != nil {
		t.Fatal(err)
	}
	f.Close()
	rd, err := l.NewReader(0)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if h, _, err := rd.Next(); err != nil || h.ChunkID != a.ChunkID {
		t.Fatalf("first chunk: %+v, %v", h, err)
	}
	b := appendN(t, l, 1, 1)[0] // overwrites the zeros
	l.SetCommitted(b.ChunkID)
	if h, _, err := rd.Next(); err != nil || h.ChunkID != b.ChunkID {
		t.Fatalf("second chunk: %+v, %v; want chunk %d", h, err, b.ChunkID)
	}
}

// exhaustDescriptors lowers the soft descriptor limit just above what is open and fills the
// rest, so the next open fails with EMFILE; the returned func gives everything back.
func exhaustDescriptors(t *testing.T) func() {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Skip(err)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	low := old
	low.Cur = uint64(len(ents)) + 64
	if low.Cur > old.Cur {
		t.Skip("the descriptor limit is already low")
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skip(err)
	}
	var held []*os.File
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) {
				t.Fatalf("filling descriptors: %v", err)
			}
			break
		}
		held = append(held, f)
	}
	return func() {
		for _, f := range held {
			f.Close()
		}
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	}
}

// Out of descriptors, reopening an idle log's files and a suspended reader's file fail
// with an error that names EMFILE, nothing is written or lost, and both work once
// descriptors are free again.
func TestOutOfDescriptorsIsReportedAndRecovers(t *testing.T) {
	l, closed := openIdle(t, t.TempDir())
	hs := appendN(t, l, 3, 1)
	l.SetCommitted(hs[0].ChunkID)
	rd, err := l.NewReader(0)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if err := rd.Suspend(); err != nil {
		t.Fatal(err)
	}
	awaitIdle(t, l, closed)
	restore := exhaustDescriptors(t)
	_, _, appendErr := l.Append(userChunk(1, 5, "late"))
	_, _, readErr := rd.Next()
	restore()
	if !errors.Is(appendErr, syscall.EMFILE) {
		t.Fatalf("append out of descriptors: %v, want EMFILE", appendErr)
	}
	if !errors.Is(readErr, syscall.EMFILE) {
		t.Fatalf("read out of descriptors: %v, want EMFILE", readErr)
	}
	if l.WriteError() != nil || l.NextOffset() != hs[2].NextID() {
		t.Fatalf("the failed reopen broke the log (%v) or wrote (next %d)", l.WriteError(), l.NextOffset())
	}
	h, _, err := l.Append(userChunk(1, 5, "late"))
	if err != nil {
		t.Fatalf("append after descriptors came back: %v", err)
	}
	l.SetCommitted(h.ChunkID)
	for _, want := range append(hs, h) {
		if got, _, err := rd.Next(); err != nil || got.ChunkID != want.ChunkID {
			t.Fatalf("read after descriptors came back: %+v, %v; want %d", got, err, want.ChunkID)
		}
	}
}

// A log kept open with a negative IdleClose holds its files from Open to Close.
func TestIdleCloseDisabled(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{IdleClose: -1})
	if l.OpenFiles() != 2 {
		t.Fatalf("holds %d files, want 2", l.OpenFiles())
	}
	appendN(t, l, 2, 1)
	if l.OpenFiles() != 2 {
		t.Fatalf("holds %d files after appends, want 2", l.OpenFiles())
	}
}
