package metadata_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
)

// TestPersistAcrossEtcdRestart keeps one writer persisting as fast as it can while etcd is
// stopped and restarted on the same data directory and ports, several times. Every attempt
// must end in OK or a retriable error (never a conflict: the writer is alone, so a conflict
// would be its own lost write misread), the retry of an interrupted attempt must report OK,
// and the manifest and epoch must always have been written together.
func TestPersistAcrossEtcdRestart(t *testing.T) {
	cfg := etcdtest.Config(t)
	ctx := testCtx(t, 60*time.Second)
	first, err := metadata.StartEmbeddedConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg = first.Config() // the ports to restart on
	servers := []*metadata.Embedded{first}
	defer func() {
		for _, e := range servers {
			e.Close() // idempotent: only the last one is still running
		}
	}()

	// The writer's own client survives the restarts, as a node's would.
	cli, err := metadata.NewClient(ctx, metadata.ClientConfig{Endpoints: first.Endpoints(), DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	s := metadata.NewStore(cli, "")
	if err := s.Anchor(ctx, "s1"); err != nil {
		t.Fatal(err)
	}

	var (
		oks, retriable, recovered atomic.Int64 // recovered: OK on a retry after an error
		progress                  = make(chan struct{}, 1)
		sawError                  = make(chan struct{}, 1)
		stop                      = make(chan struct{})
		failure                   = make(chan string, 1)
		done                      = make(chan struct{})
		lastRec                   metadata.ManifestRecord
		lastRev                   int64
	)
	signal := func(c chan struct{}) {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	fail := func(msg string) {
		select {
		case failure <- msg:
		default:
		}
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer func() { wcancel(); <-done }() // runs before the servers and the client close
	go func() {                          // the writer: it stops only between two persists, or when wctx ends
		defer close(done)
		for i := uint64(1); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			rec, failed := record(7, i), false
			for {
				if wctx.Err() != nil {
					return
				}
				actx, cancel := context.WithTimeout(wctx, 500*time.Millisecond)
				res, err := s.Persist(actx, "s1", 7, lastRev, rec)
				cancel()
				if err != nil {
					if wctx.Err() != nil {
						return
					}
					if !metadata.IsRetriable(err) {
						fail("error: " + err.Error())
						return
					}
					t.Logf("retriable: %v", err)
					retriable.Add(1)
					failed = true
					signal(sawError)
					continue // retry the same persist
				}
				if res.Outcome != metadata.PersistOK {
					fail("persist " + res.Outcome.String() + " for the only writer")
					return
				}
				if failed {
					recovered.Add(1)
				}
				lastRec, lastRev = rec, res.Revision
				oks.Add(1)
				signal(progress)
				break
			}
		}
	}()
	await := func(c chan struct{}, what string) {
		t.Helper()
		select {
		case <-c:
		case msg := <-failure:
			t.Fatal(msg)
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
	awaitOKs := func(n int64) {
		t.Helper()
		for target := oks.Load() + n; oks.Load() < target; {
			await(progress, "persists")
		}
	}

	const restarts = 3
	for round := range restarts {
		awaitOKs(20)
		select { // forget errors from before this stop (there should be none)
		case <-sawError:
		default:
		}
		if err := servers[len(servers)-1].Close(); err != nil {
			t.Errorf("round %d: close: %v", round, err)
		}
		await(sawError, "the writer to see etcd gone")
		e, err := metadata.StartEmbeddedConfig(ctx, cfg)
		if err != nil {
			t.Fatalf("round %d: restart on %s: %v", round, cfg.ClientAddr, err)
		}
		servers = append(servers, e)
		readBoth(t, ctx, e.Client(), metadata.NewStore(e.Client(), ""), "s1")
	}
	awaitOKs(20)
	close(stop)
	<-done
	wcancel()
	select {
	case msg := <-failure:
		t.Fatal(msg)
	default:
	}
	e := servers[len(servers)-1]
	rec, version, epoch, found := readBoth(t, ctx, e.Client(), metadata.NewStore(e.Client(), ""), "s1")
	if !found || rec != lastRec || version != lastRev || epoch != 7 {
		t.Fatalf("stored %+v v%d epoch %d, want the writer's last %+v v%d", rec, version, epoch, lastRec, lastRev)
	}
	t.Logf("%d persists, %d retriable errors, %d persists OK on a retry", oks.Load(), retriable.Load(), recovered.Load())
}

// TestWatchAndRegistrationAcrossEtcdRestart: a member watcher and a registration on a client
// that outlives an etcd restart keep working: the watcher reports a node that joins after the
// restart, the registered node is still there, and its Close is seen as a leave.
func TestWatchAndRegistrationAcrossEtcdRestart(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	first, err := metadata.StartEmbeddedConfig(ctx, etcdtest.Config(t))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	cli, err := metadata.NewClient(ctx, metadata.ClientConfig{Endpoints: first.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	s := metadata.NewStore(cli, "")
	a := metadata.Member{Node: "a", Address: "127.0.0.1:1"}
	ra, err := s.Register(ctx, a, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	initial, events, err := s.WatchMembers(ctx)
	if err != nil || len(initial) != 1 || initial[0] != a {
		t.Fatalf("initial %+v, %v", initial, err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := metadata.StartEmbeddedConfig(ctx, first.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	b := metadata.Member{Node: "b", Address: "127.0.0.1:2"}
	rb, err := metadata.NewStore(again.Client(), "").Register(ctx, b, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	expectMember(t, ctx, events, metadata.MemberJoined, b)
	if err := ra.Close(ctx); err != nil {
		t.Fatal(err)
	}
	expectMember(t, ctx, events, metadata.MemberLeft, a)
	if err := rb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	expectMember(t, ctx, events, metadata.MemberLeft, b)
	// Close the outside client before the server: etcd waits for open streams otherwise.
	cli.Close()
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
}
