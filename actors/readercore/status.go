package readercore

import (
	"fmt"
	"strings"

	"github.com/streamtier/streamtier/actors/divergence"
	"github.com/streamtier/streamtier/manifest"
)

// Status is a snapshot of the core for the status command and metrics.
type Status struct {
	Phase    string
	Epoch    uint64
	Revision int64

	PersistedFirst uint64
	PersistedNext  uint64
	First          uint64 // in-memory manifest
	Next           uint64
	TotalSize      uint64
	Entries        int
	DrainNext      uint64

	AssemblyFirst  uint64
	AssemblyNext   uint64
	AssemblyBytes  uint64
	AssemblyChunks int

	InFlight      int    // transfers with an attempt at the governor
	WaitingRetry  int    // transfers waiting for a retry timer
	Buffered      int    // uploaded, waiting for an earlier fragment (completions out of order)
	InFlightBytes uint64 // chunk bytes of every transfer not yet applied

	PersistState     string // idle, timer, due, in-flight, backoff
	UnpersistedEdits int
	UnpersistedBytes uint64 // chunk bytes applied in memory, not yet persisted (the persist stage)
	LastPersistAt    int64  // ms, from the last successful PersistResult (0 before any)
	// OldestUnpersistedTimestamp is the timestamp of the oldest drained chunk not yet
	// persisted (-1 when everything drained is persisted): the lag in seconds is now minus it.
	OldestUnpersistedTimestamp int64
	LastPersistError           string
	// LastUploadError is the last failed upload attempt's reason ("" since an upload
	// succeeded): a wrong secret or a missing bucket shows here while uploads retry.
	LastUploadError string
	ResetPending    bool // a truncation of the remote tier waits for its persist

	// Diverged: the local log and the remote tier share no chunk; the stream waits for an
	// operator to truncate the remote tier or restore the local log. Both ranges are named.
	Diverged                bool
	Behind                  bool // the hold is for a local log that is a prefix of the remote tier
	RemoteFirst, RemoteNext uint64
	LocalFirst, LocalNext   uint64
	// GapFork: the hold is for a fork inside a declared gap with durable data above it.
	GapFork *divergence.GapFork
	// EpochAhead: the hold is for a local log starting above the remote next offset at a
	// higher epoch than the remote tier's last chunk.
	EpochAhead *divergence.EpochAhead
	// Rewritten: the hold is for a local log starting above the remote next offset after
	// its follower saw it rewritten.
	Rewritten *divergence.Rewritten

	Stalled       bool
	StalledOffset uint64

	// HeldBytes is the chunk bytes drained and not yet durable (AssemblyBytes +
	// InFlightBytes + UnpersistedBytes), bounded by HeldBound (Config.MaxUnpersistedBytes)
	// plus one chunk. Paused says the bound was reached: the drain waits for a persist.
	HeldBytes uint64
	HeldBound uint64
	Paused    bool
	// RetryArmed says the stream's one transfer retry timer is armed.
	RetryArmed bool
	// CutTimerArmed says the idle cut (Config.FragmentMaxAge) is armed for the assembly.
	CutTimerArmed bool
	// DrainStalled: the drain's position disagreed with the core's again right after a
	// reposition (a chunk the core keeps refusing); it is retried after a delay.
	DrainStalled       bool
	DrainStalledOffset uint64
	DrainStallFailures int
	DrainStallReason   string
	Rebalancing        bool
	RetentionBusy      bool
	Waiters            int
	Replicas           int

	Counters Counters
}

// Waiting says, in a sentence for a person, why the upload pipeline is held back now ("" when
// nothing holds it): a stalled or failing upload with its reason, failing persists, the
// pause at the bound on bytes not yet durable, or a drain that cannot take the next chunk.
// The phase says the rest (diverged, behind, stopped).
func (s Status) Waiting() string {
	switch {
	case s.Stalled:
		return fmt.Sprintf("uploads stalled at offset %d (retried on a timer): %s", s.StalledOffset, s.LastUploadError)
	case s.LastUploadError != "":
		return "uploads failing (retried): " + s.LastUploadError
	case s.LastPersistError != "":
		return "persists failing (retried): " + s.LastPersistError
	case s.Paused:
		return fmt.Sprintf("paused: %d bytes drained and not yet durable reach the bound %d; the local log grows until uploads and a persist free it", s.HeldBytes, s.HeldBound)
	case s.DrainStalled:
		return fmt.Sprintf("the drain cannot take the chunk at %d (%d failures): %s", s.DrainStalledOffset, s.DrainStallFailures, s.DrainStallReason)
	}
	return ""
}

