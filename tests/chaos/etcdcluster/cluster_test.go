package etcdcluster

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/streamtier/streamtier/metadata"
)

// TestKillAndRestart writes through a three-member cluster while one member is down, then
// stops the whole cluster and starts it again on the same data and ports: every write is
// still there and the same client (same endpoints) reaches it.
func TestKillAndRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, t.TempDir(), Options{Tick: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// A put proposed while the members elect a leader (member 0 may have led) can time out
	// in the server or see the leader change: answers that say "try again" (the node's own
	// classification, metadata.IsRetriable), which the client does not retry for a put. The
	// put is idempotent, so the test tries again.
	put := func(k string) {
		t.Helper()
		pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
		defer pcancel()
		for {
			_, err := cli.Put(pctx, k, k)
			if err == nil {
				return
			}
			if !metadata.IsRetriable(err) || pctx.Err() != nil {
				t.Fatalf("put %s: %v", k, err)
			}
			t.Logf("put %s: %v; again", k, err)
		}
	}
	put("a")
	c.KillMember(0)
	if r := c.Running(); r[0] || !r[1] || !r[2] {
		t.Fatalf("running after killing member 0: %v", r)
	}
	put("b")
	if err := c.StartMember(ctx, 0); err != nil {
		t.Fatal(err)
	}
	// A member started while the others are down cannot be ready: StartMember does not
	// wait for it, StartAll does.
	c.KillMember(1)
	c.StopAll()
	if err := c.StartMember(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if r := c.Running(); !r[1] || r[0] || r[2] {
		t.Fatalf("running after starting member 1 alone: %v", r)
	}
	if err := c.StartAll(ctx); err != nil {
		t.Fatal(err)
	}
	put("c")
	gctx, gcancel := context.WithTimeout(ctx, 20*time.Second)
	defer gcancel()
	resp, err := cli.Get(gctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 3 {
		t.Fatalf("keys after the restarts: %v", resp.Kvs)
	}
}
