package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/actors/divergence"
	"github.com/streamtier/streamtier/nodeconfig"
	"github.com/streamtier/streamtier/segments"
)

// restartTimeout bounds removing a followed stream from the node, and looking up a stream's
// roots when it is opened or added again after its log was rewritten.
const restartTimeout = 30 * time.Second

// openFollowed opens a followed stream's log read-only and commits every complete chunk
// in it: the follower cannot know the writer's commit point (docs/operations.md).
func openFollowed(st nodeconfig.StreamSettings) (*segments.Log, error) {
	lg, err := segments.Open(st.LogDir, segments.Options{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w%s", st.ID, err, exhaustedHint(err, "the stream's log"))
	}
	if err := commitComplete(lg); err != nil {
		return nil, errors.Join(fmt.Errorf("stream %s: %w", st.ID, err), lg.Close())
	}
	return lg, nil
}

// commitComplete commits up to the last complete chunk of a log the node opened (recovered,
// or followed): what it holds counts as committed (docs/operations.md).
func commitComplete(lg *segments.Log) error {
	if last, ok := lg.LastChunkID(); ok {
		if err := lg.SetCommitted(last); err != nil {
			return fmt.Errorf("commit the log's chunks up to %d: %w", last, err)
		}
	}
	return nil
}

// addFollowed opens a stream declared with follow: true and adds it to the node; the
// follower started by startFollower keeps its view and commit up to date.
func (p *process) addFollowed(st nodeconfig.StreamSettings) error {
	lg, err := openFollowed(st)
	if err != nil {
		return p.refuseUnopened(st, err)
	}
	ost := &openStream{id: st.ID, log: lg, follow: true, cfg: st}
	p.register(ost)
	if err := p.addToNode(ost); err != nil {
		return err
	}
	state, _ := lg.LastRefresh()
	p.log.Info().Str("stream", st.ID).Str("log_dir", st.LogDir).Uint64("local_first", lg.FirstOffset()).
		Uint64("local_next", lg.NextOffset()).Int64("pending_bytes", state.PendingBytes).
		Str("follow_interval", p.s.FollowInterval.String()).Msg("stream opened read-only, following its writer")
	return nil
}

// outOfNode reports a followed stream that a restart removed from the node and has not
// added again yet.
func (p *process) outOfNode(st *openStream) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return st.removed
}

// startFollower starts the one goroutine that follows every followed stream: every
// follow_interval it refreshes each log's view, commits its complete chunks and restarts a
// stream whose log was rewritten. The returned function stops it and waits for it; with no
// followed stream nothing is started.
func (p *process) startFollower() (stop func()) {
	var followed []*openStream
	for _, st := range p.openStreams() {
		if st.follow {
			followed = append(followed, st)
		}
	}
	if len(followed) == 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { // owned by serve through stop
		defer close(done)
		tick := time.NewTicker(p.s.FollowInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for _, st := range followed {
				if ctx.Err() != nil {
					return
				}
				p.followOnce(ctx, st)
			}
		}
	}()
	return func() {
		cancel()
		select {
		case <-done:
		case <-time.After(p.s.StopTimeout):
			// A look stuck in file I/O (a hung disk) must not hold the stop for ever: the
			// goroutine ends with the process.
			p.log.Error().Str("waited", p.s.StopTimeout.String()).Msg("the follower did not stop (a refresh stuck in file I/O?); stopping without it")
		}
	}
}

// followOnce is one look at a followed stream's directory.
func (p *process) followOnce(ctx context.Context, st *openStream) {
	if p.outOfNode(st) {
		p.readdFollowed(ctx, st)
		return
	}
	_, err := st.log.Refresh()
	if err == nil {
		err = commitComplete(st.log)
	}
	var rw *segments.RewrittenError
	switch {
	case err == nil:
		st.logged = ""
	case errors.Is(err, segments.ErrClosed):
	case errors.As(err, &rw):
		p.noteRewrite(ctx, st, rw)
		if st.logged != err.Error() {
			st.logged = err.Error()
			p.log.Error().Err(err).Str("stream", st.id).Str("log_dir", st.cfg.LogDir).Str("file", rw.Segment).
				Uint64("seen_next", rw.Next).Uint64("seen_last_chunk", rw.Last).Uint64("committed_next", st.log.CommittedNext()).
				Msg("the followed log was rewritten below what this node had seen (its writer truncated a tail): restarting the stream, its resolution compares the log with the remote tier")
		}
		p.restartFollowed(ctx, st)
	default:
		p.logFollowFailure(st, err, "cannot look at the followed log (retried every follow_interval; status shows it)")
	}
}

