package segments

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A second Open of a directory a Log holds is refused, naming the directory and the reason,
// even through another path to it; Close releases it, and the directory opens again. A
// follower (ReadOnly) is not refused: it follows a writer that holds the lock. A failed Open
// leaves no lock behind.
func TestOpenRefusesADirectoryInUse(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	second, err := Open(dir, Options{})
	if err == nil {
		second.Close()
		t.Fatal("a second Open of one directory succeeded")
	}
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("second Open: %v; want ErrLocked naming %s and another process", err, dir)
	}
	// Another path to the same directory finds the same lock file.
	if s, err := Open(filepath.Join(dir, ".", "x", ".."), Options{}); !errors.Is(err, ErrLocked) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Open through another path: %v, want ErrLocked", err)
	}
	appendN(t, l, 3, 1)
	next := l.NextOffset()
	l.SetCommitted(next)
	follower, err := Open(dir, Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("a follower of a locked directory: %v", err)
	}
	follower.Close()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	if again.NextOffset() != next {
		t.Fatalf("reopened log next offset %d, want %d", again.NextOffset(), next)
	}
	again.Close()

	// An Open that fails after taking the lock releases it.
	bad := t.TempDir()
	for _, name := range []string{SegmentName(0), IndexName(0), SegmentName(100), SegmentName(200), IndexName(200)} {
		if err := os.WriteFile(filepath.Join(bad, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Open(bad, Options{}); err == nil || errors.Is(err, ErrLocked) {
		t.Fatalf("Open of a damaged directory: %v, want a refusal other than ErrLocked", err)
	}
	if _, err := Open(bad, Options{}); err == nil || errors.Is(err, ErrLocked) {
		t.Fatalf("second Open of the damaged directory: %v: the first failed Open kept the lock", err)
	}
}
