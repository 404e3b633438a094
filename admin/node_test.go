package admin_test

import (
	"context"
	"testing"

	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/segments"
)

// startNode starts a node on store and meta, stopped when the test ends.
func startNode(ctx context.Context, t *testing.T, store *s3io.Store, meta *metadata.Store) *actors.Node {
	t.Helper()
	node, err := actors.Start(ctx, actors.Config{Logger: zerolog.Nop()}, store, meta)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Stop(context.Background()) })
	return node
}

// addEmptyStream adds stream id on a new empty log (closed when the test ends) at epoch 1.
func addEmptyStream(t *testing.T, node *actors.Node, id string) *segments.Log {
	t.Helper()
	lg, err := segments.Open(t.TempDir(), segments.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lg.Close() })
	if err := node.AddStream(actors.StreamSpec{ID: id, Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	return lg
}
