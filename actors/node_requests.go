package actors

// What a broker or an operator asks of a running stream: awaits of persisted offsets,
// commands to its reader (cut, retention, replica registration, truncation) and its status.
// A dormant stream is woken for what needs its reader (stream_dormant.go), and answers its
// status from its snapshot.

import (
	"context"
	"fmt"
	"time"

	"github.com/streamtier/streamtier/actors/readercore"
	"github.com/streamtier/streamtier/manifest"
)

// AwaitOffset blocks until offset is persisted: its fragment and a root referencing it are
// in S3, etcd accepted the root, the cache is updated and retention evaluated. It does not
// hurry the offset: a quiet stream's tail waits for the idle cut (see Flush). An offset the
// local log lost before its upload gets ErrOffsetInGap (the stream goes on), one whose
// answer needs a group object that could not be read ErrAwaitUndecided (ask again), and a
// stream that stopped ErrStreamStopped.
func (n *Node) AwaitOffset(ctx context.Context, id string, offset uint64) error {
	return n.await(ctx, id, offset, false)
}

// Flush persists the stream through offset now and returns once it is persisted, with
// AwaitOffset's answers: the fragment holding offset is cut as soon as it is drained (not
// at its target size or idle age) and the manifest persisted as soon as the uploads up to
// it are applied. offset must be committed in the local log for the flush to finish (until
// then it waits, like AwaitOffset). What a broker calls before it confirms to a publisher
// that data is in S3, and what a test calls instead of waiting for the idle cut.
func (n *Node) Flush(ctx context.Context, id string, offset uint64) error {
	return n.await(ctx, id, offset, true)
}

func (n *Node) await(ctx context.Context, id string, offset uint64, flush bool) error {
	h, err := n.handle(id)
	if err != nil {
		return err
	}
	wid, ch, err := h.addWaiter(offset, flush)
	if err != nil {
		return err
	}
	if pid, _ := n.readerFor(h); pid != nil {
		n.root.Send(pid, readercore.AwaitOffset{Offset: offset, Waiter: wid, Flush: flush})
	} // else: the reader's next incarnation (the first, or a dormant stream's woken one) picks it up from the handle when it resolves
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		h.removeWaiter(wid)
		if pid, _ := h.countedReader(); pid != nil {
			n.root.Send(pid, readercore.CancelAwait{Waiter: wid})
		}
		what := "await"
		if flush {
			what = "flush"
		}
		return fmt.Errorf("%s offset %d of %s: %w", what, offset, id, ctx.Err())
	}
}

// CommittedNext is one past the last committed offset of the stream's local log now, read
// from the log itself (no round trip to its reader, which may not have started): what an
// await of "everything committed so far" waits for.
func (n *Node) CommittedNext(id string) (uint64, error) {
	h, err := n.handle(id)
	if err != nil {
		return 0, err
	}
	return h.spec.Log.CommittedNext(), nil
}

// Cached returns the stream's manifest cache entry: the last persisted manifest, if any.
func (n *Node) Cached(id string) (Persisted, bool) {
	h, err := n.handle(id)
	if err != nil {
		return Persisted{}, false
	}
	p := h.cache.Load()
	if p == nil {
		return Persisted{}, false
	}
	return *p, true
}

func (n *Node) sendReader(id string, msg any) error {
	h, err := n.handle(id)
	if err != nil {
		return err
	}
	if reason := h.stopReason(); reason != "" { // its reader is gone
		return fmt.Errorf("stream %s: %s: %w", id, reason, ErrStreamStopped)
	}
	if p, ok := h.parkedState(); ok {
		return fmt.Errorf("stream %s is parked (its reader keeps failing: %s), retried at %s: %w",
			id, p.reason, p.retryAt.Format(time.RFC3339), ErrStreamStarting)
	}
	pid, err := n.readerAwake(h)
	if err != nil {
		return err
	}
	if pid == nil {
		return fmt.Errorf("stream %s: %w", id, ErrStreamStarting)
	}
	n.root.Send(pid, msg)
	return nil
}

