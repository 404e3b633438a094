package readercore

import (
	"fmt"
	"time"
)

// The idle cut: a fragment is cut at its target size, or once its oldest chunk has waited
// Config.FragmentMaxAge since it arrived at the core, so that the tail of a stream that went
// quiet is uploaded rather than kept local. The core reads no clock: it arms one timer
// when a chunk enters an empty assembly (that is the oldest chunk's arrival, as the shell
// arms the timer while executing the effects of that very Step) and cancels it at any cut
// or discard. The rules are in docs/replica-reader-core.md.

// ArmCutTimer asks for CutTimer{Ref} after After: the idle cut of the fragment whose first
// chunk just arrived. At most one is armed per stream; the previous one was cancelled.
type ArmCutTimer struct {
	Ref   Ref
	After time.Duration
}

// CancelCutTimer says the cut timer Ref is no longer wanted: the fragment it was armed for
// was cut or dropped (firing it anyway is harmless).
type CancelCutTimer struct{ Ref Ref }

func (ArmCutTimer) isEffect()    {}
func (CancelCutTimer) isEffect() {}

func (e ArmCutTimer) String() string {
	return fmt.Sprintf("arm-cut-timer ref=%d after=%s", e.Ref, e.After)
}

func (e CancelCutTimer) String() string { return fmt.Sprintf("cancel-cut-timer ref=%d", e.Ref) }

// armCutTimer arms the idle cut for the assembly's oldest chunk, unless it is disabled
// (a negative FragmentMaxAge), already armed, or the assembly is empty.
func (c *Core) armCutTimer() {
	if c.cfg.FragmentMaxAge <= 0 || c.cutTimer != 0 || c.asm.Empty() {
		return
	}
	c.cutTimer = c.newRef()
	c.emit(ArmCutTimer{Ref: c.cutTimer, After: c.cfg.FragmentMaxAge})
}

// cancelCutTimer forgets the armed idle cut: the assembly it was armed for was cut or
// discarded.
func (c *Core) cancelCutTimer() {
	if c.cutTimer != 0 {
		c.emit(CancelCutTimer{Ref: c.cutTimer})
		c.cutTimer = 0
	}
}

// onCutTimer cuts the assembly its timer was armed for: its oldest chunk has waited the
// fragment max age. A timer that was cancelled (the assembly was cut or dropped since) or
// that belongs to another core matches nothing and is ignored.
func (c *Core) onCutTimer(e CutTimer) {
	if c.phase != phaseRunning || e.Ref == 0 || e.Ref != c.cutTimer {
		return
	}
	c.cutTimer = 0
	if c.asm.Empty() {
		return // never armed for an empty assembly; kept for safety
	}
	c.stats.IdleCuts++
	c.cut()
}
