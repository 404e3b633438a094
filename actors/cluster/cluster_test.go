package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/actors/internal/actortest"
	"github.com/streamtier/streamtier/actors/readercore"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/messages"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// clusterEnv is one test's cluster node: its listener (started first), a real etcd, a real
// S3 server, and the node's local logs written by the load generator.
type clusterEnv struct {
	t     *testing.T
	lis   *Listener
	meta  *metadata.Store
	store *s3io.Store
	dir   string
	load  loadgen.Config
	node  *Cluster
	mu    sync.Mutex
	logs  map[string]*segments.Log
}

func newClusterEnv(t *testing.T) *clusterEnv {
	t.Helper()
	e := &clusterEnv{t: t, dir: t.TempDir(), logs: map[string]*segments.Log{},
		load: loadgen.Config{Seed: 7, MinDataBytes: 500, MaxDataBytes: 1500}}
	var err error
	if e.lis, err = Listen("127.0.0.1:0", clusterTestLogger(t)); err != nil {
		t.Fatal(err)
	}
	etcd := etcdtest.Start(t)
	e.meta = etcdtest.Store(t, etcd)
	srv := s3test.Start(t, s3test.Options{})
	if e.store, err = s3io.NewStore(context.Background(), srv.NewBucket(t)); err != nil {
		t.Fatal(err)
	}
	return e
}

var clusterTestLogger = actortest.ConsoleLogger

// log returns the node's log of stream, created on first use.
func (e *clusterEnv) log(stream string) (*segments.Log, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if lg := e.logs[stream]; lg != nil {
		return lg, nil
	}
	lg, err := segments.Open(filepath.Join(e.dir, stream), segments.Options{MaxSegmentBytes: 32 << 10})
	if err != nil {
		return nil, err
	}
	e.logs[stream] = lg
	e.t.Cleanup(func() { lg.Close() })
	return lg, nil
}

// write appends chunks of the load to stream's log and returns its next offset.
func (e *clusterEnv) write(stream string, chunks int64) uint64 {
	e.t.Helper()
	lg, err := e.log(stream)
	if err != nil {
		e.t.Fatal(err)
	}
	g, err := loadgen.New(e.load)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := loadgen.Write(context.Background(), lg, g, loadgen.Limit{Chunks: chunks}, loadgen.WriteOptions{Commit: true}); err != nil {
		e.t.Fatal(err)
	}
	return lg.NextOffset()
}

// start starts the cluster node n1 on the listener.
func (e *clusterEnv) start() *Cluster {
	e.t.Helper()
	cfg := actors.Config{NodeID: "n1", Logger: clusterTestLogger(e.t), Stream: actors.StreamOptions{
		FragmentTargetSize: 8 << 10, PersistThreshold: 2, PersistInterval: 100 * time.Millisecond,
	}}
	cc := Config{
		MemberTTL: 2 * time.Second, ResyncRetry: 300 * time.Millisecond, TickInterval: 50 * time.Millisecond,
		OpenStream: func(stream string) (actors.StreamSpec, error) {
			lg, err := e.log(stream)
			return actors.StreamSpec{Log: lg}, err
		},
	}
	c, err := Start(context.Background(), e.lis, cfg, cc, e.store, e.meta)
	if err != nil {
		e.t.Fatalf("start cluster: %v", err)
	}
	e.node = c
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			e.t.Errorf("stop cluster: %v", err)
		}
	})
	return c
}

func (e *clusterEnv) place(p metadata.Placement) {
	e.t.Helper()
	if err := e.meta.PutPlacement(context.Background(), p); err != nil {
		e.t.Fatal(err)
	}
}

var eventually = actortest.Eventually

// persistTail cuts and persists everything below next on the writer node.
func persistTail(t *testing.T, c *Cluster, stream string, next uint64) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("%s persisted up to %d on %s", stream, next, c.self), func() (bool, string) {
		_ = c.Node().ForceCut(stream)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		err := c.Node().AwaitOffset(ctx, stream, next-1)
		return err == nil, fmt.Sprint(err)
	})
}