// Status reports where the core is.
func (c *Core) Status() Status {
	s := Status{
		Phase:            c.phase.String(),
		Epoch:            c.epoch,
		Revision:         c.revision,
		PersistedFirst:   c.persisted.FirstOffset,
		PersistedNext:    c.persisted.NextOffset,
		First:            c.mem.FirstOffset,
		Next:             c.mem.NextOffset,
		TotalSize:        c.mem.TotalSize,
		Entries:          len(c.mem.Entries),
		DrainNext:        c.drainNext,
		AssemblyFirst:    c.asm.FirstOffset(),
		AssemblyNext:     c.asm.NextOffset(),
		AssemblyBytes:    c.asm.Size(),
		AssemblyChunks:   c.asm.Len(),
		UnpersistedEdits: len(c.pending),
		LastPersistError: c.lastPersistErr,
		LastUploadError:  c.lastUploadErr,
		ResetPending:     c.reset != nil,
		Rebalancing:      c.rebalance != nil,
		RetentionBusy:    c.retention != nil,
		Waiters:          len(c.waiters),
		Replicas:         len(c.replicas),
		Counters:         c.stats,
		HeldBytes:        c.held(),
		HeldBound:        c.cfg.MaxUnpersistedBytes,
		Paused:           c.paused,
		RetryArmed:       c.retryTimer != 0,
		CutTimerArmed:    c.cutTimer != 0,
	}
	if m := c.drainMiss; m != nil && m.failures > 0 {
		s.DrainStalled, s.DrainStalledOffset, s.DrainStallFailures, s.DrainStallReason = true, m.at, m.failures, m.reason
	}
	if d := c.diverged; d != nil {
		s.Diverged = true
		s.Behind = d.Kind == divergence.Behind
		s.RemoteFirst, s.RemoteNext, s.LocalFirst, s.LocalNext = d.RemoteFirst, d.RemoteNext, d.LocalFirst, d.LocalNext
		s.GapFork, s.EpochAhead, s.Rewritten = d.GapFork, d.EpochAhead, d.Rewritten
	}
	s.OldestUnpersistedTimestamp = -1
	for _, p := range c.pending {
		if p.append && !p.gap {
			e := p.edit.Insert[0]
			s.UnpersistedBytes += e.Size
			if s.OldestUnpersistedTimestamp == -1 {
				s.OldestUnpersistedTimestamp = e.FirstTimestamp
			}
		}
	}
	s.LastPersistAt = c.lastPersistAt
	for _, t := range c.transfers {
		if s.OldestUnpersistedTimestamp == -1 {
			s.OldestUnpersistedTimestamp = t.desc.FirstTimestamp
		}
		s.InFlightBytes += t.desc.Size
		switch t.state {
		case transferInFlight:
			s.InFlight++
		case transferWaiting:
			s.WaitingRetry++
		case transferDone:
			s.Buffered++
		}
		if t.stalled && !s.Stalled {
			s.Stalled, s.StalledOffset = true, t.desc.FirstOffset
		}
	}
	if s.OldestUnpersistedTimestamp == -1 && !c.asm.Empty() {
		s.OldestUnpersistedTimestamp = c.asm.Snapshot().FirstTimestamp
	}
	switch {
	case c.inflight != nil:
		s.PersistState = "in-flight"
	case c.persistBackoff:
		s.PersistState = "backoff"
	case c.persistDue:
		s.PersistState = "due"
	case c.timer != 0:
		s.PersistState = "timer"
	default:
		s.PersistState = "idle"
	}
	return s
}

