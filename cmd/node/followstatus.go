package main

import (
	"context"
	"errors"
	"slices"

	"github.com/streamtier/streamtier/actors"
)

// followedNode is the node as the admin server sees it in single-node mode: *actors.Node,
// whose Streams and Status also list the followed streams a restart took out of the node
// and has not added back yet (issue 22 item 4). Such a stream waits for etcd or S3 (its
// roots and stored epoch are read before it is added again); before, it vanished from
// status for as long as they were away. Its phase is "restarting" and its follow status
// says why it waits.
type followedNode struct {
	*actors.Node
	p *process
}

// Streams lists the node's streams and the followed streams out of it, in id order.
func (f *followedNode) Streams() []string {
	ids := f.Node.Streams()
	for _, st := range f.p.restarting() {
		if !slices.Contains(ids, st.Stream) {
			ids = append(ids, st.Stream)
		}
	}
	slices.Sort(ids)
	return ids
}

// Status is the node's status of id, or the status of a followed stream out of the node.
func (f *followedNode) Status(ctx context.Context, id string) (actors.StreamStatus, error) {
	st, err := f.Node.Status(ctx, id)
	if !errors.Is(err, actors.ErrUnknownStream) {
		return st, err
	}
	for _, r := range f.p.restarting() {
		if r.Stream == id {
			return r, nil
		}
	}
	return st, err
}

// restarting is the status of every stream out of the node: a declared stream whose local
// log could not be opened (stopped, with the error), a followed stream waiting to be
// added back (its local log as the follower last opened it and why it is not back), and a
// stream refused for good (a deleted id), stopped with the reason.
func (p *process) restarting() []actors.StreamStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := slices.Clone(p.unopened)
	for _, st := range p.streams {
		if st.refused != "" {
			lg := st.log
			out = append(out, actors.StreamStatus{Stream: st.id, Phase: "stopped", StopReason: st.refused,
				LocalFirst: lg.FirstOffset(), LocalCommitted: lg.CommittedNext(), LocalNext: lg.NextOffset()})
			continue
		}
		if !st.follow || !st.removed {
			continue
		}
		why := st.failure
		if why == "" {
			why = "the log was rewritten: adding the stream back on it"
		}
		lg := st.log
		s := actors.StreamStatus{
			Stream: st.id, Phase: "restarting",
			LocalFirst: lg.FirstOffset(), LocalCommitted: lg.CommittedNext(), LocalNext: lg.NextOffset(),
			Follow: &actors.FollowStatus{Restarting: why},
		}
		if f, err := lg.LastRefresh(); err == nil {
			s.Follow.PendingBytes = f.PendingBytes
		} else {
			s.Follow.Error = err.Error()
		}
		out = append(out, s)
	}
	return out
}
