package tests

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// What the cluster test checks: replicas caught up with their writers, histories without
// holes, every byte written in S3 exactly once.

// caughtUp returns a condition for a wait while the load goes on: every stream persisted
// at least once after the wait began (the target: its first such persist the test fetched),
// and its writer's cache and every running replica hold that root or a later one. A strict
// converged would chase a target that moves with every persist (one per fragment under a
// steady write); which roots a replica held is checkHistories' business.
func (w *clusterWorld) caughtUp(streams ...string) func() (bool, string) {
	start := time.Now()
	targets := map[string]persistSeen{}
	return func() (bool, string) {
		for _, s := range streams {
			if _, ok := targets[s]; ok {
				continue
			}
			seen := w.seen(s)
			for i := len(seen) - 1; i >= 0 && seen[i].seen.After(start); i-- {
				if seen[i].fetched {
					targets[s] = seen[i]
					break
				}
			}
			if _, ok := targets[s]; !ok {
				return false, fmt.Sprintf("%s: no persist fetched since the wait began", s)
			}
		}
		sts, err := w.statuses()
		if err != nil {
			return false, err.Error()
		}
		for _, s := range streams {
			tg := targets[s]
			p := w.placement[s]
			if ws, ok := sts[p.Writer]; ok {
				if got := ws.Writers[s]; got.Revision < tg.version || (got.Revision == tg.version && got.Digest != tg.digest) {
					return false, fmt.Sprintf("%s: writer %s caches rev %d digest %x, the target is rev %d digest %x", s, p.Writer, got.Revision, got.Digest, tg.version, tg.digest)
				}
			}
			for _, r := range p.Replicas {
				st, ok := sts[r]
				if !ok {
					continue // not running
				}
				rs := st.Cluster.Replicas[s]
				if !rs.Synced || rs.Seq < tg.rec.Seq || (rs.Seq == tg.rec.Seq && (rs.UID != tg.rec.RootUID || rs.Digest != tg.digest)) {
					return false, fmt.Sprintf("%s: replica %s holds root %d/%016x digest %x (synced %t), the target is root %d/%016x digest %x",
						s, r, rs.Seq, rs.UID, rs.Digest, rs.Synced, tg.rec.Seq, tg.rec.RootUID, tg.digest)
				}
			}
		}
		return true, ""
	}
}

// converged says whether every running replica of every stream holds the writer's latest
// persisted manifest (same revision, same digest), and the writer's cache too: for a wait
// once the load has stopped (caughtUp while it goes on).
func (w *clusterWorld) converged(streams ...string) (bool, string) {
	sts, err := w.statuses()
	if err != nil {
		return false, err.Error()
	}
	for _, s := range streams {
		last, ok := w.latest(s)
		if !ok || !last.fetched {
			return false, fmt.Sprintf("%s: no persist seen yet", s)
		}
		p := w.placement[s]
		if ws, ok := sts[p.Writer]; ok {
			if got := ws.Writers[s]; got.Revision != last.version || got.Digest != last.digest {
				return false, fmt.Sprintf("%s: writer %s caches rev %d, etcd has %d", s, p.Writer, got.Revision, last.version)
			}
		}
		for _, r := range p.Replicas {
			st, ok := sts[r]
			if !ok {
				continue // not running
			}
			rs := st.Cluster.Replicas[s]
			if !rs.Synced || rs.Seq != last.rec.Seq || rs.UID != last.rec.RootUID || rs.Digest != last.digest {
				return false, fmt.Sprintf("%s: replica %s holds root %d/%016x digest %x (synced %t), etcd names root %d/%016x digest %x",
					s, r, rs.Seq, rs.UID, rs.Digest, rs.Synced, last.rec.Seq, last.rec.RootUID, last.digest)
			}
		}
	}
	return true, ""
}

// checkHistories is invariant 14 seen from outside: every manifest a replica held is the
// writer's persisted manifest of that root (seq and uid, as replica messages name it). When
// contiguousAfter names a stream, its replicas held every persisted root after the one of
// that record version, in the order the watch saw them (no broadcast was lost). It returns
// the replication delays (from the test seeing the persist in etcd to the replica taking it).
func (w *clusterWorld) checkHistories(contiguousAfter map[string]int64, dropsBefore map[string]int64) []time.Duration {
	w.t.Helper()
	var lags []time.Duration
	verified, unverifiable := 0, 0
	for name := range w.nodes {
		st := w.mustStatus(name)
		for stream, rs := range st.Cluster.Replicas {
			type rootID struct{ seq, uid uint64 }
			seen := w.seen(stream)
			byRoot := map[rootID]int{} // index into seen
			for i, p := range seen {
				byRoot[rootID{p.rec.Seq, p.rec.RootUID}] = i
			}
			for i, h := range rs.History {
				if h.Seq == 0 && h.UID == 0 { // a sync before the first persist: the empty manifest
					if h.Digest != manifest.Digest(manifest.Empty()) {
						w.t.Fatalf("replica %s of %s held root 0/0 with digest %x, not the empty manifest", name, stream, h.Digest)
					}
					continue
				}
				j, ok := byRoot[rootID{h.Seq, h.UID}]
				if !ok || !seen[j].fetched {
					unverifiable++
					continue
				}
				p := seen[j]
				if p.digest != h.Digest {
					w.t.Fatalf("replica %s of %s held root %d/%016x with digest %x; that persisted root has %x", name, stream, h.Seq, h.UID, h.Digest, p.digest)
				}
				verified++
				lags = append(lags, time.UnixMilli(h.At).Sub(p.seen))
				if from, ok := contiguousAfter[stream]; ok && i > 0 {
					prev, known := byRoot[rootID{rs.History[i-1].Seq, rs.History[i-1].UID}]
					if known && seen[prev].version >= from && j != prev+1 {
						writer := w.placement[stream].Writer
						if w.transportDrops()[writer] > dropsBefore[writer] {
							// The writer's transport dropped messages (a member's lease lapsed
							// under load: no route; a peer's queue full): the replica's
							// resync on the gap is the protocol working, not a lost persist.
							w.t.Logf("replica %s of %s went from root %d to %d after %s's transport dropped messages",
								name, stream, rs.History[i-1].Seq, h.Seq, writer)
							continue
						}
						w.t.Fatalf("replica %s of %s went from root %d/%016x to %d/%016x without a fault: a persist was not replicated (replica counters %+v; writer %s transport %v)",
							name, stream, rs.History[i-1].Seq, rs.History[i-1].UID, h.Seq, h.UID, rs.Counters, writer, w.mustStatus(writer).Transport)
					}
				}
			}
		}
	}
	if verified == 0 || unverifiable > verified/10 {
		w.t.Fatalf("replica histories: %d states verified against persisted roots, %d not verifiable", verified, unverifiable)
	}
	return lags
}

