package actors

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// One local log tiered under two ids would be deleted under each stream by the other's
// local retention (a declared gap in both). AddStream refuses a log another stream of the
// node tiers, the same *segments.Log or another Log of its directory (a follower), naming
// both streams; once the first stream is removed, the log may be added under a new id.
func TestAddStreamRefusesALogInUse(t *testing.T) {
	w := newWorld(t, worldOptions{})
	log, _ := testLogger(t)
	n := startNode(w, Config{Logger: log})
	lg := openLog(t, segments.Options{})
	writeLog(t, lg, 7, loadgen.Limit{Chunks: 5})
	if err := n.AddStream(StreamSpec{ID: "first", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	err := n.AddStream(StreamSpec{ID: "second", Log: lg, Epoch: 1})
	if !errors.Is(err, ErrLogInUse) || !strings.Contains(err.Error(), "first") || !strings.Contains(err.Error(), lg.Dir()) {
		t.Fatalf("the same log under a second id: %v; want ErrLogInUse naming stream first and %s", err, lg.Dir())
	}
	follower, err := segments.Open(lg.Dir(), segments.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer follower.Close()
	if err := n.AddStream(StreamSpec{ID: "third", Log: follower, Epoch: 1}); !errors.Is(err, ErrLogInUse) {
		t.Fatalf("another Log of the same directory: %v, want ErrLogInUse", err)
	}
	if got := n.Streams(); len(got) != 1 {
		t.Fatalf("streams %v, want only first", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.RemoveStream(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	if err := n.AddStream(StreamSpec{ID: "second", Log: lg, Epoch: 1}); err != nil {
		t.Fatalf("the log once its stream was removed: %v", err)
	}
}
