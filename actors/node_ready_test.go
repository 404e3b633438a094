package actors

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/actors/read"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAwaitReadyThenRead: once AwaitReady returns, a reader opens at once (before, it
// answered read.ErrUnavailable until the stream resolved).
func TestAwaitReadyThenRead(t *testing.T) {
	w := newWorld(t, worldOptions{})
	n := startNode(w, v3Config(t))
	lg := openLog(t, segments.Options{})
	writeLog(t, lg, 3, loadgen.Limit{Bytes: 20 << 10})
	if err := n.AddStream(StreamSpec{ID: "ready", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.AwaitReady(ctx, "ready"); err != nil {
		t.Fatal(err)
	}
	r, err := n.OpenReader(ctx, "ready", read.FromFirst())
	if err != nil {
		t.Fatalf("open a reader right after AwaitReady: %v", err)
	}
	r.Close()
	if err := n.AwaitReady(ctx, "nothing"); !errors.Is(err, ErrUnknownStream) {
		t.Fatalf("AwaitReady of an unknown stream: %v", err)
	}
}

// TestAwaitReadyNamesWhatItWaitsFor: a stream whose metadata is lost (roots in the bucket,
// no records in etcd) never gets ready; AwaitReady's error names the phase and the repair.
func TestAwaitReadyNamesWhatItWaitsFor(t *testing.T) {
	w := newWorld(t, worldOptions{})
	cfg := v3Config(t)
	n, _ := readerStream(t, w, cfg, "lost")
	ctx := context.Background()
	if err := n.RemoveStream(ctx, "lost"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Meta.Client().Delete(ctx, metadata.StreamPrefix(w.Meta.Prefix(), "lost"), clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	lg := openLog(t, segments.Options{})
	if err := n.AddStream(StreamSpec{ID: "lost", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err := n.AwaitReady(wctx, "lost")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "metadata_missing") || !strings.Contains(err.Error(), "node recover") {
		t.Fatalf("AwaitReady of a stream with lost metadata: %v", err)
	}
}

// TestAddStreamRefusesDeletedID: a deleted stream id is refused at AddStream, by name,
// wrapping metadata.ErrStreamDeleted (it returned nil and the reader stopped later).
func TestAddStreamRefusesDeletedID(t *testing.T) {
	w := newWorld(t, worldOptions{})
	n, _ := readerStream(t, w, v3Config(t), "gone")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.DeleteStream(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	err := n.AddStream(StreamSpec{ID: "gone", Log: openLog(t, segments.Options{}), Epoch: 1})
	if !errors.Is(err, metadata.ErrStreamDeleted) || !strings.Contains(err.Error(), "new id") {
		t.Fatalf("AddStream of a deleted id: %v", err)
	}
	if _, err := n.Status(ctx, "gone"); !errors.Is(err, ErrUnknownStream) {
		t.Fatalf("the refused stream is in the node: %v", err)
	}
}
