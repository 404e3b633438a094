package segments_test

import (
	"fmt"
	"os"

	"github.com/streamtier/streamtier/chunk"
	"github.com/streamtier/streamtier/segments"
)

// A commit listener fires once, on the first commit past its offset. One whose owner goes
// away before that commit is forgotten, so that a log nobody writes to does not keep
// listeners (and whatever their functions hold) for owners that are gone.
func ExampleLog_OnCommittedPast() {
	dir, err := os.MkdirTemp("", "segments-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	l, err := segments.Open(dir, segments.Options{})
	if err != nil {
		panic(err)
	}
	defer l.Close()

	next := l.NextOffset()
	l.OnCommittedPast(next, func() { fmt.Println("committed past", next) })
	gone := l.OnCommittedPast(next, func() { fmt.Println("never printed") })
	fmt.Println("listeners:", l.Listeners())
	l.Forget(gone) // its owner stopped before the commit
	fmt.Println("listeners:", l.Listeners())

	h, _, err := l.Append(segments.ChunkSpec{Type: chunk.TypeUser, Epoch: 1, Timestamp: 1,
		Entries: []segments.Entry{segments.SimpleEntry([]byte("hello"))}})
	if err != nil {
		panic(err)
	}
	if err := l.SetCommitted(h.ChunkID); err != nil {
		panic(err)
	}
	fmt.Println("listeners:", l.Listeners())
	// Output:
	// listeners: 2
	// listeners: 1
	// committed past 0
	// listeners: 0
}
