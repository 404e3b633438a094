package readercore

import (
	"slices"
	"time"

	"pgregory.net/rapid"
)

// The model's side of the idle cut and of the settled persist. The shell arms the stream's
// one cut timer when the core says so and it fires on the shell's monotonic clock at its
// due time (the clock moves there), like a retry timer; a cancelled one sometimes fires
// anyway. The model keeps when the assembly's oldest chunk arrived (the model's clock when
// the chunk that found the assembly empty was fed) and checks that a fragment is cut below
// its target only by a forced cut or by the armed cut timer, at or after that arrival plus
// the fragment max age; that the timer is armed exactly while the assembly holds chunks
// (and the idle cut is enabled); and, after every step, that settled uploads (no transfer
// outstanding, whatever is assembled) never leave unpersisted edits without a persist, unless
// persists back off after failures, and that after two failures in a row nothing but the
// persist timer starts the next attempt.

// idleCutState is what the model knows of the idle cut and of the persist failures.
type idleCutState struct {
	armed        Ref           // the core's armed cut timer, 0 when none
	arrival      time.Duration // when the assembly's oldest chunk arrived (the shell's clock)
	asmWasEmpty  bool          // the assembly was empty before the event being fed
	persistFails int           // failed persists in a row of the current core
	timerFired   bool          // the armed persist timer fired since the last failure
}

// drawFragmentMaxAge picks the idle cut of a run: off in a third of the runs, otherwise
// between a few milliseconds (every timer of the run comes after it) and a few seconds
// (retry timers fire first).
func drawFragmentMaxAge(t *rapid.T) time.Duration {
	if rapid.IntRange(0, 2).Draw(t, "idle-cut") == 0 {
		return -1
	}
	return time.Duration(rapid.IntRange(5, 3000).Draw(t, "fragment-max-age-ms")) * time.Millisecond
}

// beforeFeed remembers what the checks of the idle cut need from before the event.
func (w *world) beforeFeed(ev Event) {
	w.idle.asmWasEmpty = w.c.asm.Empty()
	if pt, ok := ev.(PersistTimer); ok && pt.Ref != 0 && pt.Ref == w.c.timer && w.c.phase == phaseRunning {
		w.idle.timerFired = true
	}
}

// executeIdleCut executes and checks the effects of the idle cut; it reports whether e was one.
func (w *world) executeIdleCut(ev Event, e Effect) bool {
	t := w.t
	switch e := e.(type) {
	case ArmCutTimer:
		if _, ok := ev.(ChunkDrained); !ok || !w.idle.asmWasEmpty {
			t.Fatalf("%s on %T: not at the first chunk of an assembly", e, ev)
		}
		if w.idle.armed != 0 {
			t.Fatalf("%s while cut timer %d is armed: one timer per stream", e, w.idle.armed)
		}
		if e.After != w.cfg.FragmentMaxAge {
			t.Fatalf("%s: the fragment max age is %s", e, w.cfg.FragmentMaxAge)
		}
		w.idle.armed, w.idle.arrival = e.Ref, w.mono
		w.timers = append(w.timers, mTimer{ev: CutTimer{Ref: e.Ref}, core: w.c, timed: true, due: w.mono + e.After})
		modelStats["cut-timers-armed"]++
	case CancelCutTimer:
		if e.Ref != w.idle.armed {
			t.Fatalf("%s: the armed cut timer is %d", e, w.idle.armed)
		}
		w.idle.armed = 0
		for i, tm := range w.timers {
			if ct, ok := tm.ev.(CutTimer); ok && ct.Ref == e.Ref && tm.core == w.c {
				if rapid.IntRange(0, 3).Draw(t, "cancelled-cut-timer-fires") == 0 {
					w.timers[i].stale = true // it fires anyway: the core must ignore it
				} else {
					w.timers = append(w.timers[:i], w.timers[i+1:]...)
				}
				break
			}
		}
	default:
		return false
	}
	return true
}

