package actors

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// deletedEnv is a real etcd and a real S3 server, and a node on them that can be stopped
// and started again on the same backends.
type deletedEnv struct {
	t     *testing.T
	meta  *metadata.Store
	store *s3io.Store
	cfg   Config
	node  *Node
}

func newDeletedEnv(t *testing.T) *deletedEnv {
	t.Helper()
	e := &deletedEnv{t: t, cfg: Config{NodeID: "n1", Logger: clusterTestLogger(t), Stream: StreamOptions{
		FragmentTargetSize: 8 << 10, PersistThreshold: 2, PersistInterval: 100 * time.Millisecond,
	}}}
	e.meta = etcdtest.Store(t, etcdtest.Start(t))
	var err error
	if e.store, err = s3io.NewStore(context.Background(), s3test.Start(t, s3test.Options{}).NewBucket(t)); err != nil {
		t.Fatal(err)
	}
	e.start()
	t.Cleanup(e.stop)
	return e
}

func (e *deletedEnv) start() {
	e.t.Helper()
	n, err := Start(context.Background(), e.cfg, e.store, e.meta)
	if err != nil {
		e.t.Fatalf("start node: %v", err)
	}
	e.node = n
}

func (e *deletedEnv) stop() {
	if e.node == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.node.Stop(ctx); err != nil {
		e.t.Errorf("stop node: %v", err)
	}
	e.node = nil
}

func (e *deletedEnv) handle(stream string) *streamHandle {
	e.t.Helper()
	h, err := e.node.handle(stream)
	if err != nil {
		e.t.Fatal(err)
	}
	return h
}