// transportDrops is, per running node, the cluster messages its transport dropped without
// an injected fault: no route to the peer (not a member, or its lease lapsed) or its queue full.
func (w *clusterWorld) transportDrops() map[string]int64 {
	w.t.Helper()
	sts, err := w.statuses()
	if err != nil {
		w.t.Fatal(err)
	}
	drops := map[string]int64{}
	for n, st := range sts {
		drops[n] = st.Transport["noRoute"] + st.Transport["queueFull"]
	}
	return drops
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(int(float64(len(s))*q), len(s)-1)]
}

// waitPersists waits until every stream has persisted n more times than it had.
func (w *clusterWorld) waitPersists(n int, d time.Duration, streams ...string) {
	w.t.Helper()
	base := map[string]int{}
	for _, s := range streams {
		base[s] = len(w.seen(s))
	}
	w.waitFor(d, fmt.Sprintf("%d more persists of %v", n, streams), func() (bool, string) {
		for _, s := range streams {
			if got := len(w.seen(s)) - base[s]; got < n {
				return false, fmt.Sprintf("%s persisted %d times", s, got)
			}
		}
		return true, ""
	})
}

// fetcher reads group objects of stream from S3.
func (w *clusterWorld) fetcher(stream string) manifest.GroupFetcher {
	return func(e manifest.Entry) ([]manifest.Entry, error) {
		key, err := w.store.LocateEntry(context.Background(), manifest.DefaultKeyPrefix, stream, e)
		if err != nil {
			return nil, err
		}
		body, err := w.store.GetObject(context.Background(), key)
		if err != nil {
			return nil, err
		}
		_, children, err := manifest.DecodeGroup(body)
		return children, err
	}
}

// verifyStream checks that m covers every offset the load wrote ([0, next)), in fragments
// that follow each other exactly and hold the reference log's chunks byte for byte.
func (w *clusterWorld) verifyStream(stream string, m manifest.Manifest, chunks int64) {
	t := w.t
	t.Helper()
	ref, err := segments.Open(filepath.Join(t.TempDir(), stream), segments.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	g, err := loadgen.New(clusterLoad(stream, w.loadStart))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loadgen.Write(context.Background(), ref, g, loadgen.Limit{Chunks: chunks}, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
	if m.FirstOffset != 0 || m.NextOffset != ref.NextOffset() {
		t.Fatalf("%s: remote tier [%d,%d), the load wrote [0,%d)", stream, m.FirstOffset, m.NextOffset, ref.NextOffset())
	}
	fetch := w.fetcher(stream)
	if err := manifest.CheckTree(m, fetch); err != nil {
		t.Fatalf("%s: %v", stream, err)
	}
	rd, err := ref.NewReader(0)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	it := manifest.Iterate(m, 0, fetch)
	next := uint64(0)
	for {
		fr, ok, err := it.Next()
		if err != nil {
			t.Fatalf("%s: %v", stream, err)
		}
		if !ok {
			break
		}
		if fr.Entry.FirstOffset != next {
			t.Fatalf("%s: fragment at %d, the previous one ends at %d", stream, fr.Entry.FirstOffset, next)
		}
		key, err := w.store.LocateEntry(context.Background(), manifest.DefaultKeyPrefix, stream, fr.Entry)
		if err != nil {
			t.Fatalf("%s: fragment at %d: %v", stream, fr.Entry.FirstOffset, err)
		}
		obj, err := w.store.ReadFragment(context.Background(), key)
		if err != nil {
			t.Fatalf("%s: fragment at %d: %v", stream, fr.Entry.FirstOffset, err)
		}
		for _, ch := range obj.Layout.Chunks {
			h, loc, err := rd.Next()
			if err != nil {
				t.Fatalf("%s: reference chunk after %d: %v", stream, next, err)
			}
			want, _, err := ref.ReadChunk(loc)
			if err != nil {
				t.Fatal(err)
			}
			if h.ChunkID != ch.Header.ChunkID || !bytes.Equal(obj.Bytes[ch.Position:ch.Position+int64(len(want))], want) {
				t.Fatalf("%s: fragment at %d: chunk %d differs from the load's chunk %d", stream, fr.Entry.FirstOffset, ch.Header.ChunkID, h.ChunkID)
			}
			next = h.NextID()
		}
		if next != fr.End {
			t.Fatalf("%s: fragment at %d ends at %d, the manifest says %d", stream, fr.Entry.FirstOffset, next, fr.End)
		}
	}
	if next != m.NextOffset {
		t.Fatalf("%s: fragments end at %d, next offset %d", stream, next, m.NextOffset)
	}
}
