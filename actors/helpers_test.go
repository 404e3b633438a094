package actors

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/streamtier/streamtier/actors/internal/actortest"
)

// The shared test support lives in internal/actortest; these names keep this package's
// tests short.
type (
	manualClock  = actortest.ManualClock
	logBuffer    = actortest.LogBuffer
	probe        = actortest.Probe
	world        = actortest.World
	worldOptions = actortest.WorldOptions
)

var (
	newManualClock = actortest.NewManualClock
	testLogger     = actortest.Logger
	newProbe       = actortest.NewProbe
	newSystem      = actortest.NewSystem
	newWorld       = actortest.NewWorld
	writeLog       = actortest.WriteLog
	openLog        = actortest.OpenLog
	eventually     = actortest.Eventually
)

func expect[T any](t *testing.T, p *probe, d time.Duration) (T, []any) {
	t.Helper()
	return actortest.Expect[T](t, p, d)
}

func quiet[T any](t *testing.T, p *probe, d time.Duration) {
	t.Helper()
	actortest.Quiet[T](t, p, d)
}

// startNode starts a node on w and stops it at cleanup.
func startNode(w *world, cfg Config) *Node {
	w.T.Helper()
	n, err := Start(context.Background(), cfg, w.Store, w.Meta)
	if err != nil {
		w.T.Fatalf("start node: %v", err)
	}
	w.T.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := n.Stop(ctx); err != nil {
			w.T.Errorf("stop node: %v", err)
		}
	})
	return n
}

// until polls cond every 10 ms until it holds, failing after d with what and its state.
func until(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	eventually(t, d, what, cond)
}

// persisted waits until every offset below next of stream is persisted, cutting the tail.
func persisted(t *testing.T, n *Node, stream string, next uint64, d time.Duration) {
	t.Helper()
	until(t, d, fmt.Sprintf("%s persisted up to %d", stream, next), func() (bool, string) {
		_ = n.ForceCut(stream)
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		err := n.AwaitOffset(ctx, stream, next-1)
		st, _ := n.Status(context.Background(), stream)
		return err == nil, fmt.Sprintf("%v; %s", err, st.Core)
	})
}

var isolated = actortest.Isolated
var clusterTestLogger = actortest.ConsoleLogger

// stopNode stops n, failing the test if it does not stop cleanly within 30 s.
func stopNode(t *testing.T, n *Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}
