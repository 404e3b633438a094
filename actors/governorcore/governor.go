// Package governorcore is the governor's decision logic, pure: which submitted transfers
// run now and when to look again. With no rate configured it admits everything at once; with
// a rate it paces admissions through a token bucket in FIFO order. Time comes in as an
// argument, so every decision is a function of state and event.
package governorcore

import (
	"fmt"
	"time"
)

// Config is the governor's pacing setting.
type Config struct {
	// RateBytesPerSec is max_transfer_bytes_per_sec; 0 means unlimited (no bucket at all).
	RateBytesPerSec int64
	// BurstBytes is max_transfer_burst_bytes, the bucket size; 0 means RateBytesPerSec / 5.
	BurstBytes int64
}

// Validate refuses negative settings, naming the one that is wrong.
func (c Config) Validate() error {
	if c.RateBytesPerSec < 0 {
		return fmt.Errorf("max_transfer_bytes_per_sec: %d is negative", c.RateBytesPerSec)
	}
	if c.BurstBytes < 0 {
		return fmt.Errorf("max_transfer_burst_bytes: %d is negative", c.BurstBytes)
	}
	if c.RateBytesPerSec == 0 && c.BurstBytes != 0 {
		return fmt.Errorf("max_transfer_burst_bytes: set to %d but max_transfer_bytes_per_sec is unlimited", c.BurstBytes)
	}
	return nil
}

// Unlimited reports whether the governor does no pacing.
func (c Config) Unlimited() bool { return c.RateBytesPerSec == 0 }

// Burst is the effective bucket size.
func (c Config) Burst() int64 {
	if c.BurstBytes > 0 {
		return c.BurstBytes
	}
	if b := c.RateBytesPerSec / 5; b > 0 {
		return b
	}
	return 1
}

// Submission is one transfer waiting for admission, charged Size bytes once.
type Submission struct {
	ID   uint64
	Size int64
}

// Decision is what the governor must do after an event: start the admitted transfers, in
// this order, and, when Wake > 0, call Tick again after that long.
type Decision struct {
	Admit []Submission
	Wake  time.Duration
}

// Governor is the pacing state: the bucket's tokens (negative while in debt) and the FIFO
// queue of submissions waiting for them.
type Governor struct {
	cfg     Config
	tokens  float64
	last    time.Time
	pending []Submission
}

// New returns a governor whose bucket starts full at now.
func New(cfg Config, now time.Time) *Governor {
	return &Governor{cfg: cfg, tokens: float64(cfg.Burst()), last: now}
}

// Submit queues a transfer and admits whatever the bucket allows now.
func (g *Governor) Submit(now time.Time, s Submission) Decision {
	g.pending = append(g.pending, s)
	return g.Tick(now)
}

// Cancel drops a queued submission (its stream went away); it reports whether it was queued.
func (g *Governor) Cancel(id uint64) bool {
	for i, s := range g.pending {
		if s.ID == id {
			g.pending = append(g.pending[:i], g.pending[i+1:]...)
			return true
		}
	}
	return false
}

// Tick refills the bucket up to now and admits queued submissions from the head while the
// bucket covers them. A submission larger than the bucket is admitted on credit once the
// bucket is full, leaving it in debt that later refills repay, so it can never deadlock.
func (g *Governor) Tick(now time.Time) Decision {
	if g.cfg.Unlimited() {
		d := Decision{Admit: g.pending}
		g.pending = nil
		return d
	}
	g.refill(now)
	var d Decision
	burst := float64(g.cfg.Burst())
	for len(g.pending) > 0 {
		head := g.pending[0]
		need := min(float64(head.Size), burst)
		if g.tokens < need {
			wait := (need - g.tokens) / float64(g.cfg.RateBytesPerSec) * float64(time.Second)
			d.Wake = max(time.Duration(wait)+1, time.Millisecond)
			break
		}
		g.tokens -= float64(head.Size)
		d.Admit = append(d.Admit, head)
		g.pending = g.pending[1:]
	}
	if len(g.pending) == 0 {
		g.pending = nil
	}
	return d
}

func (g *Governor) refill(now time.Time) {
	if now.After(g.last) {
		g.tokens += now.Sub(g.last).Seconds() * float64(g.cfg.RateBytesPerSec)
		g.last = now
	}
	if burst := float64(g.cfg.Burst()); g.tokens > burst {
		g.tokens = burst
	}
}

// Status is a snapshot for status and metrics.
type Status struct {
	RateBytesPerSec int64
	BurstBytes      int64
	Tokens          int64 // negative while in debt
	Queued          int
	QueuedBytes     int64
}

// Status reports the bucket and queue as of the last event.
func (g *Governor) Status() Status {
	st := Status{RateBytesPerSec: g.cfg.RateBytesPerSec, Queued: len(g.pending)}
	if !g.cfg.Unlimited() {
		st.BurstBytes = g.cfg.Burst()
		st.Tokens = int64(g.tokens)
	}
	for _, s := range g.pending {
		st.QueuedBytes += s.Size
	}
	return st
}
