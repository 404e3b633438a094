package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/streamtier/streamtier/tests/chaos/faults"
)

// The broker rewrites: what a broker's failover or restore does to a log beyond a lost tail.
// Each has two halves: one before the node starts (prepareRewrite) and one at the fault's
// moment, with the node killed and the writers closed (applyRewrite), as the broker's other
// faults act on a stopped log.

// rewriteState is what the first half of a cycle's broker rewrite left for the second.
type rewriteState struct {
	stream int
	skip   bool   // the first half found nothing to act on: the second does nothing
	bump   uint64 // DeposedTail: where the deposed leader's epoch starts
	epoch  uint64 // DeposedTail: the deposed leader's epoch
	tiered bool   // DeposedTail: the persisted next offset passed bump before the cut
	held   int64  // BehindRetention: the stream's bytes for the cycle, held back until the fault
}

// prepareRewrite is the first half of the broker rewrite f, before the node starts;
// budgets are the writers' bytes for the cycle, which it may change.
//
// DeposedTail: the broker goes on at a higher epoch from the log's end (a leader elected
// with that epoch): the cycle's bytes are that leader's, and the node tiers some of them.
//
// BehindRetention: the log is cut back below the persisted next offset (a broker restored
// from an older copy: the log is a prefix of the remote tier), and its bytes for the cycle
// are held back, so that it stays behind until the fault.
func (w *world) prepareRewrite(ctx context.Context, f faults.Fault, budgets []int64) error {
	l, id := w.logs[f.Stream], w.streams[f.Stream]
	rs := &rewriteState{stream: f.Stream}
	w.rewrite = rs
	kind := string(f.Kind)
	if w.chk.ForkPending(id) {
		rs.skip = true
		w.skip(kind, id, "the fork at %d is still pending", l.lin.Latest().Base())
		return nil
	}
	first, next, _, err := l.bounds()
	if err != nil {
		return err
	}
	switch f.Kind {
	case faults.DeposedTail:
		if next == 0 {
			rs.skip = true
			w.skip(kind, id, "the log is empty")
			return nil
		}
		cfg := w.forkLoad(id, l.lin.Created(), l.lin.ChunkCovering(next).TS)
		if err := w.chk.Forked(id, next, cfg); err != nil {
			return err
		}
		if err := l.lin.Fork(next, cfg); err != nil {
			return err
		}
		rs.bump, rs.epoch = next, cfg.Epoch
		w.note(kind, id, "the broker goes on at epoch %d from the log's end %d (a leader elected with that epoch): the cycle's %d bytes are that leader's", cfg.Epoch, next, budgets[f.Stream])
	case faults.BehindRetention:
		pFirst, pNext, found, err := w.persisted(ctx, id)
		if err != nil {
			return err
		}
		lo := max(first, l.lin.Latest().Base(), pFirst) + 1
		var cands []uint64
		if found && pNext > lo {
			if cands, err = l.boundaries(lo, min(next, pNext)); err != nil {
				return err
			}
		}
		if len(cands) == 0 {
			rs.skip = true
			w.skip(kind, id, "no chunk boundary in (%d,%d) to make the log behind: local [%d,%d), persisted [%d,%d)", lo, min(next, pNext), first, next, pFirst, pNext)
			return nil
		}
		cut := cands[int(f.Fraction*float64(len(cands)))%len(cands)]
		w.chk.Truncated(id, cut)
		if err := l.truncateTail(cut); err != nil {
			return err
		}
		rs.held, budgets[f.Stream] = budgets[f.Stream], 0
		w.note(kind, id, "local log cut back from %d to %d (persisted [%d,%d)): a prefix of the remote tier, behind until the fault; %d bytes held back", next, cut, pFirst, pNext, rs.held)
	}
	return nil
}

// deposedWait bounds how long a deposed tail waits, at its moment, for the node to persist
// some of the deposed leader's chunks before the cut.
const deposedWait = 5 * time.Second

// awaitDeposedTiered waits, while the node runs, until the acknowledged next offset of the
// deposed tail's stream passes the deposed leader's first chunk (the remote tier then holds
// some of its chunks, which the cut must take away), or deposedWait passes: a loaded
// machine may not get there, and the cut is still a fault worth making.
func (w *world) awaitDeposedTiered(ctx context.Context, f faults.Fault) error {
	rs := w.rewrite
	if rs == nil || rs.stream != f.Stream || rs.skip {
		return nil
	}
	id := w.streams[f.Stream]
	deadline := time.NewTimer(deposedWait)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if w.chk.AckedNext(id) > rs.bump {
			rs.tiered = true
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return nil
		case <-tick.C:
		}
	}
}

