package actors

import "time"

// clock is where the node's actors read time and arm timers: the wall clock in production,
// a manual one in tests (where the governor's pacing, the reaper's retries and restart
// delays are driven step by step instead of slept through).
type clock interface {
	Now() time.Time
	// AfterFunc runs f in its own goroutine once d has passed; stop cancels it and reports
	// whether it did so before f ran.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// wallClock is the real time.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// orWall returns c, or the wall clock when c is nil.
func orWall(c clock) clock {
	if c == nil {
		return wallClock{}
	}
	return c
}
