package tests

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/streamtier/streamtier/actors/read"
	"github.com/streamtier/streamtier/admin"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// clusterReadLoad is how long the load of TestClusterReadReplica runs from the world's
// start: long enough for the phases below, short enough for a minute under -race.
const clusterReadLoad = 40 * time.Second

// replicaRead is one reader of TestClusterReadReplica: an HTTP read (the framed stream of
// admin/read.go, served by tests/clusternode through Cluster.OpenReader) followed to the
// target offset, checked item by item against the reference log.
type replicaRead struct {
	name  string
	from  string
	c     *checker
	info  admin.ReadInfo
	first *read.Item
	err   error
	// unavailable counts the opens answered 503 before this one opened.
	unavailable int
}

// TestClusterReadReplica reads stream s1 on a replica node (n2) of a three-node cluster
// while its writer appends and uploads with small fragments, groups, local and remote
// retention: first a read before the replica cache has synced (503, the read is
// unavailable), then readers at first, inside a group, at a timestamp, at next and at last,
// then a writer failover (the writer node killed, the stream moved to n3), then a second
// one that makes the reading node itself the writer, with more readers opened after each.
// Every reader delivers every offset from its start once, in order, byte-identical to the
// load, up to the load's end, across both failovers.
func TestClusterReadReplica(t *testing.T) {
	w := newClusterWorld(t)
	const stream = "s1"
	until := clusterReadLoad.Milliseconds() / clusterLoadInterval.Milliseconds()
	ref, err := segments.Open(filepath.Join(t.TempDir(), "ref"), segments.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ref.Close() })
	g, err := loadgen.New(clusterLoad(stream, w.loadStart))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loadgen.Write(context.Background(), ref, g, loadgen.Limit{Chunks: until}, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
	target := ref.NextOffset()
	extra := []string{"-streams", stream, "-load-chunks", fmt.Sprint(until),
		"-fragment-bytes", "8192", "-segment-bytes", "32768", "-rebalance-threshold", "4",
		"-persist-interval", "200ms", "-retention-bytes", fmt.Sprint(1 << 20)}
	w.place(metadata.Placement{Stream: stream, Writer: "n1", Epoch: 1, Replicas: []string{"n2", "n3"}})

	// n2 alone: its replica cache runs but no writer syncs it.
	n2 := w.startNode("n2", extra...)
	w.waitFor(20*time.Second, "n2 replicates s1", func() (bool, string) {
		st := w.mustStatus("n2")
		_, ok := st.Cluster.Replicas[stream]
		return ok, fmt.Sprintf("replicas %v", st.Cluster.Replicas)
	})
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	cli := admin.Client{Base: "http://" + n2.http, HTTP: hc}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err = cli.Read(ctx, stream, admin.ReadQuery{From: "first"}, nil, func(read.Item) error { return nil })
	var ae *admin.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || !strings.Contains(ae.Message, read.ErrUnavailable.Error()) {
		t.Fatalf("read before the replica cache synced: %v, want HTTP 503 saying %q", err, read.ErrUnavailable)
	}

	w.startNode("n1", extra...)
	w.startNode("n3", extra...)
	var m manifest.Manifest
	var localFirst uint64
	caughtUp := w.caughtUp(stream)
	w.waitFor(40*time.Second, "groups, remote retention and n2's local retention", func() (bool, string) {
		if ok, state := caughtUp(); !ok {
			return false, state
		}
		last, _ := w.latest(stream)
		m = last.m
		localFirst = w.mustStatus("n2").Cluster.Replicas[stream].LocalFirst
		groups := 0
		for _, e := range m.Entries {
			if e.Kind != manifest.KindFragment {
				groups++
			}
		}
		return groups >= 2 && m.FirstOffset > 0 && localFirst > m.FirstOffset+(m.NextOffset-m.FirstOffset)/2,
			fmt.Sprintf("%d entries, %d groups, remote [%d, %d), n2's local first %d", len(m.Entries), groups, m.FirstOffset, m.NextOffset, localFirst)
	})

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		readers []*replicaRead
	)
	defer wg.Wait()
	defer cancel()
	// read opens a reader on n2 and returns once it has opened (its info frame came) or
	// failed; a 503 on opening (the manifest at hand not resolved: while n2 is promoted, its
	// writer resolving) is retried, as a client would.
	startReader := func(name, from string) {
		r := &replicaRead{name: name, from: from, c: newChecker(name, ref)}
		mu.Lock()
		readers = append(readers, r)
		mu.Unlock()
		opened := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.c.close()
			var err error
			for {
				err = cli.Read(ctx, stream, admin.ReadQuery{From: from, To: target, Follow: true},
					func(ri admin.ReadInfo) error { r.info = ri; close(opened); return nil },
					func(it read.Item) error {
						if r.first == nil {
							r.first = &it
						}
						return r.c.item(it)
					})
				var ae *admin.APIError
				if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || ctx.Err() != nil {
					break
				}
				r.unavailable++
				select {
				case <-time.After(100 * time.Millisecond):
				case <-ctx.Done():
				}
			}
			mu.Lock()
			r.err = err
			mu.Unlock()
			if r.first == nil && r.info.Stream == "" {
				close(opened)
			}
		}()
		<-opened
	}
	// Inside the youngest group, at a timestamp in the remote range, and the four others.
	var mid uint64
	for i, e := range m.Entries {
		if e.Kind != manifest.KindFragment {
			end := m.NextOffset
			if i+1 < len(m.Entries) {
				end = m.Entries[i+1].FirstOffset
			}
			mid = e.FirstOffset + (end-e.FirstOffset)/2
		}
	}
	tsChunk := chunkHolding(t, ref, m.FirstOffset+(localFirst-m.FirstOffset)*2/3)
	startReader("first", "first")
	startReader("in-group", fmt.Sprint(mid))
	startReader("timestamp", fmt.Sprintf("@%d", tsChunk.Timestamp))
	startReader("next", "next")
	startReader("last", "last")

	// Failover 1: the writer node dies, n3 writes at epoch 2; n2 stays a replica.
	w.killNode("n1")
	w.place(metadata.Placement{Stream: stream, Writer: "n3", Epoch: 2, Replicas: []string{"n2"}})
	w.waitFor(30*time.Second, "n3 persisted at epoch 2", func() (bool, string) {
		last, _ := w.latest(stream)
		return last.rec.Epoch == 2, fmt.Sprintf("last persist at epoch %d", last.rec.Epoch)
	})
	startReader("first-after-failover", "first")
	startReader("last-after-failover", "last")

	// Failover 2: the reading node becomes the writer at epoch 3; n3 is deposed.
	w.place(metadata.Placement{Stream: stream, Writer: "n2", Epoch: 3, Replicas: []string{"n3"}})
	w.waitFor(30*time.Second, "n2 persisted at epoch 3", func() (bool, string) {
		last, _ := w.latest(stream)
		return last.rec.Epoch == 3, fmt.Sprintf("last persist at epoch %d", last.rec.Epoch)
	})
	startReader("first-on-new-writer", "first")

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Until(time.UnixMilli(w.loadStart).Add(clusterReadLoad + 60*time.Second))):
		cancel()
		<-done
		for _, r := range readers {
			if r.c.prev < target {
				t.Errorf("%s (from %s): at %d of %d a minute after the load ended", r.name, r.from, r.c.prev, target)
			}
		}
		t.FailNow()
	}
	for _, r := range readers {
		t.Logf("%s: from %s starts at %d (attached %v, next at open %d, %d opens unavailable): %d chunks (%d remote, %d local), %d skipped ranges",
			r.name, r.from, r.info.Start, r.info.Attached, r.info.NextAtOpen, r.unavailable, r.c.chunks, r.c.tiers[read.TierRemote], r.c.tiers[read.TierLocal], r.c.skips)
		if r.err != nil {
			t.Errorf("%s: %v", r.name, r.err)
			continue
		}
		if r.first == nil {
			if r.info.Start != target {
				t.Errorf("%s: nothing read from %d, the load ends at %d", r.name, r.info.Start, target)
			}
			continue
		}
		if r.c.prev != target {
			t.Errorf("%s: ended at %d, want %d", r.name, r.c.prev, target)
		}
		f := *r.first
		if f.Offset != r.info.Start && !(f.Kind == read.ItemChunk && f.Offset <= r.info.Start && r.info.Start < f.End) {
			t.Errorf("%s: the first item [%d, %d) does not start at or hold the start %d", r.name, f.Offset, f.End, r.info.Start)
		}
		switch {
		case r.info.Attached != nil: // retention passed the start: where it began is not the test's
		case r.from == "first":
			if r.c.tiers[read.TierRemote] == 0 {
				t.Errorf("%s: no chunk read from the remote tier", r.name)
			}
		case r.from == "last":
			if f.End != r.info.NextAtOpen {
				t.Errorf("%s: first chunk [%d, %d), the committed next was %d", r.name, f.Offset, f.End, r.info.NextAtOpen)
			}
		case r.from == "next":
			if f.Offset != r.info.NextAtOpen {
				t.Errorf("%s: first item at %d, the committed next was %d", r.name, f.Offset, r.info.NextAtOpen)
			}
		case strings.HasPrefix(r.from, "@"):
			if f.Offset != tsChunk.ChunkID {
				t.Errorf("%s: first chunk at %d, the chunk of that timestamp is %d", r.name, f.Offset, tsChunk.ChunkID)
			}
		default:
			if f.Offset > mid || f.End <= mid {
				t.Errorf("%s: first chunk [%d, %d) does not hold %d", r.name, f.Offset, f.End, mid)
			}
		}
	}
}
