package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
)

// TestStreamEpoch: on a real etcd, a stream opens at the highest of its setting, its log's
// last chunk epoch, the epoch etcd stores for it and 1; never below the stored one (a log
// whose higher-epoch tail the broker truncated: 1 < 5 stored), and a stored epoch that
// cannot be read is an error naming the stream, not a guess.
func TestStreamEpoch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := etcdtest.Start(t)
	meta := etcdtest.Store(t, e)

	for _, c := range []struct{ configured, log, want uint64 }{{0, 0, 1}, {3, 1, 3}, {1, 4, 4}} {
		o, err := streamEpoch(ctx, meta, "s1", c.configured, c.log)
		if err != nil || o.Epoch != c.want || o.Stored != 0 || o.raisedByStored() {
			t.Fatalf("never persisted, setting %d, log %d: %+v %v; want %d", c.configured, c.log, o, err, c.want)
		}
	}
	if err := meta.Anchor(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if res, err := meta.Persist(ctx, "s1", 5, 0, metadata.ManifestRecord{Epoch: 5, RootUID: 1, FirstTimestamp: -1}); err != nil || res.Outcome != metadata.PersistOK {
		t.Fatalf("persist at 5: %+v %v", res, err)
	}
	for _, c := range []struct {
		configured, log, want uint64
		raised                bool
	}{{1, 1, 5, true}, {0, 0, 5, true}, {1, 5, 5, false}, {7, 1, 7, false}, {1, 6, 6, false}} {
		o, err := streamEpoch(ctx, meta, "s1", c.configured, c.log)
		if err != nil || o.Epoch != c.want || o.Stored != 5 || o.raisedByStored() != c.raised {
			t.Fatalf("stored 5, setting %d, log %d: %+v %v; want %d (raised by the stored epoch: %t)", c.configured, c.log, o, err, c.want, c.raised)
		}
	}

	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
	defer dcancel()
	if o, err := streamEpoch(dctx, meta, "s1", 1, 1); err == nil || !strings.Contains(err.Error(), "stream s1") {
		t.Fatalf("etcd away: %+v %v, want an error naming the stream", o, err)
	}
}
