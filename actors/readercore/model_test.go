package readercore

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/streamtier/streamtier/manifest"
)

// TestModel drives a core with random event sequences and executes its effects the way the
// shell would, against the small world of model_world_test.go. Tasks (transfers, persists,
// group uploads, fetches) finish in random order, fail at random, lose their results or
// answer twice; other writers persist, the stream is deleted, the stream's own retention
// deletes segments the remote tier never got (gaps); the reader crashes and restarts with a
// local log that lost its unsynced tail, that a new leader rewrote in a higher epoch, or
// that was wiped; the shell compares the remote tier with the log through the real
// divergence.Find, and an operator sometimes answers a stall. The drain runs as the shell
// runs it (model_flow_test.go): batches up to the core's room, fed later, a word from the
// core before the next one, the data reader misreading a chunk now and then; the bound on
// bytes not yet durable is tight in most runs, so that the drain pauses; retries share the
// stream's one retry timer, fired on the shell's clock. After every step it checks the
// invariants of spec/invariants.md that the core answers for (model_checks_test.go) and the
// flow's (model_flow_test.go); at the end, with faults off, it runs the world to quiescence
// and checks that everything committed is persisted, and that replaying the events into a
// fresh core gives the same effects.
func TestModel(t *testing.T) {
	steps := 800
	if testing.Short() {
		steps = 200
	}
	rapid.Check(t, func(rt *rapid.T) {
		w := newWorld(rt)
		type action struct {
			name   string
			weight int
			do     func(*rapid.T)
		}
		actions := []action{
			{"commit", 6, w.actCommit},
			{"drain", 10, w.actDrain},
			{"misread", 1, w.actMisread},
			{"force-cut", 2, func(*rapid.T) { w.step(ForceCut{}) }},
			{"deliver", 16, w.actDeliver},
			{"fire-timer", 5, w.actFireTimer},
			{"time-passes", 2, w.actTimePasses},
			{"tick", 3, w.actTick},
			{"await", 3, w.actAwait},
			{"cancel-await", 1, w.actCancelAwait},
			{"policy", 1, w.actPolicy},
			{"evaluate", 1, func(*rapid.T) { w.step(EvaluateRetention{Now: w.clock}) }},
			{"replica", 1, w.actReplica},
			{"stream-retains", 1, w.actStreamRetention},
			{"operator-truncate", 1, w.actOperatorTruncate},
			{"foreign-persist", 1, w.actForeignPersist},
			{"delete-stream", 1, w.actDeleteStream},
			{"restart", 2, w.actRestart},
		}
		total := 0
		for _, a := range actions {
			total += a.weight
		}
		n := rapid.IntRange(steps/4, steps).Draw(rt, "steps")
		for i := 0; i < n && !w.stopped; i++ {
			pick := rapid.IntRange(0, total-1).Draw(rt, "action")
			for _, a := range actions {
				if pick < a.weight {
					a.do(rt)
					break
				}
				pick -= a.weight
			}
			w.checkInvariants()
			w.recheckBehind()
		}
		w.quiesce()
		w.checkDeterministic()
		k := w.c.stats
		modelStats["runs"]++
		modelStats["persists"] += int(k.Persists)
		modelStats["reinits"] += int(k.Reinitializations)
		modelStats["rebalances"] += int(k.Rebalances)
		modelStats["retention-runs"] += int(k.RetentionRuns)
		modelStats["ignored"] += int(k.IgnoredResults)
		modelStats["deadlines"] += int(k.DeadlineResubmits)
		modelStats["non-transient"] += int(k.NonTransientRetries)
		modelStats["transient"] += int(k.TransientRetries)
		modelStats["drain-repositions"] += int(k.DrainRepositions)
		modelStats["drain-stalls-counted"] += int(k.DrainStalls)
		modelStats["pauses-counted"] += int(k.DrainPauses)
		modelStats["deferred-counted"] += int(k.DeferredChunks)
		modelStats["restarts"] += w.restarts
		modelStats["acked-offsets-kept"] += len(w.acked)
		if w.stopped {
			modelStats["stopped"]++
		}
		for _, o := range w.objs {
			if o.deleted {
				modelStats["objects-deleted"]++
			}
			if o.kind > manifest.KindGroup {
				modelStats["kgroups"]++
			}
		}
	})
	t.Logf("model coverage: %v", modelStats)
}
