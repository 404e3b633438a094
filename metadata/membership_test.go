package metadata_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
)

// nextMember waits for the next membership event (no sleeping: the channel is the event).
func nextMember(t *testing.T, ctx context.Context, ch <-chan metadata.MemberEvent) metadata.MemberEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("member events closed early")
		}
		return ev
	case <-ctx.Done():
		t.Fatalf("no member event: %v", ctx.Err())
	}
	return metadata.MemberEvent{}
}

func expectMember(t *testing.T, ctx context.Context, ch <-chan metadata.MemberEvent, kind metadata.MemberEventKind, m metadata.Member) {
	t.Helper()
	ev := nextMember(t, ctx, ch)
	if ev.Kind != kind || ev.Member != m || ev.Err != nil {
		t.Fatalf("member event %v %+v (err %v), want %v %+v", ev.Kind, ev.Member, ev.Err, kind, m)
	}
}

func register(t *testing.T, ctx context.Context, s *metadata.Store, m metadata.Member, ttl time.Duration) *metadata.Registration {
	t.Helper()
	r, err := s.Register(ctx, m, ttl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

func TestMembersJoinAndLeave(t *testing.T) {
	e := etcdtest.Start(t)
	s := etcdtest.Store(t, e)
	ctx := testCtx(t, 20*time.Second)
	a := metadata.Member{Node: "a", Address: "127.0.0.1:7001"}
	b := metadata.Member{Node: "b", Address: "127.0.0.1:7002"}
	register(t, ctx, s, a, 5*time.Second)

	wctx, stop := context.WithCancel(ctx)
	initial, events, err := s.WatchMembers(wctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(initial, []metadata.Member{a}) {
		t.Fatalf("initial members %+v, want [a]", initial)
	}
	rb := register(t, ctx, s, b, 5*time.Second)
	expectMember(t, ctx, events, metadata.MemberJoined, b)
	if err := rb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	expectMember(t, ctx, events, metadata.MemberLeft, b)
	if err := rb.Close(ctx); err != nil {
		t.Fatalf("second close: %v", err)
	}
	// Registering the same node again (a restart) takes the key over, new address included.
	b2 := metadata.Member{Node: "b", Address: "127.0.0.1:7003"}
	register(t, ctx, s, b2, 5*time.Second)
	expectMember(t, ctx, events, metadata.MemberJoined, b2)

	again, _, err := s.WatchMembers(wctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again, []metadata.Member{a, b2}) {
		t.Fatalf("members %+v, want [a b2]", again)
	}
	stop()
	for range events { // the channel closes once its context is done
	}
}

// TestLeaseExpiryRemovesNode: a node that dies without deregistering (its client is gone,
// so nothing keeps the lease alive and nothing revokes it) leaves within the lease TTL.
func TestLeaseExpiryRemovesNode(t *testing.T) {
	e := etcdtest.Start(t)
	s := etcdtest.Store(t, e)
	ctx := testCtx(t, 20*time.Second)
	_, events, err := s.WatchMembers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nodeCli, err := metadata.NewClient(ctx, metadata.ClientConfig{Endpoints: e.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	const ttl = time.Second // the minimum etcd grants with the test member's ticks
	n := metadata.Member{Node: "doomed", Address: "127.0.0.1:7009"}
	if _, err := metadata.NewStore(nodeCli, s.Prefix()).Register(ctx, n, ttl); err != nil {
		t.Fatal(err)
	}
	expectMember(t, ctx, events, metadata.MemberJoined, n)
	nodeCli.Close() // the node dies
	died := time.Now()
	expectMember(t, ctx, events, metadata.MemberLeft, n)
	// The lease has at most ttl left when the last keepalive landed; etcd's lessor checks
	// for expired leases every 500 ms. The bound is generous for a loaded 2-core machine.
	if waited := time.Since(died); waited > ttl+2*time.Second {
		t.Fatalf("node left %v after dying, lease TTL %v", waited, ttl)
	}
}

// TestRegistrationSurvivesLostLease: if the lease is lost while the node is up (revoked, or
// expired during a long partition), the registration puts the node back under a new lease.
func TestRegistrationSurvivesLostLease(t *testing.T) {
	e := etcdtest.Start(t)
	s := etcdtest.Store(t, e)
	ctx := testCtx(t, 20*time.Second)
	_, events, err := s.WatchMembers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := metadata.Member{Node: "phoenix", Address: "[::1]:7010"}
	r := register(t, ctx, s, m, 2*time.Second)
	expectMember(t, ctx, events, metadata.MemberJoined, m)
	old := r.LeaseID()
	if _, err := e.Client().Revoke(ctx, old); err != nil {
		t.Fatal(err)
	}
	expectMember(t, ctx, events, metadata.MemberLeft, m)
	expectMember(t, ctx, events, metadata.MemberJoined, m)
	resp, err := e.Client().Get(ctx, metadata.MemberKey(s.Prefix(), m.Node))
	if err != nil || len(resp.Kvs) != 1 || clientv3.LeaseID(resp.Kvs[0].Lease) == old {
		t.Fatalf("after re-registering: %v %v, want the key under a new lease (old %x)", resp, err, old)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	expectMember(t, ctx, events, metadata.MemberLeft, m)
}

// TestWatchMembersResyncsAfterCompaction: a watcher that fell behind a compaction lists the
// members again and reports exactly the difference.
func TestWatchMembersResyncsAfterCompaction(t *testing.T) {
	e := etcdtest.Start(t)
	s := etcdtest.Store(t, e)
	ctx := testCtx(t, 20*time.Second)
	a := metadata.Member{Node: "a", Address: "127.0.0.1:1"}
	b := metadata.Member{Node: "b", Address: "127.0.0.1:2"}
	c := metadata.Member{Node: "c", Address: "127.0.0.1:3"}
	register(t, ctx, s, a, 5*time.Second)
	rb := register(t, ctx, s, b, 5*time.Second)
	resp, err := e.Client().Get(ctx, "any")
	if err != nil {
		t.Fatal(err)
	}
	behind := resp.Header.Revision // the watcher has seen a and b up to here
	if err := rb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	register(t, ctx, s, c, 5*time.Second)
	// d comes and goes: a replay of the history would report it, a resync cannot.
	d := metadata.Member{Node: "d", Address: "127.0.0.1:4"}
	if err := register(t, ctx, s, d, 5*time.Second).Close(ctx); err != nil {
		t.Fatal(err)
	}
	start, err := metadata.StaleMemberWatch(ctx, s, behind)
	if err != nil {
		t.Fatal(err)
	}
	resp, err = e.Client().Get(ctx, "any")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client().Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	events := start()
	marker := metadata.Member{Node: "marker", Address: "127.0.0.1:5"}
	register(t, ctx, s, marker, 5*time.Second)
	var got []metadata.MemberEvent
	for ev := nextMember(t, ctx, events); ev.Member != marker; ev = nextMember(t, ctx, events) {
		got = append(got, ev)
	}
	slices.SortFunc(got, func(x, y metadata.MemberEvent) int { return strings.Compare(x.Member.Node, y.Member.Node) })
	want := []metadata.MemberEvent{{Kind: metadata.MemberLeft, Member: b}, {Kind: metadata.MemberJoined, Member: c}}
	if !slices.Equal(got, want) {
		t.Fatalf("after compaction: %+v, want %+v", got, want)
	}
}

func TestGarbageMemberRecord(t *testing.T) {
	e := etcdtest.Start(t)
	s := etcdtest.Store(t, e)
	ctx := testCtx(t, 20*time.Second)
	if _, err := e.Client().Put(ctx, metadata.MemberKey(s.Prefix(), "junk"), "{not json"); err != nil {
		t.Fatal(err)
	}
	initial, events, err := s.WatchMembers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(initial) != 0 {
		t.Fatalf("garbage listed as a member: %+v", initial)
	}
	ev := nextMember(t, ctx, events)
	if !errors.Is(ev.Err, metadata.ErrCorruptRecord) || ev.Member.Node != "junk" || !strings.Contains(ev.Err.Error(), metadata.MemberKey(s.Prefix(), "junk")) {
		t.Fatalf("garbage member event %+v, want a corrupt record error naming the key", ev)
	}
}

func TestRegisterBadInput(t *testing.T) {
	e := etcdtest.Start(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	cli.Close() // refused before any I/O
	s := metadata.NewStore(cli, "")
	ctx := testCtx(t, 5*time.Second)
	for _, tc := range []struct {
		m   metadata.Member
		ttl time.Duration
	}{
		{metadata.Member{Node: "", Address: "127.0.0.1:1"}, time.Second},
		{metadata.Member{Node: "a/b", Address: "127.0.0.1:1"}, time.Second},
		{metadata.Member{Node: "a", Address: "127.0.0.1"}, time.Second},
		{metadata.Member{Node: "a", Address: ":80"}, time.Second},
		{metadata.Member{Node: "a", Address: "h:0"}, time.Second},
		{metadata.Member{Node: "a", Address: "h:http"}, time.Second},
		{metadata.Member{Node: "a", Address: "h:1"}, 0},
		{metadata.Member{Node: "a", Address: "h:1"}, -time.Second},
	} {
		if _, err := s.Register(ctx, tc.m, tc.ttl); !errors.Is(err, metadata.ErrInvalidArgument) {
			t.Errorf("Register(%+v, %v) = %v, want ErrInvalidArgument", tc.m, tc.ttl, err)
		}
	}
}
