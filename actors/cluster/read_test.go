package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/streamtier/streamtier/actors/read"
	"github.com/streamtier/streamtier/messages"
	"github.com/streamtier/streamtier/metadata"
)

// TestClusterReaderFollowsPromotion: a reader opened on a replica cache goes on reading
// after the node is promoted to writer. It is opened from the first offset while the
// replica holds an old manifest; then the node writes the stream at a higher epoch, uploads
// much more and local retention deletes the local log well past that old manifest's end.
// The reader must take the writer's manifest from then on: tied to the replica cache it
// opened with (stopped, its snapshot frozen), it would reach the old end, find the local
// log gone there and wait forever for that manifest to grow.
func TestClusterReaderFollowsPromotion(t *testing.T) {
	if !isolated(t) {
		return
	}
	e := newClusterEnv(t)
	n1 := e.start()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// Epoch 1: n1 writes and persists a first part.
	next1 := e.write("s1", 200)
	e.place(metadata.Placement{Stream: "s1", Writer: "n1", Epoch: 1})
	persistTail(t, n1, "s1", next1)
	p1, ok := n1.Node().Cached("s1")
	if !ok {
		t.Fatal("no cached manifest after the persist")
	}

	// Epoch 2 names n2 (not running): n1 becomes a replica; its cache takes the sync a
	// writer would send (the persisted manifest of epoch 1, named by its root's seq and
	// uid), delivered to the cluster endpoint as the message off the wire.
	e.place(metadata.Placement{Stream: "s1", Writer: "n2", Epoch: 2, Replicas: []string{"n1"}})
	eventually(t, 10*time.Second, "n1 a replica of s1", func() (bool, string) {
		st := n1.Status()
		_, replica := st.Replicas["s1"]
		return replica && len(st.Writers) == 0, fmt.Sprintf("%+v", st)
	})
	eventually(t, 10*time.Second, "replica cache synced", func() (bool, string) {
		n1.root.Send(actor.NewPID(n1.root.ActorSystem().Address(), EndpointName), &messages.ManifestSync{Stream: "s1", Writer: "n2",
			RootSeq: p1.Seq, RootUid: p1.UID, Epoch: 2, Manifest: messages.FromManifest(p1.Manifest)})
		_, _, ok := n1.ReplicaManifest("s1")
		return ok, "not synced"
	})
	if p, epoch, _ := n1.ReplicaManifest("s1"); p.Seq != p1.Seq || p.UID != p1.UID || p.Seq == 0 || epoch != 2 || !p.Manifest.Equal(p1.Manifest) {
		t.Fatalf("replica holds root %d/%d at epoch %d, synced root %d/%d at epoch 2", p.Seq, p.UID, epoch, p1.Seq, p1.UID)
	}
	r, err := n1.OpenReader(ctx, "s1", read.FromFirst())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Start != p1.Manifest.FirstOffset {
		t.Fatalf("reader starts at %d, the replica's manifest at %d", r.Start, p1.Manifest.FirstOffset)
	}

	// Epoch 3: n1 writes again, uploads much more; local retention passes next1.
	e.place(metadata.Placement{Stream: "s1", Writer: "n1", Epoch: 3})
	eventually(t, 10*time.Second, "n1 the writer of s1 at epoch 3", func() (bool, string) {
		st := n1.Status()
		return st.Writers["s1"] == 3, fmt.Sprintf("%+v", st.Writers)
	})
	next3 := e.write("s1", 600)
	persistTail(t, n1, "s1", next3)
	lg, _ := e.log("s1")
	eventually(t, 20*time.Second, "local retention past the old manifest's end", func() (bool, string) {
		return lg.FirstOffset() > next1, fmt.Sprintf("local first %d, old end %d", lg.FirstOffset(), next1)
	})

	// The reader reads everything, in order, to the end.
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	defer rcancel()
	pos := r.Start
	for pos < next3 {
		it, err := r.Next(rctx)
		if err != nil {
			t.Fatalf("reader at %d (the old manifest ends at %d, the local log starts at %d, the stream at %d): %v",
				r.Position(), next1, lg.FirstOffset(), next3, err)
		}
		if it.Offset != pos || it.Kind != read.ItemChunk {
			t.Fatalf("%s [%d, %d) where %d was next", it.Kind, it.Offset, it.End, pos)
		}
		pos = it.End
	}
}