// applyRewrite is the second half of the broker rewrite f: the node is down, the writers
// are closed; it reopens them when done.
//
// DeposedTail: the deposed leader's suffix is cut away, below its first chunk (below the
// latest fork point, above the local and remote first offsets), and another timeline is
// written from the cut at a still higher epoch (the replica rejoining the new leader).
//
// BehindRetention: the broker's retention deletes the log's oldest segments, within the
// behind log (Past false), or, after the log refilled with the same chunks to two segments
// past the remote next offset, past it (Past true: a gap is due).
func (w *world) applyRewrite(ctx context.Context, f faults.Fault, plan faults.Cycle) error {
	l, id := w.logs[f.Stream], w.streams[f.Stream]
	rs := w.rewrite
	kind := string(f.Kind)
	if _, err := w.closeWriters(); err != nil {
		return err
	}
	appends := append([]int64(nil), f.Appends...)
	reopen := func() error {
		return w.openWriters(appends, defaultPaces(len(w.logs), max(plan.Duration-f.At, time.Second)))
	}
	if rs == nil || rs.stream != f.Stream || rs.skip {
		return reopen()
	}
	appends[f.Stream] += rs.held
	first, next, _, err := l.bounds()
	if err != nil {
		return err
	}
	pFirst, pNext, _, err := w.persisted(ctx, id)
	if err != nil {
		return err
	}
	pNext = max(pNext, w.chk.AckedNext(id))
	switch f.Kind {
	case faults.DeposedTail:
		if w.chk.ForkPending(id) {
			w.skip(kind, id, "the fork at %d is still pending", l.lin.Latest().Base())
			return reopen()
		}
		lo := max(first, pFirst) + 1
		cands, err := l.boundaries(lo, rs.bump)
		if err != nil {
			return err
		}
		if len(cands) == 0 {
			w.skip(kind, id, "no chunk boundary in (%d,%d) below the deposed leader's first chunk: local [%d,%d), persisted [%d,%d)", lo, rs.bump, first, next, pFirst, pNext)
			return reopen()
		}
		cut := cands[int(f.Fraction*float64(len(cands)))%len(cands)]
		cfg := w.forkLoad(id, l.lin.Created(), l.lin.ChunkCovering(cut).TS)
		if err := w.chk.Forked(id, cut, cfg); err != nil {
			return err
		}
		if err := l.truncateTail(cut); err != nil {
			return err
		}
		if err := l.lin.Fork(cut, cfg); err != nil {
			return err
		}
		end, err := l.appendBytes(f.ForkBytes)
		if err != nil {
			return err
		}
		if !rs.tiered {
			kind += "/untiered" // none of the deposed leader's chunks was persisted
		}
		w.countFault(kind, id, "node killed; the deposed leader's suffix [%d,%d) (epoch %d, from %d) cut away at %d, below its first chunk (persisted [%d,%d)), and the new leader's timeline (epoch %d) written to %d: the node must cut the remote tier back to %d",
			cut, next, rs.epoch, rs.bump, cut, pFirst, pNext, cfg.Epoch, end, cut)
	case faults.BehindRetention:
		if f.Past {
			// The log refills with the same chunks to two segments past the remote next
			// offset (the node is down: nothing of it is tiered), then retention deletes
			// past that offset.
			for range 64 {
				_, n, segs, err := l.bounds()
				if err != nil {
					return err
				}
				above := 0
				for _, s := range segs {
					if s.FirstOffset > pNext {
						above++
					}
				}
				if above >= 2 && n > pNext {
					next = n
					break
				}
				if _, err := l.appendBytes(l.segBytes / 2); err != nil {
					return err
				}
			}
		}
		var target uint64
		switch {
		case f.Past:
			target = pNext + uint64(f.Reach*float64(next-pNext)/2)
		case min(next, pNext) > first:
			target = first + uint64(f.Reach*float64(min(next, pNext)-first))
		default:
			target = first
		}
		from, to, err := l.dropHead(target)
		if err != nil {
			return err
		}
		if to <= from {
			w.skip(kind, id, "no segment to delete up to %d (local [%d,%d), persisted next %d)", target, first, next, pNext)
			return reopen()
		}
		what := "within the behind log: nothing of it was unpersisted"
		if to > pNext {
			w.chk.Lost(id, pNext, to)
			what = fmt.Sprintf("past the persisted next offset: a gap [%d,%d) is due", pNext, to)
		}
		_, end, _, err := l.bounds()
		if err != nil {
			return err
		}
		w.countFault(kind, id, "node killed; the broker's retention deleted the local log's [%d,%d) (the log ends at %d; persisted next %d; refilled first: %t), %s; %d held-back bytes now due",
			from, to, end, pNext, f.Past, what, rs.held)
	}
	return reopen()
}