// traces lists what exists of stream: its etcd records (anchor, manifest, epoch) and the
// objects under its S3 prefix.
func (e *deletedEnv) traces(stream string) []string {
	e.t.Helper()
	ctx := context.Background()
	resp, err := e.meta.Client().Get(ctx, metadata.StreamPrefix(e.meta.Prefix(), stream), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, "etcd "+string(kv.Key))
	}
	err = e.store.List(ctx, manifest.StreamPrefix(manifest.DefaultKeyPrefix, stream), func(o s3io.ObjectInfo) error {
		out = append(out, "s3 "+o.Key)
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// emptyPrefix deletes every object under stream's S3 prefix, as Node.DeleteStream does.
func (e *deletedEnv) emptyPrefix(stream string) {
	e.t.Helper()
	var keys []string
	ctx := context.Background()
	if err := e.store.List(ctx, manifest.StreamPrefix(manifest.DefaultKeyPrefix, stream), func(o s3io.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
	if failed, err := e.store.DeleteObjects(ctx, keys); err != nil || len(failed) > 0 {
		e.t.Fatalf("empty %s: %v (%d failed)", stream, err, len(failed))
	}
}

// persistAll writes chunks to lg and waits until the stream has persisted all of it with
// nothing left in flight: the reader is idle.
func (e *deletedEnv) persistAll(stream string, lg *segments.Log, chunks int64) {
	e.t.Helper()
	g, err := loadgen.New(loadgen.Config{Seed: 3, MinDataBytes: 500, MaxDataBytes: 1500})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := loadgen.Write(context.Background(), lg, g, loadgen.Limit{Chunks: chunks}, loadgen.WriteOptions{Commit: true}); err != nil {
		e.t.Fatal(err)
	}
	next := lg.NextOffset()
	eventually(e.t, 30*time.Second, fmt.Sprintf("%s persisted up to %d and idle", stream, next), func() (bool, string) {
		_ = e.node.ForceCut(stream)
		st, err := e.node.Status(context.Background(), stream)
		c := st.Core
		idle := err == nil && st.Phase == "running" && c.PersistedNext == next && c.InFlight == 0 && c.WaitingRetry == 0 &&
			c.Buffered == 0 && c.UnpersistedEdits == 0 && c.AssemblyBytes == 0 && c.PersistState == "idle"
		return idle, fmt.Sprintf("%+v %v", st, err)
	})
}

// awaitRefusal waits until the stream's reader has stopped for good, or until anything of
// the deleted stream reappears (then it fails), and returns the error a waiter now gets.
func (e *deletedEnv) awaitRefusal(stream, what string) error {
	e.t.Helper()
	eventually(e.t, 30*time.Second, what+": the reader stops, or the deleted stream comes back", func() (bool, string) {
		st, err := e.node.Status(context.Background(), stream)
		traces := e.traces(stream)
		return (err == nil && st.Phase == "stopped") || len(traces) > 0, fmt.Sprintf("status %+v %v", st, err)
	})
	if traces := e.traces(stream); len(traces) > 0 {
		e.t.Fatalf("%s: the deleted stream came back: %s", what, strings.Join(traces, ", "))
	}
	// Once the stream's actors are gone nothing of it can run any more.
	select {
	case <-e.handle(stream).done:
	case <-time.After(30 * time.Second):
		e.t.Fatalf("%s: the stream's actors did not stop", what)
	}
	if traces := e.traces(stream); len(traces) > 0 {
		e.t.Fatalf("%s: the deleted stream came back: %s", what, strings.Join(traces, ", "))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := e.node.AwaitOffset(ctx, stream, 0)
	if !errors.Is(err, ErrStreamStopped) {
		e.t.Fatalf("%s: await on the deleted stream: %v, want ErrStreamStopped", what, err)
	}
	return err
}

// restartReader makes the stream's supervisor restart its reader (as after a crash or a
// reinitialize) and waits until the new incarnation runs.
func (e *deletedEnv) restartReader(stream string) {
	e.t.Helper()
	h := e.handle(stream)
	inc := h.incarnations.Load()
	e.node.root.Send(h.supervisor, restartChild{pid: h.readerPID()})
	eventually(e.t, 10*time.Second, "the reader restarted", func() (bool, string) {
		return h.incarnations.Load() > inc, fmt.Sprintf("incarnation %d", h.incarnations.Load())
	})
}

// TestDeletedStreamNeverComesBack deletes a stream (its etcd records, leaving a tombstone,
// then its S3 prefix) while its reader runs idle, then makes the reader resolve again: the
// supervisor restarts it, then the node is stopped and started with the stream still
// declared. Each time the reader must stop for good and write nothing: no anchor, no
// manifest record, no epoch, no object.
func TestDeletedStreamNeverComesBack(t *testing.T) {
	e := newDeletedEnv(t)
	lg, err := segments.Open(t.TempDir(), segments.Options{MaxSegmentBytes: 32 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	spec := StreamSpec{ID: "gone", Log: lg, Epoch: 1}
	if err := e.node.AddStream(spec); err != nil {
		t.Fatal(err)
	}
	e.persistAll("gone", lg, 200)

	if err := e.meta.DeleteStream(context.Background(), "gone"); err != nil {
		t.Fatal(err)
	}
	e.emptyPrefix("gone")
	if traces := e.traces("gone"); len(traces) > 0 {
		t.Fatalf("left after the deletion: %v", traces)
	}

	e.restartReader("gone")
	err = e.awaitRefusal("gone", "reader restarted by its supervisor")
	if msg := err.Error(); !strings.Contains(msg, "stream gone was deleted at") || !strings.Contains(msg, "use a new stream id") {
		t.Fatalf("waiter's error %q does not say the stream was deleted", msg)
	}

	// A node restart with the stream still declared: AddStream refuses it at once, by name.
	e.stop()
	e.start()
	err = e.node.AddStream(spec)
	if !errors.Is(err, metadata.ErrStreamDeleted) || !strings.Contains(err.Error(), "stream gone was deleted at") || !strings.Contains(err.Error(), "new id") {
		t.Fatalf("AddStream of the deleted stream after a restart: %v", err)
	}
}

// TestDeletedStreamRememberedByHandle: the stream's records are deleted without a tombstone
// (by a tool that predates them); a reader restarted by its supervisor finds no record, but
// the stream's handle knows it persisted, so it is not new: it stalls in metadata_missing
// and writes nothing (format version 3; before, it stopped as deleted).
func TestDeletedStreamRememberedByHandle(t *testing.T) {
	e := newDeletedEnv(t)
	lg, err := segments.Open(t.TempDir(), segments.Options{MaxSegmentBytes: 32 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	if err := e.node.AddStream(StreamSpec{ID: "gone", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	e.persistAll("gone", lg, 200)
	ctx := context.Background()
	if _, err := e.meta.Client().Delete(ctx, metadata.StreamPrefix(e.meta.Prefix(), "gone"), clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	e.emptyPrefix("gone")

	// Format version 3: without a tombstone or a deletion marker a missing record is lost
	// metadata, never "deleted": the restarted reader stalls in metadata_missing (the handle
	// knows the stream persisted, so it is not new either) and writes nothing.
	e.restartReader("gone")
	until(t, 30*time.Second, "the restarted reader stalls in metadata_missing", func() (bool, string) {
		st, err := e.node.Status(ctx, "gone")
		if err != nil {
			return false, err.Error()
		}
		return st.Phase == "metadata_missing" && strings.Contains(st.MetadataReason, "after this writer saw it"), st.Phase + ": " + st.MetadataReason
	})
	if ok, err := e.meta.HasAnchor(ctx, "gone", true); err != nil || ok {
		t.Fatalf("the stalled stream wrote its anchor again (%v)", err)
	}
}
