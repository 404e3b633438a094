package read

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// This file holds the cross-tier reader's decisions as pure functions: where a read
// starts (routeRead) and where it goes at the end of the remote tier (handOff). The
// reader (readapi.go) gathers their inputs and carries them out.

// FromKind says how a reader's start is given.
type FromKind uint8

// The ways to say where a reader starts.
const (
	// AtFirst starts at the oldest offset any tier holds.
	AtFirst FromKind = iota + 1
	// AtLast starts at the last committed chunk.
	AtLast
	// AtNext starts at the committed next offset: only chunks committed from now on.
	AtNext
	// AtOffset starts at the chunk holding an offset.
	AtOffset
	// AtTimestamp starts at the first chunk whose timestamp is at or after a time.
	AtTimestamp
)

// From is where a reader starts: first, last, next, an offset or a timestamp.
type From struct {
	Kind      FromKind
	Offset    uint64 // AtOffset
	Timestamp int64  // AtTimestamp: milliseconds since the Unix epoch
}

// FromFirst, FromLast, FromNext, FromOffset and FromTimestamp build a From.
func FromFirst() From { return From{Kind: AtFirst} }

// FromLast starts at the last committed chunk.
func FromLast() From { return From{Kind: AtLast} }

// FromNext starts at the committed next offset.
func FromNext() From { return From{Kind: AtNext} }

// FromOffset starts at the chunk holding offset.
func FromOffset(offset uint64) From { return From{Kind: AtOffset, Offset: offset} }

// FromTimestamp starts at the first chunk at or after ms (milliseconds since the epoch).
func FromTimestamp(ms int64) From { return From{Kind: AtTimestamp, Timestamp: ms} }

// String is the spec as ParseFrom reads it.
func (f From) String() string {
	switch f.Kind {
	case AtFirst:
		return "first"
	case AtLast:
		return "last"
	case AtNext:
		return "next"
	case AtOffset:
		return strconv.FormatUint(f.Offset, 10)
	case AtTimestamp:
		return "@" + strconv.FormatInt(f.Timestamp, 10)
	}
	return fmt.Sprintf("from(%d)", uint8(f.Kind))
}

// ErrBadFrom marks a start spec that does not parse.
var ErrBadFrom = errors.New("bad read start")

// ParseFrom reads first, last, next, a decimal offset, or @TIME where TIME is
// milliseconds since the Unix epoch or an RFC 3339 time.
func ParseFrom(s string) (From, error) {
	switch s {
	case "first", "":
		return FromFirst(), nil
	case "last":
		return FromLast(), nil
	case "next":
		return FromNext(), nil
	}
	if t, ok := strings.CutPrefix(s, "@"); ok {
		if ms, err := strconv.ParseInt(t, 10, 64); err == nil {
			return FromTimestamp(ms), nil
		}
		tm, err := time.Parse(time.RFC3339Nano, t)
		if err != nil {
			return From{}, fmt.Errorf("%w %q: after @ give milliseconds since the epoch or an RFC 3339 time (2024-05-01T12:00:00Z)", ErrBadFrom, s)
		}
		return FromTimestamp(tm.UnixMilli()), nil
	}
	off, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return From{}, fmt.Errorf("%w %q: give first, last, next, an offset or @TIME", ErrBadFrom, s)
	}
	return FromOffset(off), nil
}

// ErrUnavailable is returned when the node cannot tell yet where a read must start:
// the stream's manifest is not resolved (starting, resolving, a replica cache not synced).
// Starting locally then could skip the remote range without a word; retry shortly.
var ErrUnavailable = errors.New("read unavailable: the stream's manifest is not resolved yet")

// ErrUnknownStream is returned for a stream the node neither writes nor replicates (the
// actors package returns the same error for its streams).
var ErrUnknownStream = errors.New("unknown stream")

// ErrOffsetAhead is returned for a start beyond the committed next offset.
var ErrOffsetAhead = errors.New("offset beyond the committed next offset")

