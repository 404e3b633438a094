package tests

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
)

// TestClusterReplication runs the replica protocol across three node processes through
// steady writing, dropped and reordered broadcasts, a replica node killed and restarted,
// the writer node killed and its streams moved to other nodes at epoch + 1 (the old writer
// revived at its old epoch never persists again), and a partition healed; at the end every
// byte written is in S3 exactly once and every replica holds its writer's last manifest.
func TestClusterReplication(t *testing.T) {
	w := newClusterWorld(t)
	// Writers spread over the nodes; every other node replicates.
	for i, s := range clusterStreams {
		writer := clusterNodes[i%3]
		var replicas []string
		for _, n := range clusterNodes {
			if n != writer {
				replicas = append(replicas, n)
			}
		}
		w.place(metadata.Placement{Stream: s, Writer: writer, Epoch: 1, Replicas: replicas})
	}
	for _, n := range clusterNodes {
		w.startNode(n)
	}
	figures := map[string]string{}
	// Each phase builds on the one before: stop at the first that fails.
	phase := func(name string, f func(t *testing.T)) {
		if t.Failed() {
			return
		}
		t.Run(name, func(t *testing.T) {
			w.t = t
			f(t)
		})
		w.t = t
	}

	phase("steady", func(t *testing.T) {
		// Once every replica has caught up with the start, each persist reaches each replica.
		w.waitFor(30*time.Second, "replicas synced at start", w.caughtUp(clusterStreams...))
		from := map[string]int64{}
		for _, s := range clusterStreams {
			last, _ := w.latest(s)
			from[s] = last.version
		}
		drops := w.transportDrops()
		w.waitPersists(6, 60*time.Second, clusterStreams...)
		took := w.waitFor(20*time.Second, "replicas converged", w.caughtUp(clusterStreams...))
		lags := w.checkHistories(from, drops)
		figures["steady replication delay p50/p99"] = fmt.Sprintf("%s / %s over %d persists", quantile(lags, 0.5), quantile(lags, 0.99), len(lags))
		figures["steady convergence wait"] = took.String()
		// Local retention on replicas follows the persisted next offset.
		w.waitFor(20*time.Second, "replica local retention", func() (bool, string) {
			for _, n := range clusterNodes {
				st := w.mustStatus(n)
				for s, rs := range st.Cluster.Replicas {
					if rs.LocalSegmentsDeleted == 0 || rs.LocalFirst == 0 || rs.LocalFirst > rs.NextOffset {
						return false, fmt.Sprintf("%s on %s: deleted %d, local first %d, replica next %d", s, n, rs.LocalSegmentsDeleted, rs.LocalFirst, rs.NextOffset)
					}
					if g := st.Retention[s]; g.Overdue > 0 {
						return false, fmt.Sprintf("%s on %s: %d segments wholly below %d not deleted", s, n, g.Overdue, g.PersistedNext)
					}
				}
			}
			return true, ""
		})
	})

	phase("drop-and-reorder", func(t *testing.T) {
		for _, n := range clusterNodes {
			w.setFaults(n, 30, 30, false)
		}
		w.waitPersists(6, 60*time.Second, clusterStreams...)
		for _, n := range clusterNodes {
			w.setFaults(n, 0, 0, false)
		}
		cleared := time.Now()
		w.waitFor(30*time.Second, "replicas converged after faults", w.caughtUp(clusterStreams...))
		figures["convergence after drop/reorder stops"] = time.Since(cleared).Round(time.Millisecond).String()
		w.checkHistories(nil, nil)
		var gaps, resyncs, dropped, reordered uint64
		for _, n := range clusterNodes {
			st := w.mustStatus(n)
			for _, rs := range st.Cluster.Replicas {
				gaps += rs.Counters.Gaps
				resyncs += rs.Counters.ResyncRequests
			}
			dropped += uint64(st.Transport["faultDropped"])
			reordered += uint64(st.Transport["reordered"])
		}
		if gaps == 0 || resyncs == 0 || dropped == 0 || reordered == 0 {
			t.Fatalf("faults left no trace: gaps %d, resync requests %d, dropped %d, reordered %d", gaps, resyncs, dropped, reordered)
		}
		figures["drop/reorder counters"] = fmt.Sprintf("dropped %d, reordered %d, gaps seen %d, resync requests %d", dropped, reordered, gaps, resyncs)
	})

	phase("kill-replica-node", func(t *testing.T) {
		w.killNode("n3")
		others := []string{"s1", "s2", "s4", "s5"} // s3's writer was n3
		w.waitPersists(4, 60*time.Second, others...)
		p := w.startNode("n3")
		took := w.waitFor(30*time.Second, "restarted node converged", w.caughtUp(clusterStreams...))
		figures["restarted replica node: ready to converged"] = took.Round(time.Millisecond).String()
		figures["restarted replica node: process start to converged"] = time.Since(p.started).Round(time.Millisecond).String()
		st := w.mustStatus("n3")
		for s, rs := range st.Cluster.Replicas {
			if rs.Counters.Registrations == 0 || rs.Counters.SyncsApplied == 0 {
				t.Fatalf("%s on the restarted n3: registrations %d, syncs %d", s, rs.Counters.Registrations, rs.Counters.SyncsApplied)
			}
		}
		w.waitPersists(2, 30*time.Second, "s3") // its own stream resumed too
	})

	phase("kill-writer-node", func(t *testing.T) {
		before := map[string]persistSeen{}
		w.killNode("n1") // writer of s1 and s4
		moves := map[string]string{"s1": "n2", "s4": "n3"}
		for s := range moves {
			last, _ := w.latest(s)
			before[s] = last
		}
		for s, to := range moves {
			var replicas []string
			for _, n := range clusterNodes {
				if n != to {
					replicas = append(replicas, n)
				}
			}
			w.place(metadata.Placement{Stream: s, Writer: to, Epoch: 2, Replicas: replicas})
		}
		took := w.waitFor(30*time.Second, "new writers persisted at epoch 2", func() (bool, string) {
			for s := range moves {
				last, _ := w.latest(s)
				if last.rec.Epoch != 2 {
					return false, fmt.Sprintf("%s: last persist at epoch %d", s, last.rec.Epoch)
				}
			}
			return true, ""
		})
		figures["failover: placement moved to first persist at epoch 2"] = took.Round(time.Millisecond).String()
		// The new writers continued from the persisted manifest: the old entries are a prefix.
		// The killed writer's last persists may reach the test's watch after the kill (it
		// persists once per fragment): the first persist at epoch 2 must extend the last one
		// before it, whenever the watch delivered that.
		for s := range moves {
			old := before[s]
			for _, p := range w.seen(s) {
				if p.version <= old.version || !p.fetched {
					continue
				}
				if p.rec.Epoch == 1 {
					old = p
					continue
				}
				if p.rec.Epoch != 2 || len(p.m.Entries) < len(old.m.Entries) || p.m.NextOffset < old.m.NextOffset {
					t.Fatalf("%s: first persist after the move (version %d, epoch %d, next %d) does not extend version %d (next %d)",
						s, p.version, p.rec.Epoch, p.m.NextOffset, old.version, old.m.NextOffset)
				}
				for i, e := range old.m.Entries {
					if p.m.Entries[i] != e {
						t.Fatalf("%s: entry %d changed across the move: %+v -> %+v", s, i, e, p.m.Entries[i])
					}
				}
				break
			}
		}
		w.waitFor(30*time.Second, "replicas converged on the new writers", w.caughtUp(clusterStreams...))

		// The old writer comes back believing it still writes s1 and s4 at epoch 1.
		w.startNode("n1", "-stale-writer", "s1=1", "-stale-writer", "s4=1")
		w.waitFor(30*time.Second, "the stale writer tried to persist and was refused", func() (bool, string) {
			st := w.mustStatus("n1")
			return st.Metrics["persistConflicts"] >= 2, fmt.Sprintf("metrics %v", st.Metrics)
		})
		w.waitPersists(2, 30*time.Second, "s1", "s4")
		st := w.mustStatus("n1")
		if st.Metrics["persists"] != 0 {
			t.Fatalf("the revived old writer persisted %d times", st.Metrics["persists"])
		}
		for s := range moves {
			// In version order the epoch never falls: once the new writer persisted at
			// epoch 2, nothing at epoch 1 follows (the killed writer's last persists,
			// delivered by the watch after the kill, come before it).
			moved := false
			for _, p := range w.seen(s) {
				if p.version <= before[s].version {
					continue
				}
				if p.rec.Epoch == 2 {
					moved = true
				} else if moved || p.rec.Epoch != 1 {
					t.Fatalf("%s: version %d persisted at epoch %d after the move to epoch 2", s, p.version, p.rec.Epoch)
				}
			}
			epoch, err := w.meta.Client().Get(context.Background(), metadata.EpochKey(w.meta.Prefix(), s))
			if err != nil || len(epoch.Kvs) != 1 || string(epoch.Kvs[0].Value) != metadata.FormatEpoch(2) {
				t.Fatalf("%s: stored epoch %v (%v), want 2", s, epoch, err)
			}
		}
		figures["stale writer refused"] = fmt.Sprintf("%d conflicts, %d reinitializations, 0 persists", st.Metrics["persistConflicts"], st.Metrics["reinitializations"])
		// Restarted without the stale writers, n1 is a replica of everything and converges.
		w.stopNode("n1")
		w.startNode("n1")
		w.waitFor(30*time.Second, "n1 converged as a replica", w.caughtUp(clusterStreams...))
	})

	phase("partition", func(t *testing.T) {
		w.setFaults("n2", 0, 0, true) // writes s1, s2, s5; replicates s3, s4
		w.waitPersists(4, 60*time.Second, clusterStreams...)
		st := w.mustStatus("n2")
		if st.Transport["pausedDropped"] == 0 {
			t.Fatal("the partition dropped nothing")
		}
		w.setFaults("n2", 0, 0, false)
		healed := time.Now()
		w.waitFor(30*time.Second, "converged after the partition healed", w.caughtUp(clusterStreams...))
		figures["partition healed to converged"] = time.Since(healed).Round(time.Millisecond).String()
		w.checkHistories(nil, nil)
	})

	phase("everything-in-s3-once", func(t *testing.T) {
		until := (time.Now().UnixMilli()-w.loadStart)/clusterLoadInterval.Milliseconds() + 25
		for _, n := range clusterNodes {
			if err := w.post(n, "/load", url.Values{"until": {fmt.Sprint(until)}}); err != nil {
				t.Fatal(err)
			}
		}
		w.waitFor(30*time.Second, "every log holds the last chunk", func() (bool, string) {
			for _, n := range clusterNodes {
				st := w.mustStatus(n)
				for _, s := range clusterStreams {
					if st.Logs[s].Chunks != until {
						return false, fmt.Sprintf("%s on %s: %d chunks of %d", s, n, st.Logs[s].Chunks, until)
					}
				}
			}
			return true, ""
		})
		ends := map[string]uint64{}
		for _, s := range clusterStreams {
			ends[s] = w.mustStatus(w.placement[s].Writer).Logs[s].Next
		}
		w.waitFor(60*time.Second, "every stream persisted to its end", func() (bool, string) {
			for _, s := range clusterStreams {
				last, ok := w.latest(s)
				if !ok || last.rec.NextOffset != ends[s] {
					if err := w.post(w.placement[s].Writer, "/forcecut", url.Values{"stream": {s}}); err != nil {
						return false, err.Error()
					}
					return false, fmt.Sprintf("%s persisted to %d of %d", s, last.rec.NextOffset, ends[s])
				}
			}
			return true, ""
		})
		w.waitFor(30*time.Second, "final convergence", func() (bool, string) { return w.converged(clusterStreams...) })
		for _, s := range clusterStreams {
			last, _ := w.latest(s)
			if !last.fetched {
				t.Fatalf("%s: final root not fetched", s)
			}
			w.verifyStream(s, last.m, until)
			// Replicas serve remote reads from their cache: each finds the fragment holding
			// an offset in the middle, the same one the persisted manifest names.
			off := last.m.NextOffset / 2
			want, err := manifest.LookupOffset(last.m, off, w.fetcher(s))
			if err != nil {
				t.Fatalf("%s: lookup %d in the persisted manifest: %v", s, off, err)
			}
			for _, r := range w.placement[s].Replicas {
				got, err := w.lookup(r, s, off)
				if err != nil || got != want.Entry.UID {
					t.Fatalf("%s: replica %s looked up %d: fragment uid %x (%v), the manifest names %x", s, r, off, got, err, want.Entry.UID)
				}
			}
		}
	})

	names := make([]string, 0, len(figures))
	for k := range figures {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		t.Logf("figure: %s: %s", k, figures[k])
	}
}
