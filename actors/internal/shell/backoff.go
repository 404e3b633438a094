package shell

import (
	"context"
	"time"
)

// Backoff is a retry delay that doubles from 50 ms up to about 2 s; the zero value starts
// over. It waits in the caller's goroutine (a reader's), never in an actor.
type Backoff struct{ d time.Duration }

// Wait sleeps the next delay, or returns ctx's error if ctx ends first.
func (b *Backoff) Wait(ctx context.Context) error {
	switch {
	case b.d == 0:
		b.d = 50 * time.Millisecond
	case b.d < 2*time.Second:
		b.d *= 2
	}
	t := time.NewTimer(b.d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
