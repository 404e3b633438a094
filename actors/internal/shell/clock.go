package shell

import "time"

// Clock is where the actors read time and arm timers: the wall clock in production, a
// manual one in tests (where pacing, retries and restart delays are driven step by step
// instead of slept through). Every time that feeds a core comes from it.
type Clock interface {
	Now() time.Time
	// AfterFunc runs f in its own goroutine once d has passed; stop cancels it and reports
	// whether it did so before f ran.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// Wall is the real time.
type Wall struct{}

// Now is time.Now.
func (Wall) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (Wall) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// OrWall returns c, or the wall clock when c is nil.
func OrWall(c Clock) Clock {
	if c == nil {
		return Wall{}
	}
	return c
}
