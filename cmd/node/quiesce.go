package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/streamtier/streamtier/actors"
)

// quiesce waits until every stream has persisted all it committed, with nothing in flight,
// cutting the last partial fragment once it is drained, then until the superseded roots
// are deleted. Nothing signals these moments, so it polls the status, of every stream at
// once: one stream that cannot finish in time must not keep the others from finishing.
// A stream that cannot progress without an operator or more data is not waited for: one
// stopped (deleted, deposed), one behind the remote tier (its log a prefix of what S3
// holds: everything it has is durable), one diverged (no chunk in common: only `node
// truncate` or `node restore` moves it) and one stalled on its metadata or on the node's
// claim (only `node recover` or a restart moves it); status and the log said why.
func (p *process) quiesce(ctx context.Context) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	type waiting struct {
		st    *openStream
		roots bool // persisted: waiting for its superseded roots to be reaped
		why   string
	}
	var left []*waiting
	for _, st := range p.openStreams() {
		left = append(left, &waiting{st: st})
	}
	for {
		kept := left[:0]
		for _, w := range left {
			if done := p.settled(ctx, w.st, &w.roots, &w.why); !done {
				kept = append(kept, w)
			}
		}
		left = kept
		if len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			var errs []error
			for _, w := range left {
				errs = append(errs, fmt.Errorf("stream %s: %s after %v", w.st.id, w.why, p.s.StopTimeout))
			}
			return errors.Join(errs...)
		case <-tick.C:
		}
	}
}

// settled looks at one stream for quiesce once: it reports the stream done, or records in
// why what it still waits for (roots says the stream is past its persist and waits for
// its superseded roots to be deleted).
func (p *process) settled(ctx context.Context, st *openStream, roots *bool, why *string) bool {
	p.mu.Lock()
	refused := st.refused != ""
	p.mu.Unlock()
	if refused {
		return true // a deleted stream the node refused: nothing of it runs
	}
	if p.outOfNode(st) {
		// A followed stream between a restart's removal and its re-adding (which keeps
		// failing, or the stop came in between): nothing runs to persist it now.
		p.log.Warn().Str("stream", st.id).Msg("stopping while this followed stream is out of the node (restarting after a rewrite): what it committed since is tiered by the next run")
		return true
	}
	// Each look is bounded on its own, so that one stream whose reader does not answer
	// (stuck in file I/O) costs a few seconds per round, not the whole stop budget.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if !*roots {
		s, err := p.node.Status(ctx, st.id)
		switch {
		case p.cluster != nil && errors.Is(err, actors.ErrUnknownStream):
			return true // this member does not write the stream (a replica, or moved away)
		case err != nil:
			*why = "no status: " + err.Error()
			return false
		case s.Phase == "stopped", s.Phase == "diverged", s.Phase == "metadata_missing", s.Phase == "metadata_behind", s.Phase == "claim_changed":
			// Nothing of it will be persisted here without an operator (`node truncate`,
			// `node recover`, a restart on the new claim); a stopped stream's roots are
			// nobody's to reap (`node gc` collects them).
			p.log.Warn().Str("stream", st.id).Str("phase", s.Phase).Msg("stopping without waiting for this stream: it cannot progress by itself")
			return true
		case s.Phase == "behind" || quiet(s):
			if p.cluster != nil {
				// A writer that took over may leave roots of the previous writer's epoch:
				// the wait for the roots would not end; `node gc` collects such roots.
				return true
			}
			*roots = true
		default:
			if s.Phase == "running" && s.Core.DrainNext >= s.LocalCommitted && s.Core.AssemblyBytes > 0 {
				p.node.ForceCut(st.id) // an error means the reader is restarting: try again next tick
			}
			*why = fmt.Sprintf("not quiet (phase %s, persisted %d of %d committed)", s.Phase, s.Core.PersistedNext, s.LocalCommitted)
			return false
		}
	}
	stale, err := p.roots(ctx, st.id)
	for k := range st.oldRoots {
		delete(stale, k)
	}
	if err == nil && len(stale) == 0 {
		return true
	}
	*why = fmt.Sprintf("superseded roots not reaped (%d left)", len(stale))
	if err != nil {
		*why = "superseded roots not listed: " + err.Error()
	}
	return false
}

// quiet reports a stream with nothing left to do: all committed data persisted, no
// transfer, edit, rebalance or retention in flight.
func quiet(s actors.StreamStatus) bool {
	c := s.Core
	return s.Phase == "running" && c.PersistedNext >= s.LocalCommitted && c.Next >= s.LocalCommitted &&
		c.InFlight == 0 && c.WaitingRetry == 0 && c.Buffered == 0 && c.UnpersistedEdits == 0 &&
		c.AssemblyBytes == 0 && !c.Rebalancing && !c.RetentionBusy && c.PersistState != "in-flight"
}