// ForceCut cuts the fragment being assembled now, whatever its size.
func (n *Node) ForceCut(id string) error { return n.sendReader(id, forceCutMsg{}) }

// EvaluateRetention runs remote retention for the stream now.
func (n *Node) EvaluateRetention(id string) error { return n.sendReader(id, evaluateRetMsg{}) }

// SetRetention changes the stream's remote retention policy and evaluates it.
func (n *Node) SetRetention(id string, p manifest.Policy) error {
	return n.sendReader(id, setRetentionMsg{Policy: p})
}

// ReplicaRegistered tells the writer of stream that replica (re)started and needs a sync.
// The stream keeps it: every later reader incarnation syncs it and broadcasts to it.
func (n *Node) ReplicaRegistered(id, replica string, resync bool) error {
	if replica == "" {
		return fmt.Errorf("stream %s: replica registration without a replica name", id)
	}
	return n.sendReader(id, replicaMsg{Replica: replica, Resync: resync})
}

// Status reports one stream's pipeline.
func (n *Node) Status(ctx context.Context, id string) (StreamStatus, error) {
	h, err := n.handle(id)
	if err != nil {
		return StreamStatus{}, err
	}
	if st, ok := h.stoppedStatus(); ok { // deleted or deposed: its reader is gone
		return st, nil
	}
	if st, ok := h.parkedStatus(); ok { // its reader is down until the next retry
		return st, nil
	}
	pid, dormant := h.countedReader()
	if dormant { // no actor to ask, and no need to wake it
		st, _ := h.dormantStatus(n.cfg.clock.Now())
		if reason := n.claim.lostReason(); reason != "" {
			st.Phase, st.MetadataReason = "claim_changed", reason // as its reader would say
		}
		return st, nil
	}
	if pid == nil {
		return StreamStatus{Stream: id, Phase: "starting"}, nil
	}
	timeout := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	res, err := n.root.RequestFuture(pid, statusRequestMsg{}, timeout).Result()
	if err != nil {
		return StreamStatus{}, fmt.Errorf("status of %s: %w", id, err)
	}
	st, ok := res.(StreamStatus)
	if !ok {
		return StreamStatus{}, fmt.Errorf("status of %s: unexpected answer %T", id, res)
	}
	return st, nil
}

// TruncateRemote is an operator's word for a stream whose local log shares no chunk with its
// remote tier (status phase "diverged"): the remote tier is cut back to below the local
// log's first offset (at a fragment boundary), the cut is persisted, and tiering resumes
// from the local log. What lies above the cut is deleted: this is the one command that
// removes durable data, so it is refused for a stream in any other state.
func (n *Node) TruncateRemote(ctx context.Context, id string) error {
	h, err := n.handle(id)
	if err != nil {
		return err
	}
	if st, ok := h.dormantStatus(n.cfg.clock.Now()); ok {
		// A dormant stream is never held for an operator: refused as its core would.
		return fmt.Errorf("stream %s: truncate refused: the local log and the remote tier are not known to share no chunk (%s, dormant)", id, st.Phase)
	}
	pid, err := n.readerAwake(h)
	if err != nil {
		return err
	}
	if pid == nil {
		return fmt.Errorf("stream %s: %w", id, ErrStreamStarting)
	}
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	res, err := n.root.RequestFuture(pid, truncateRequestMsg{}, timeout).Result()
	if err != nil {
		return fmt.Errorf("truncate %s: %w", id, err)
	}
	tr, ok := res.(truncateResult)
	if !ok {
		return fmt.Errorf("truncate %s: unexpected answer %T", id, res)
	}
	return tr.Err
}

// GovernorStatus reports the governor's bucket and queue.
func (n *Node) GovernorStatus(ctx context.Context) (GovernorStatus, error) {
	res, err := n.root.RequestFuture(n.governor, governorStatusRequest{}, 5*time.Second).Result()
	if err != nil {
		return GovernorStatus{}, fmt.Errorf("governor status: %w", err)
	}
	return res.(GovernorStatus), nil
}