// String prints the status as the scenario files show it.
func (s Status) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s epoch=%d rev=%d persisted=[%d,%d) mem=[%d,%d) size=%d entries=%d drain-next=%d\n",
		s.Phase, s.Epoch, s.Revision, s.PersistedFirst, s.PersistedNext, s.First, s.Next, s.TotalSize, s.Entries, s.DrainNext)
	fmt.Fprintf(&b, "assembly=[%d,%d) bytes=%d chunks=%d\n", s.AssemblyFirst, s.AssemblyNext, s.AssemblyBytes, s.AssemblyChunks)
	fmt.Fprintf(&b, "transfers: in-flight=%d waiting-retry=%d buffered=%d bytes=%d\n", s.InFlight, s.WaitingRetry, s.Buffered, s.InFlightBytes)
	fmt.Fprintf(&b, "persist=%s unpersisted-edits=%d unpersisted-bytes=%d last-persist-at=%d oldest-unpersisted-ts=%d reset-pending=%t",
		s.PersistState, s.UnpersistedEdits, s.UnpersistedBytes, s.LastPersistAt, s.OldestUnpersistedTimestamp, s.ResetPending)
	if s.LastPersistError != "" {
		fmt.Fprintf(&b, " last-error=%q", s.LastPersistError)
	}
	b.WriteByte('\n')
	if s.Stalled {
		fmt.Fprintf(&b, "stalled at %d\n", s.StalledOffset)
	}
	if s.Paused {
		fmt.Fprintf(&b, "paused: %d bytes awaiting upload (bound %d)\n", s.HeldBytes, s.HeldBound)
	}
	if s.DrainStalled {
		fmt.Fprintf(&b, "drain stalled at %d (failures=%d): %s\n", s.DrainStalledOffset, s.DrainStallFailures, s.DrainStallReason)
	}
	if s.Diverged && s.Behind {
		fmt.Fprintf(&b, "behind: local=[%d,%d) is a prefix of remote=[%d,%d)\n", s.LocalFirst, s.LocalNext, s.RemoteFirst, s.RemoteNext)
	} else if g := s.GapFork; s.Diverged && g != nil {
		fmt.Fprintf(&b, "diverged: remote=[%d,%d) local=[%d,%d) fork at %d in the declared gap [%d,%d) with durable data above it\n", s.RemoteFirst, s.RemoteNext, s.LocalFirst, s.LocalNext, g.At, g.From, g.To)
	} else if rw := s.Rewritten; s.Diverged && rw != nil {
		fmt.Fprintf(&b, "diverged: remote=[%d,%d) local=[%d,%d) starts above the remote tier after its follower saw it rewritten below %d (%s)\n", s.RemoteFirst, s.RemoteNext, s.LocalFirst, s.LocalNext, rw.SeenNext, rw.Detail)
	} else if a := s.EpochAhead; s.Diverged && a != nil {
		fmt.Fprintf(&b, "diverged: remote=[%d,%d) local=[%d,%d) starts above the remote tier at epoch %d, above its last chunk's %d\n", s.RemoteFirst, s.RemoteNext, s.LocalFirst, s.LocalNext, a.LocalEpoch, a.RemoteEpoch)
	} else if s.Diverged {
		fmt.Fprintf(&b, "diverged: remote=[%d,%d) local=[%d,%d) share no chunk\n", s.RemoteFirst, s.RemoteNext, s.LocalFirst, s.LocalNext)
	}
	fmt.Fprintf(&b, "rebalancing=%t retention-busy=%t waiters=%d replicas=%d\n", s.Rebalancing, s.RetentionBusy, s.Waiters, s.Replicas)
	k := s.Counters
	fmt.Fprintf(&b, "counters: cuts=%d completions=%d transient=%d non-transient=%d deadlines=%d ignored=%d persists=%d persist-failures=%d gaps=%d gap-offsets=%d truncations=%d truncated-offsets=%d reinits=%d rebalances=%d rebalances-given-up=%d retention-runs=%d retention-failures=%d",
		k.Cuts, k.Completions, k.TransientRetries, k.NonTransientRetries, k.DeadlineResubmits, k.IgnoredResults, k.Persists, k.PersistFailures,
		k.Gaps, k.GapOffsets, k.Truncations, k.TruncatedOffsets, k.Reinitializations, k.Rebalances, k.RebalancesGivenUp, k.RetentionRuns, k.RetentionFailures)
	if k.RetryTimers+k.DrainRepositions+k.DrainStalls+k.DrainPauses+k.DeferredChunks > 0 || s.RetryArmed {
		fmt.Fprintf(&b, "\nflow: held=%d/%d retry-armed=%t retry-timers=%d drain-repositions=%d drain-stalls=%d pauses=%d deferred-chunks=%d",
			s.HeldBytes, s.HeldBound, s.RetryArmed, k.RetryTimers, k.DrainRepositions, k.DrainStalls, k.DrainPauses, k.DeferredChunks)
	}
	if k.IdleCuts > 0 || s.CutTimerArmed {
		fmt.Fprintf(&b, "\nidle-cut: armed=%t idle-cuts=%d", s.CutTimerArmed, k.IdleCuts)
	}
	if k.FlushCuts > 0 {
		fmt.Fprintf(&b, "\nflush-cuts=%d", k.FlushCuts)
	}
	return b.String()
}

// Persisted returns the last persisted manifest and its revision (never the in-memory one).
func (c *Core) Persisted() (manifest.Manifest, int64) { return c.persisted, c.revision }

// Manifest returns the in-memory manifest: the persisted one with the unpersisted edits.
func (c *Core) Manifest() manifest.Manifest { return c.mem }