// routeInput is what routeRead decides on. Offsets of AtLast and AtTimestamp are
// resolved by the shell beforehand into Offset (they need I/O); Kind then says AtOffset
// with Resolved naming the original kind.
type routeInput struct {
	From From

	RemoteKnown bool   // a persisted manifest is at hand (else: unavailable)
	RemoteFirst uint64 // the manifest's first offset
	RemoteNext  uint64 // its next offset; RemoteFirst == RemoteNext: nothing held remotely

	LocalPresent bool   // a local log is read (a node); false offline
	LocalFirst   uint64 // the local log's first offset
	LocalNext    uint64 // its committed next offset
}

// routeDecision is where a reader starts.
type routeDecision struct {
	Tier Tier
	From uint64
	// Attached is set when the offset asked for is held by no tier: the reader starts at
	// the oldest offset held above it (From).
	Attached bool
	// End is set when there is nothing to read from From on and nothing will come (an
	// offline read at or past the end): the reader ends at once.
	End bool
}

// routeRead decides where a read starts. Locally when the offset is at or above the local
// log's first offset (committed data only); remotely when it is below it and inside the
// manifest's [first, next); below both, at the oldest offset held, Attached. Without a
// manifest the answer is ErrUnavailable, never a local start.
func routeRead(in routeInput) (routeDecision, error) {
	if !in.RemoteKnown {
		return routeDecision{}, ErrUnavailable
	}
	remoteHolds := in.RemoteFirst < in.RemoteNext
	var off uint64
	switch in.From.Kind {
	case AtFirst:
		switch {
		case remoteHolds && (!in.LocalPresent || in.RemoteFirst < in.LocalFirst):
			return routeDecision{Tier: TierRemote, From: in.RemoteFirst}, nil
		case in.LocalPresent:
			return routeDecision{Tier: TierLocal, From: in.LocalFirst}, nil
		}
		return routeDecision{Tier: TierRemote, From: in.RemoteNext, End: true}, nil
	case AtNext:
		if in.LocalPresent {
			return routeDecision{Tier: TierLocal, From: in.LocalNext}, nil
		}
		return routeDecision{Tier: TierRemote, From: in.RemoteNext, End: true}, nil
	case AtOffset, AtLast, AtTimestamp:
		off = in.From.Offset
	default:
		return routeDecision{}, fmt.Errorf("%w: kind %d", ErrBadFrom, in.From.Kind)
	}
	switch {
	case in.LocalPresent && off >= in.LocalFirst:
		if off > in.LocalNext {
			return routeDecision{}, fmt.Errorf("offset %d: %w %d", off, ErrOffsetAhead, in.LocalNext)
		}
		return routeDecision{Tier: TierLocal, From: off}, nil
	case remoteHolds && off >= in.RemoteFirst && off < in.RemoteNext:
		return routeDecision{Tier: TierRemote, From: off}, nil
	case remoteHolds && off < in.RemoteFirst:
		return routeDecision{Tier: TierRemote, From: in.RemoteFirst, Attached: true}, nil
	case in.LocalPresent && off < in.LocalFirst:
		// Below the local log and not remote: below both tiers, or in a range the local
		// log lost before it was uploaded (a gap the writer has not declared yet).
		return routeDecision{Tier: TierLocal, From: in.LocalFirst, Attached: true}, nil
	}
	// Offline, at or past the remote tier's end.
	if off > in.RemoteNext {
		return routeDecision{}, fmt.Errorf("offset %d: %w %d", off, ErrOffsetAhead, in.RemoteNext)
	}
	return routeDecision{Tier: TierRemote, From: off, End: true}, nil
}

// handOffStep is what a reader does at the end of the remote tier.
type handOffStep uint8

const (
	// handOffLocal: open the local log at the end offset.
	handOffLocal handOffStep = iota + 1
	// handOffRemote: the local log no longer holds the end offset (its retention removed
	// it after the upload): ask the remote source again, it has grown past it.
	handOffRemote
	// handOffWait: the local log has not committed up to the end offset yet (a replica
	// behind its writer): wait for it, then decide again.
	handOffWait
	// handOffEnd: no local log (offline): the read is over.
	handOffEnd
)

// handOff decides where a reader goes when the remote source ends at at.
func handOff(at uint64, localPresent bool, localFirst, localNext uint64) handOffStep {
	switch {
	case !localPresent:
		return handOffEnd
	case at < localFirst:
		return handOffRemote
	case at > localNext:
		return handOffWait
	}
	return handOffLocal
}