// checkCut checks a fragment cut below its target size: forced, or by the armed cut timer
// once the oldest chunk waited the fragment max age.
func (w *world) checkCut(ev Event, e SubmitTransfer) {
	if e.Fragment.Size >= w.cfg.FragmentTargetSize {
		return
	}
	switch ev := ev.(type) {
	case ForceCut:
	case CutTimer:
		if w.cfg.FragmentMaxAge <= 0 {
			w.t.Fatalf("idle cut with the idle cut disabled")
		}
		if ev.Ref != w.idle.armed {
			w.t.Fatalf("cut by cut timer %d; the armed one is %d", ev.Ref, w.idle.armed)
		}
		if w.mono < w.idle.arrival+w.cfg.FragmentMaxAge {
			w.t.Fatalf("idle cut at %s: the oldest chunk arrived at %s, the max age is %s", w.mono, w.idle.arrival, w.cfg.FragmentMaxAge)
		}
		modelStats["idle-cuts"]++
	case AwaitOffset, ChunkDrained:
		// A flush cuts the assembly once it holds the end of what a flush waits for (the
		// highest flush of the core that cut, which a restart forgot: any flush's end).
		if !slices.ContainsFunc(w.flushes, func(o uint64) bool { return e.Fragment.FirstOffset <= o && o < e.Fragment.NextOffset }) {
			w.t.Fatalf("fragment [%d,%d) of %d bytes cut below the target %d on %T: neither forced, idle nor holding a flushed offset (%v)",
				e.Fragment.FirstOffset, e.Fragment.NextOffset, e.Fragment.Size, w.cfg.FragmentTargetSize, ev, w.flushes)
		}
		modelStats["flush-cuts"]++
	default:
		w.t.Fatalf("fragment of %d bytes cut below the target %d on %T: neither forced nor idle", e.Fragment.Size, w.cfg.FragmentTargetSize, ev)
	}
}

// checkPersistStart checks what may start a persist: after two failures in a row only the
// persist timer (the retry delay; the persist may still wait for a group upload or a
// retention fetch when it fires), never the settled uploads or the threshold.
func (w *world) checkPersistStart(ev Event) {
	if w.idle.persistFails >= 2 && !w.idle.timerFired {
		w.t.Fatalf("persist started on %T after %d failures in a row, before its timer fired", ev, w.idle.persistFails)
	}
	if len(w.c.transfers) == 0 {
		modelStats["persists-settled"]++
		if !w.c.asm.Empty() {
			modelStats["persists-settled-while-assembling"]++
		}
	}
}

// notePersistResult counts the failures in a row of the current core's persists.
func (w *world) notePersistResult(ev PersistResult, counted bool) {
	if !counted {
		return
	}
	switch ev.Outcome {
	case PersistFailed:
		w.idle.persistFails++
		w.idle.timerFired = false
	default:
		w.idle.persistFails = 0
	}
}

// checkIdleCut runs after every step: the cut timer is armed exactly while the assembly
// holds chunks and the idle cut is enabled; settled uploads (none outstanding) leave no
// unpersisted edit without a persist unless persists back off.
func (w *world) checkIdleCut() {
	t := w.t
	c := w.c
	if (c.cutTimer != 0) != (w.idle.armed != 0) || c.cutTimer != w.idle.armed {
		t.Fatalf("cut timer: core %d, model %d", c.cutTimer, w.idle.armed)
	}
	want := c.phase == phaseRunning && !c.asm.Empty() && w.cfg.FragmentMaxAge > 0
	if (c.cutTimer != 0) != want {
		t.Fatalf("cut timer armed: %t, assembly of %d chunks (max age %s, %s)", c.cutTimer != 0, c.asm.Len(), w.cfg.FragmentMaxAge, c.phase)
	}
	if c.phase != phaseRunning || c.diverged != nil {
		return
	}
	if len(c.transfers) == 0 && len(c.pending) > 0 && c.inflight == nil && c.rebalance == nil && c.retention == nil && !c.persistBackoff {
		t.Fatalf("settled uploads with %d unpersisted edits and no persist:\n%s", len(c.pending), c.Status())
	}
}

// fireCutTimer lets the shell's clock run to the armed cut timer, which fires: the tail of
// a stream that stopped writing is cut without a forced cut.
func (w *world) fireCutTimer() {
	for i, tm := range w.timers {
		if ct, ok := tm.ev.(CutTimer); ok && ct.Ref == w.idle.armed && !tm.stale && tm.core == w.c {
			w.fireTimer(i)
			return
		}
	}
	w.t.Fatalf("an assembly of %d chunks with no cut timer armed", w.c.asm.Len())
}