// noteRewrite keeps what the follower proved of a rewrite of st's log for the stream's
// restart: the node then holds the stream as diverged, naming it, should the rewritten log
// start above the remote next offset (docs/durability.md). A rewrite the follower cannot
// prove (every seen segment vanished: retention may have run past them) brings nothing new,
// but the proof handed at the last restart stays while the stream has not run on the log
// since (it may be restarting again before its resolution).
func (p *process) noteRewrite(ctx context.Context, st *openStream, rw *segments.RewrittenError) {
	if st.rewritten != nil {
		return // not handed yet: the first proof stands
	}
	if rw.Shrank {
		st.rewritten = &divergence.Rewritten{SeenNext: rw.Next, Detail: rw.Segment + ": " + rw.Detail}
	}
	if st.given == nil {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := p.node.Status(sctx, st.id)
	if err != nil || s.Core.Phase != "running" || s.Core.Rewritten != nil {
		// Not resolved on the rewritten log yet, or holding for the rewrite: that proof
		// still says where the remote tier may hold the old timeline.
		if st.rewritten == nil || st.given.SeenNext < st.rewritten.SeenNext {
			st.rewritten = st.given
		}
	}
}

// logFollowFailure logs a failure of a followed stream once for as long as it lasts.
func (p *process) logFollowFailure(st *openStream, err error, msg string) {
	p.mu.Lock()
	st.failure = msg + ": " + err.Error()
	p.mu.Unlock()
	if st.logged == err.Error() {
		return
	}
	st.logged = err.Error()
	p.log.Warn().Err(err).Str("stream", st.id).Str("log_dir", st.cfg.LogDir).Str("exhausted", actors.ExhaustedResource(err)).Msg(msg)
}

// restartFollowed replaces a rewritten followed log: it opens the directory again (if that
// fails, the stream keeps running on its old view, its status shows the error, and the
// next look tries again), removes the stream from the node and adds it back on the new log,
// so that its resolution compares the log with the remote tier (docs/durability.md).
func (p *process) restartFollowed(ctx context.Context, st *openStream) {
	lg, err := openFollowed(st.cfg)
	if err != nil {
		p.logFollowFailure(st, err, "cannot reopen the rewritten followed log (retried every follow_interval)")
		return
	}
	rctx, cancel := context.WithTimeout(ctx, restartTimeout)
	defer cancel()
	if err := p.node.RemoveStream(rctx, st.id); err != nil && !errors.Is(err, actors.ErrUnknownStream) {
		// The node has let go of it (RemoveStream forgets the stream first); only its
		// reader's stop was slow. It ends on the closed log below.
		p.log.Warn().Err(err).Str("stream", st.id).Msg("the rewritten followed stream's reader was slow to stop")
	}
	p.mu.Lock()
	old := st.log
	st.log, st.removed = lg, true
	p.mu.Unlock()
	if err := old.Close(); err != nil {
		p.log.Warn().Err(err).Str("stream", st.id).Msg("close the rewritten followed log")
	}
	p.readdFollowed(ctx, st)
}

// readdFollowed adds a restarted followed stream back to the node.
func (p *process) readdFollowed(ctx context.Context, st *openStream) {
	rctx, cancel := context.WithTimeout(ctx, restartTimeout)
	defer cancel()
	roots, err := p.roots(rctx, st.id)
	if err != nil {
		p.logFollowFailure(st, err, "cannot list the roots of the restarted followed stream (retried every follow_interval)")
		return
	}
	spec, err := p.openSpec(rctx, st.cfg, st.log) // never below the epoch etcd stores
	if err != nil {
		p.logFollowFailure(st, err, "cannot read the restarted followed stream's stored epoch (retried every follow_interval)")
		return
	}
	spec.Rewritten = st.rewritten
	if err := p.node.AddStream(spec); err != nil {
		p.logFollowFailure(st, err, "cannot add the restarted followed stream to the node (retried every follow_interval)")
		return
	}
	st.given, st.rewritten = st.rewritten, nil
	p.mu.Lock()
	st.removed, st.oldRoots, st.failure = false, roots, ""
	p.mu.Unlock()
	st.logged = ""
	p.log.Info().Str("stream", st.id).Uint64("local_first", st.log.FirstOffset()).Uint64("local_next", st.log.NextOffset()).
		Msg("followed stream restarted on its rewritten log")
}