// TestClusterFenceStopsDeposedWriter: when a higher epoch persists the stream while this
// node's writer runs (it missed the placement change), the writer is stopped.
func TestClusterFenceStopsDeposedWriter(t *testing.T) {
	if !isolated(t) {
		return
	}
	e := newClusterEnv(t)
	n1 := e.start()
	next := e.write("s1", 100)
	e.place(metadata.Placement{Stream: "s1", Writer: "n1", Epoch: 1})
	persistTail(t, n1, "s1", next)
	rec, rev, _, err := e.meta.ReadManifest(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	// Another writer at epoch 5 persists (same manifest, its own version 3 root: a child of
	// the record at the next seq) without any placement.
	body, err := e.store.GetObject(context.Background(), rec.RootKey(manifest.DefaultKeyPrefix, "s1"))
	if err != nil {
		t.Fatal(err)
	}
	obj, err := manifest.DecodeRootObject(body)
	if err != nil {
		t.Fatal(err)
	}
	lin := manifest.Lineage{Seq: rec.Seq + 1, Epoch: 5, UID: 77, ParentSeq: rec.Seq, ParentUID: rec.RootUID}
	if err := e.store.PutObjectIfAbsent(context.Background(), manifest.SeqRootKey(manifest.DefaultKeyPrefix, "s1", lin.Seq), manifest.EncodeRootV3(lin, obj.Manifest)); err != nil {
		t.Fatal(err)
	}
	rec.Seq, rec.Epoch, rec.RootUID = lin.Seq, 5, 77
	if res, err := e.meta.Persist(context.Background(), "s1", 5, rev, rec); err != nil || res.Outcome != metadata.PersistOK {
		t.Fatalf("persist at epoch 5: %+v %v", res, err)
	}
	eventually(t, 10*time.Second, "writer fenced", func() (bool, string) {
		s := n1.Status()
		return s.Fenced["s1"] == 5 && len(s.Writers) == 0, fmt.Sprintf("%+v", s)
	})
	if _, err := n1.Node().Status(context.Background(), "s1"); !errors.Is(err, actors.ErrUnknownStream) {
		t.Fatalf("fenced writer still runs: %v", err)
	}
	persists := n1.Node().Metrics().Persists.Load()
	e.write("s1", 100)
	// The same placement again (a replay) does not restart a fenced writer.
	e.place(metadata.Placement{Stream: "s1", Writer: "n1", Epoch: 1})
	time.Sleep(300 * time.Millisecond) // nothing to await: the point is that nothing happens
	if got := n1.Node().Metrics().Persists.Load(); got != persists || len(n1.Status().Writers) != 0 {
		t.Fatalf("fenced writer persisted again (%d -> %d) or restarted (%v)", persists, got, n1.Status().Writers)
	}
}

// TestClusterUnknownMessageTypeDoesNotCrash sends a node, over protoactor's own wire
// protocol, envelopes that make an unguarded endpoint reader panic (unregistered type, type,
// target and sender indices out of range, another serializer) and one it does not accept
// (a registered protobuf type that is not a cluster message). The node lives on (a panic in
// its gRPC handler would kill this test process) and accepts a good message afterwards on
// the same stream.
func TestClusterUnknownMessageTypeDoesNotCrash(t *testing.T) {
	if !isolated(t) {
		return
	}
	e := newClusterEnv(t)
	n1 := e.start()
	conn, err := grpc.NewClient(n1.Address(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := remote.NewRemotingClient(conn).Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectRequest{ConnectRequest: &remote.ConnectRequest{
		ConnectionType: &remote.ConnectRequest_ServerConnection{ServerConnection: &remote.ServerConnection{SystemId: "intruder", Address: "127.0.0.1:1"}},
	}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("connect response: %v", err)
	}
	good, err := proto.Marshal(&messages.RegisterReplica{Stream: "s1", Replica: "n9"})
	if err != nil {
		t.Fatal(err)
	}
	pidBytes, _ := proto.Marshal(&actor.PID{Address: "x", Id: "y"})
	target := []*actor.PID{{Address: n1.Address(), Id: EndpointName}}
	bad := []*remote.MessageBatch{
		{TypeNames: []string{"no.such.Type"}, Targets: target, Envelopes: []*remote.MessageEnvelope{{MessageData: []byte{1, 2, 3}}}},
		{TypeNames: []string{"streamtier.cluster.v1.RegisterReplica"}, Targets: target, Envelopes: []*remote.MessageEnvelope{{TypeId: 5, MessageData: good}}},
		{TypeNames: []string{"streamtier.cluster.v1.RegisterReplica"}, Targets: target, Envelopes: []*remote.MessageEnvelope{{Target: 3, MessageData: good}}},
		{TypeNames: []string{"streamtier.cluster.v1.RegisterReplica"}, Targets: target, Envelopes: []*remote.MessageEnvelope{{Sender: 4, MessageData: good}}},
		{TypeNames: []string{"streamtier.cluster.v1.RegisterReplica"}, Targets: target, Envelopes: []*remote.MessageEnvelope{{SerializerId: 7, MessageData: good}}},
		{TypeNames: []string{"actor.PID"}, Targets: target, Envelopes: []*remote.MessageEnvelope{{MessageData: pidBytes}}},
	}
	for _, b := range bad {
		if err := stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: b}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: &remote.MessageBatch{
		TypeNames: []string{"streamtier.cluster.v1.RegisterReplica"}, Targets: target,
		Envelopes: []*remote.MessageEnvelope{{MessageData: good}},
	}}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "good message after the bad ones", func() (bool, string) {
		s := n1.Stats()
		return s.Received.Load() == 1 && s.Rejected.Load() == int64(len(bad)),
			fmt.Sprintf("received %d, rejected %d (want 1, %d)", s.Received.Load(), s.Rejected.Load(), len(bad))
	})
	if got := n1.Stats().NotWriter.Load(); got != 1 {
		t.Fatalf("the registration reached the endpoint %d times, want 1 (no writer here, so refused)", got)
	}
}

// TestGuardRecoversPanics: a panic in the remote server's stream handler ends that stream
// with an error instead of the process.
func TestGuardRecoversPanics(t *testing.T) {
	var stats TransportStats
	guard := guardStream(&stats, zerolog.Nop())
	err := guard(nil, nil, &grpc.StreamServerInfo{FullMethod: "/remote.Remoting/Receive"}, func(any, grpc.ServerStream) error {
		var m map[string]int
		m["boom"]++ // nil map write: a runtime panic
		return nil
	})
	if err == nil || stats.Recovered.Load() != 1 {
		t.Fatalf("panic not recovered into an error: %v (recovered %d)", err, stats.Recovered.Load())
	}
}

// TestClusterSendToDeadNodeDoesNotBlock: a member whose address accepts no connection
// (protoactor takes about 10 s per message to give up on it) never blocks the sender: the
// calls return at once, its queue fills, and the rest is dropped and counted.
func TestClusterSendToDeadNodeDoesNotBlock(t *testing.T) {
	if !isolated(t) {
		return
	}
	e := newClusterEnv(t)
	n1 := e.start()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	reg, err := e.meta.Register(context.Background(), metadata.Member{Node: "ghost", Address: dead}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close(context.Background())
	eventually(t, 10*time.Second, "ghost member seen", func() (bool, string) {
		return n1.memberAddress("ghost") == dead, fmt.Sprint(n1.Status().Members)
	})
	done := make(chan struct{})
	edits := []manifest.Edit{{At: 0, SetNextOffset: true, NextOffset: 1, Insert: []manifest.Entry{{Size: 1}}, SizeDelta: 1}}
	go func() {
		defer close(done)
		for i := range 5000 {
			root := readercore.RootRef{Seq: uint64(i + 1), Epoch: 1, UID: uint64(i + 1)}
			n1.Broadcast("s1", []string{"ghost"}, edits, root, readercore.RootRef{Seq: uint64(i), Epoch: 1, UID: uint64(i)}, 1)
			n1.Sync("s1", "ghost", manifest.Empty(), root, 1)
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("sends to a dead node blocked the sender")
	}
	if n1.Stats().QueueFull.Load() == 0 {
		t.Fatalf("10000 messages to a dead node all queued: nothing dropped (sent %d)", n1.Stats().Sent.Load())
	}
}

var isolated = actortest.Isolated
