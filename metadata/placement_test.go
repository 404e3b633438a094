package metadata_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
)

func nextPlacement(t *testing.T, ctx context.Context, ch <-chan metadata.PlacementEvent) metadata.PlacementEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("placement events closed early")
		}
		return ev
	case <-ctx.Done():
		t.Fatalf("no placement event: %v", ctx.Err())
	}
	return metadata.PlacementEvent{}
}

func expectPlacement(t *testing.T, ctx context.Context, ch <-chan metadata.PlacementEvent, want metadata.PlacementEvent) {
	t.Helper()
	if got := nextPlacement(t, ctx, ch); !reflect.DeepEqual(got, want) {
		t.Fatalf("placement event %+v, want %+v", got, want)
	}
}

func TestPlacementPutGetWatch(t *testing.T) {
	e := etcdtest.Start(t)
	s := etcdtest.Store(t, e)
	ctx := testCtx(t, 20*time.Second)
	p0 := metadata.Placement{Stream: "s0", Writer: "n1", Epoch: 1}
	if err := s.PutPlacement(ctx, p0); err != nil {
		t.Fatal(err)
	}
	events, err := s.WatchPlacements(ctx)
	if err != nil {
		t.Fatal(err)
	}
	expectPlacement(t, ctx, events, metadata.PlacementEvent{Kind: metadata.PlacementPut, Placement: p0}) // the snapshot

	p1 := metadata.Placement{Stream: "s1", Writer: "n1", Epoch: 4, Replicas: []string{"n2", "n3"}}
	if err := s.PutPlacement(ctx, p1); err != nil {
		t.Fatal(err)
	}
	expectPlacement(t, ctx, events, metadata.PlacementEvent{Kind: metadata.PlacementPut, Placement: p1})
	if got, found, err := s.GetPlacement(ctx, "s1"); err != nil || !found || !reflect.DeepEqual(got, p1) {
		t.Fatalf("GetPlacement = %+v %v %v", got, found, err)
	}
	if _, found, err := s.GetPlacement(ctx, "nope"); err != nil || found {
		t.Fatalf("GetPlacement of nothing = %v %v", found, err)
	}

	// Same epoch, new replica set: accepted. Lower epoch: refused, nothing changes.
	p1b := metadata.Placement{Stream: "s1", Writer: "n1", Epoch: 4, Replicas: []string{"n3"}}
	if err := s.PutPlacement(ctx, p1b); err != nil {
		t.Fatal(err)
	}
	expectPlacement(t, ctx, events, metadata.PlacementEvent{Kind: metadata.PlacementPut, Placement: p1b})
	err = s.PutPlacement(ctx, metadata.Placement{Stream: "s1", Writer: "n2", Epoch: 3})
	if !errors.Is(err, metadata.ErrStaleEpoch) || metadata.IsRetriable(err) {
		t.Fatalf("lower epoch: %v, want a non-retriable ErrStaleEpoch", err)
	}
	p1c := metadata.Placement{Stream: "s1", Writer: "n2", Epoch: 5, Replicas: []string{"n1", "n3"}}
	if err := s.PutPlacement(ctx, p1c); err != nil {
		t.Fatal(err)
	}
	expectPlacement(t, ctx, events, metadata.PlacementEvent{Kind: metadata.PlacementPut, Placement: p1c})

	// Deleting the stream deletes its placement.
	if err := s.DeleteStream(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	expectPlacement(t, ctx, events, metadata.PlacementEvent{Kind: metadata.PlacementDeleted, Placement: metadata.Placement{Stream: "s1"}})
}

func TestPlacementBadInput(t *testing.T) {
	e := etcdtest.Start(t)
	s := etcdtest.Store(t, e)
	ctx := testCtx(t, 10*time.Second)
	for _, p := range []metadata.Placement{
		{Stream: "s", Writer: ""},
		{Stream: "s", Writer: "../n"},
		{Stream: "s", Writer: "n1", Replicas: []string{"n1"}},
		{Stream: "s", Writer: "n1", Replicas: []string{"n2", "n2"}},
		{Stream: "s", Writer: "n1", Replicas: []string{""}},
	} {
		if err := s.PutPlacement(ctx, p); !errors.Is(err, metadata.ErrInvalidArgument) {
			t.Errorf("PutPlacement(%+v) = %v, want ErrInvalidArgument", p, err)
		}
	}
}

func TestGarbagePlacementRecord(t *testing.T) {
	e := etcdtest.Start(t)
	s := etcdtest.Store(t, e)
	ctx := testCtx(t, 10*time.Second)
	key := metadata.PlacementKey(s.Prefix(), "s1")
	for _, garbage := range []string{"nope", `{"stream":"other","writer":"n1","epoch":1,"replicas":[]}`, `{"stream":"s1","writer":"n1","epoch":1,"replicas":[],"x":1}`} {
		if _, err := e.Client().Put(ctx, key, garbage); err != nil {
			t.Fatal(err)
		}
		_, _, err := s.GetPlacement(ctx, "s1")
		if !errors.Is(err, metadata.ErrCorruptRecord) || !strings.Contains(err.Error(), key) {
			t.Fatalf("GetPlacement of %q: %v, want a corrupt record error naming %s", garbage, err, key)
		}
		wctx, stop := context.WithCancel(ctx)
		events, err := s.WatchPlacements(wctx)
		if err != nil {
			t.Fatal(err)
		}
		if ev := nextPlacement(t, ctx, events); !errors.Is(ev.Err, metadata.ErrCorruptRecord) || ev.Placement.Stream != "s1" {
			t.Fatalf("watch of %q: %+v, want a corrupt record event for s1", garbage, ev)
		}
		stop()
		for range events {
		}
	}
	// A corrupt record does not keep the broker from writing a good one.
	good := metadata.Placement{Stream: "s1", Writer: "n1", Epoch: 1}
	if err := s.PutPlacement(ctx, good); err != nil {
		t.Fatal(err)
	}
}
