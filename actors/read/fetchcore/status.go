package fetchcore

import (
	"fmt"
	"strings"
)

// Status is what the core holds, for metrics and scenarios.
type Status struct {
	Pos         uint64
	Concurrency int
	// Settled is the concurrency the search last held and confirmed over confirmRounds
	// measured rounds (0: not yet, or a fixed concurrency): a good start for the next read.
	Settled    int
	InFlight   int
	Budget     int64
	Reserved   int64
	Buffered   int64
	Unconsumed int64
	Leaves     int
	Ranges     int
	Timers     int
	Waiting    bool // a leaves request or an index fetch is outstanding
	Ended      bool
	Err        error
	Gets       int
	Retries    int
	ShortReads int
	Skips      int
}

// Status reports the core's state.
func (c *Core) Status() Status {
	return Status{
		Pos: c.pos, Concurrency: c.srch.c, Settled: c.srch.learned, InFlight: c.inflight, Budget: c.budget,
		Reserved: c.reserved, Buffered: c.buffered, Unconsumed: c.unconsumed,
		Leaves: len(c.leaves), Ranges: len(c.ranges), Timers: len(c.timers),
		Waiting: c.leavesReq != 0 || len(c.byIndex) > 0, Ended: c.ph == ended, Err: c.err,
		Gets: c.gets, Retries: c.retries, ShortReads: c.shortReads, Skips: c.skips,
	}
}

// String is the scenario form of the status.
func (s Status) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pos=%d c=%d in-flight=%d budget=%d held=%d (reserved=%d buffered=%d unconsumed=%d)",
		s.Pos, s.Concurrency, s.InFlight, s.Budget, s.Reserved+s.Buffered+s.Unconsumed, s.Reserved, s.Buffered, s.Unconsumed)
	fmt.Fprintf(&b, " leaves=%d ranges=%d timers=%d gets=%d retries=%d short=%d skips=%d", s.Leaves, s.Ranges, s.Timers, s.Gets, s.Retries, s.ShortReads, s.Skips)
	if s.Ended {
		b.WriteString(" ended")
	}
	if s.Err != nil {
		b.WriteString(" failed")
	}
	return b.String()
}
