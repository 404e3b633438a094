// Package fetchcore decides how a remote source reads a stream's remote tier: which range
// GETs to issue over the chunk regions of a run of fragment objects, how many at once, how
// many bytes to hold, how to reassemble responses into whole verified chunks and what to do
// about short reads, failures, gaps, the end of the tier and objects retention removed.
// It is pure: no I/O, no clock, no goroutines. Events come in through Step, effects go out
// as values; the shell (actors/remotereader.go) executes them.
package fetchcore

import (
	"fmt"
	"time"
)

// Defaults for Config fields left zero.
const (
	DefaultRangeSize      = 4 << 20
	DefaultFirstRange     = 1 << 20
	DefaultMaxConcurrency = 32
	// DefaultStartConcurrency: one GET in flight never fills a pipe to S3, and starting at
	// four saves two doublings on every read.
	DefaultStartConcurrency = 4
	DefaultBudget           = 64 << 20
	DefaultLeavesAhead      = 8
	DefaultRetryBase        = 50 * time.Millisecond
	DefaultRetryMax         = 5 * time.Second
	DefaultMaxNotFound      = 5
	// MinRange is the smallest range the planner shrinks a range to so that it fits what is
	// left of the budget; below it, the planner waits for room instead.
	MinRange = 64 << 10
)

// Config is a core's settings.
type Config struct {
	// RangeSize is the length of one range GET (the last range of an object is shorter).
	RangeSize int64
	// FirstRange bounds the first range of a read (0: DefaultFirstRange): the first chunk
	// arrives after a short GET instead of a whole RangeSize one.
	FirstRange int64
	// MaxConcurrency is the ceiling of the concurrency search: range GETs in flight at once.
	MaxConcurrency int
	// StartConcurrency is where the concurrency search starts (0: DefaultStartConcurrency,
	// or the ceiling if lower).
	StartConcurrency int
	// Learned is the level the node's reads last settled at (0: none): the search starts
	// there instead of at StartConcurrency, and moves on by its rules. Starting one level
	// below it, to check it again, was measured and dropped: against a shaped S3 one noisy
	// check halved the next read's start, and the next, while a read started there gave
	// up only what the rules give up (docs/remote-read.md).
	Learned int
	// FixedConcurrency, when set, turns the search off and keeps this many GETs in flight:
	// for benchmarks that separate the search from the rest of the reader.
	FixedConcurrency int
	// Budget bounds the bytes the reader holds: requested and not yet received, received and
	// not yet delivered, delivered and not yet consumed (see Held for the one exception).
	Budget int64
	// LeavesAhead is how many leaves (fragments and gaps) not yet planned the core keeps
	// known: below it, it asks the shell for more before it needs them.
	LeavesAhead int
	// RetryBase and RetryMax bound the backoff between retries of a failing request:
	// RetryBase after the first failure without progress, doubling up to RetryMax.
	RetryBase, RetryMax time.Duration
	// MaxNotFound is how many 404s in a row on an object the freshest manifest still lists
	// the core accepts (the manifest the shell sees may lag) before it fails with a
	// MissingObjectError: an object the persisted manifest names must exist.
	MaxNotFound int
}

func (c Config) withDefaults() Config {
	if c.RangeSize == 0 {
		c.RangeSize = DefaultRangeSize
	}
	if c.FirstRange == 0 {
		c.FirstRange = DefaultFirstRange
	}
	if c.MaxConcurrency == 0 {
		c.MaxConcurrency = DefaultMaxConcurrency
	}
	if c.StartConcurrency == 0 {
		c.StartConcurrency = DefaultStartConcurrency
	}
	if c.Budget == 0 {
		c.Budget = DefaultBudget
	}
	if c.LeavesAhead == 0 {
		c.LeavesAhead = DefaultLeavesAhead
	}
	if c.RetryBase == 0 {
		c.RetryBase = DefaultRetryBase
	}
	if c.RetryMax == 0 {
		c.RetryMax = DefaultRetryMax
	}
	if c.MaxNotFound == 0 {
		c.MaxNotFound = DefaultMaxNotFound
	}
	return c
}

// Validate refuses settings the core cannot work with.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.RangeSize < 1:
		return fmt.Errorf("fetchcore: range size %d: must be positive", c.RangeSize)
	case c.FirstRange < 1:
		return fmt.Errorf("fetchcore: first range %d: must be positive", c.FirstRange)
	case c.MaxConcurrency < 1:
		return fmt.Errorf("fetchcore: max concurrency %d: must be at least 1", c.MaxConcurrency)
	case c.Learned < 0:
		return fmt.Errorf("fetchcore: learned concurrency %d: must not be negative", c.Learned)
	case c.StartConcurrency < 1:
		return fmt.Errorf("fetchcore: start concurrency %d: must be at least 1", c.StartConcurrency)
	case c.Budget < 1:
		return fmt.Errorf("fetchcore: budget %d: must be positive", c.Budget)
	case c.LeavesAhead < 1:
		return fmt.Errorf("fetchcore: leaves ahead %d: must be at least 1", c.LeavesAhead)
	case c.RetryBase <= 0 || c.RetryMax < c.RetryBase:
		return fmt.Errorf("fetchcore: retry backoff %s..%s: want 0 < base <= max", c.RetryBase, c.RetryMax)
	case c.MaxNotFound < 1:
		return fmt.Errorf("fetchcore: max not found %d: must be at least 1", c.MaxNotFound)
	}
	return nil
}

// start is where the search starts: the learned level, else StartConcurrency.
func (c Config) start() int {
	if c.Learned > 0 {
		return c.Learned
	}
	return c.StartConcurrency
}
