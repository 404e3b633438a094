// Package governorcore is the governor's decision logic, pure: which submitted transfers
// run now and when to look again. With no rate configured it admits at once what the bounds
// allow; with a rate it paces admissions through a token bucket. At most MaxConcurrent
// transfers run node-wide.
//
// The share is work-conserving: a free slot is never left idle while a submission waits
// (pacing aside), so a lone stream may take every slot. When several streams want slots,
// a free slot goes to the waiting stream with the fewest transfers running; among those,
// to the one served longest ago (a stream that starts waiting counts as served then), and
// within a stream submissions run in FIFO order. Nothing running is ever preempted: a
// stream that took every slot while it was alone gives them back one by one as its
// uploads end, until every stream that wants slots runs within one of the others. An
// optional hard cap (PerStream) bounds one stream's transfers whatever the node does.
//
// A queued submission is superseded in place by a later one with the same owner and
// reference (never queued or charged twice), and an owner's queued submissions can be
// cancelled together, uncharged; an admitted one that is never started (its owner ended
// first) is refunded (Unused). A submission with the owner and reference of one still
// running declares that one dead (its owner's transfer deadline passed, so its task hangs
// or its result was lost): the running one is abandoned, its slot freed for the queue, so
// that hung uploads cannot hold every slot for ever.
// Time comes in as an argument, so every decision is a function of state and event.
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
	// MaxConcurrent is max_concurrent_uploads, the transfers running at once node-wide (each
	// one S3 connection); 0 means no bound (the node applies its default).
	MaxConcurrent int
	// PerStream is max_concurrent_uploads_per_stream, a hard cap on one stream's transfers;
	// 0 means none: a stream may take up to MaxConcurrent while no other stream waits, and
	// the fair rule shares the slots once others do.
	PerStream int
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
	if c.MaxConcurrent < 0 {
		return fmt.Errorf("max_concurrent_uploads: %d is negative", c.MaxConcurrent)
	}
	if c.PerStream < 0 {
		return fmt.Errorf("max_concurrent_uploads_per_stream: %d is negative", c.PerStream)
	}
	if c.MaxConcurrent > 0 && c.PerStream > c.MaxConcurrent {
		return fmt.Errorf("max_concurrent_uploads_per_stream: %d is above max_concurrent_uploads (%d)", c.PerStream, c.MaxConcurrent)
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

// Submission is one transfer waiting for admission, charged Size bytes once, at admission.
// Owner and Ref identify what it uploads: a submission with the Owner and Ref (Ref != 0) of
// one still queued supersedes it in place, and of one running abandons it; Ref 0 is never
// deduplicated.
type Submission struct {
	ID     uint64
	Size   int64
	Owner  uint64 // who submitted it (a reader incarnation): CancelOwner drops them all
	Ref    uint64 // the owner's reference of the fragment; 0: none
	Stream string // whose share it counts against (PerStream)
}

type key struct{ owner, ref uint64 }

// Decision is what the governor must do after an event: forget the superseded submissions,
// stop the abandoned ones, start the admitted transfers, in this order, and, when Wake > 0,
// call Tick again after that long. Every admitted transfer must be reported with Done when
// it ends: until then it holds its slot under MaxConcurrent and PerStream (unless it is
// abandoned first).
type Decision struct {
	Admit      []Submission
	Wake       time.Duration
	Superseded []uint64 // queued submissions replaced by the one just submitted, never charged
	// Abandoned are running admissions the submission just made declared dead (same owner
	// and reference): their slots are free already, their tokens are not refunded, and a
	// later Done or Unused of theirs changes nothing. The shell cancels their tasks.
	Abandoned []uint64
}

// Governor is the pacing state: the bucket's tokens (negative while in debt), the FIFO
// queue of submissions waiting for them and, for deduplication, the queued ones by reference.
type Governor struct {
	cfg     Config
	tokens  float64
	last    time.Time
	pending []Submission
	byKey   map[key]uint64       // owner and ref -> id of the queued submission
	running map[uint64]admission // admitted, not yet Done, Unused or abandoned
	live    map[key]uint64       // owner and ref (ref != 0) -> id of the running admission
	streams map[string]int       // running transfers per stream
	queued  map[string]int       // queued submissions per stream
	// served is, per stream with a transfer running or queued, the turn of its last
	// admission, or of when it started waiting if that is later; a stream forgotten when it
	// has neither. Ties between streams with as many transfers running go to the lower turn.
	served map[string]uint64
	turn   uint64
	counts counts
}

// admission is an admitted transfer's stream, reference and what the bucket paid for it (0
// unpaced).
type admission struct {
	stream  string
	key     key
	charged float64
}

type counts struct{ submitted, admitted, superseded, canceled, unused, abandoned uint64 }

// New returns a governor whose bucket starts full at now.
func New(cfg Config, now time.Time) *Governor {
	return Resume(cfg, cfg.Burst(), now)
}

// Resume returns a governor whose bucket held tokens at the time at (a restarted governor
// carries on its predecessor's bucket, debt included, instead of granting a fresh burst);
// tokens above the bucket size are cut to it. The queue starts empty.
func Resume(cfg Config, tokens int64, at time.Time) *Governor {
	return &Governor{cfg: cfg, tokens: min(float64(tokens), float64(cfg.Burst())), last: at, byKey: make(map[key]uint64),
		running: make(map[uint64]admission), live: make(map[key]uint64), streams: make(map[string]int),
		queued: make(map[string]int), served: make(map[string]uint64)}
}

// Adopt records transfers a predecessor admitted that have not ended yet (a restarted
// governor's: their tasks were cancelled and are ending). Each holds its slot and its
// stream's share until its Done, as it did before the restart, so the bounds hold across
// restarts; a resubmission of its (owner, ref) abandons it like any running admission. They
// are not charged again, and ids already known are ignored.
func (g *Governor) Adopt(running []Submission) {
	for _, s := range running {
		if _, ok := g.running[s.ID]; ok {
			continue
		}
		a := admission{stream: s.Stream, key: key{s.Owner, s.Ref}}
		g.running[s.ID] = a
		if s.Ref != 0 {
			g.live[a.key] = s.ID
		}
		g.arrive(s.Stream)
		g.streams[s.Stream]++
	}
}

// Submit queues a transfer and admits whatever the bucket allows now. A queued submission
// with the same owner and reference is replaced in place (it keeps its turn, is never
// charged, and its id is returned in Superseded). A running admission with the same owner
// and reference is abandoned (returned in Abandoned): the owner only submits a reference
// again once it gave up waiting for the attempt running (its transfer deadline passed), so
// that attempt's slot goes to the queue now instead of at a Done that may never come. Its
// tokens are not refunded: the upload was started and may have sent its bytes, and pacing
// errs on the side of sending less.
func (g *Governor) Submit(now time.Time, s Submission) Decision {
	g.counts.submitted++
	var superseded, abandoned []uint64
	k := key{s.Owner, s.Ref}
	if id, ok := g.live[k]; ok && s.Ref != 0 {
		g.release(id)
		abandoned = []uint64{id}
		g.counts.abandoned++
	}
	g.arrive(s.Stream)
	g.queued[s.Stream]++
	if old, ok := g.byKey[k]; ok && s.Ref != 0 {
		for i := range g.pending {
			if g.pending[i].ID == old {
				g.unqueue(g.pending[i].Stream) // after counting s: a stream's turn survives
				g.pending[i] = s
				break
			}
		}
		superseded = []uint64{old}
		g.counts.superseded++
	} else {
		g.pending = append(g.pending, s)
	}
	if s.Ref != 0 {
		g.byKey[k] = s.ID
	}
	d := g.Tick(now)
	d.Superseded, d.Abandoned = superseded, abandoned
	return d
}

// Cancel drops a queued submission (its stream went away); it reports whether it was queued.
func (g *Governor) Cancel(id uint64) bool {
	for i, s := range g.pending {
		if s.ID == id {
			g.remove(i)
			g.counts.canceled++
			return true
		}
	}
	return false
}

// CancelOwner drops every queued submission of owner (a reader incarnation that ended),
// uncharged, and returns their ids in queue order.
func (g *Governor) CancelOwner(owner uint64) []uint64 {
	var ids []uint64
	kept := g.pending[:0]
	for _, s := range g.pending {
		if s.Owner != owner {
			kept = append(kept, s)
			continue
		}
		ids = append(ids, s.ID)
		g.forget(s)
		g.unqueue(s.Stream)
	}
	clear(g.pending[len(kept):])
	g.pending = kept
	g.counts.canceled += uint64(len(ids))
	return ids
}

func (g *Governor) remove(i int) {
	g.forget(g.pending[i])
	g.unqueue(g.pending[i].Stream)
	g.pending = append(g.pending[:i], g.pending[i+1:]...)
}

// arrive gives a stream that had nothing running or queued its place among the waiting
// ones: behind every stream already waiting or served before.
func (g *Governor) arrive(stream string) {
	if _, ok := g.served[stream]; !ok {
		g.turn++
		g.served[stream] = g.turn
	}
}

// unqueue counts one queued submission of stream less.
func (g *Governor) unqueue(stream string) {
	if g.queued[stream]--; g.queued[stream] <= 0 {
		delete(g.queued, stream)
	}
	g.idle(stream)
}

// idle forgets a stream's turn once it has nothing running and nothing queued.
func (g *Governor) idle(stream string) {
	if g.queued[stream] == 0 && g.streams[stream] == 0 {
		delete(g.served, stream)
	}
}

// forget drops s from the reference index (when it is the one indexed).
func (g *Governor) forget(s Submission) {
	if k := (key{s.Owner, s.Ref}); s.Ref != 0 && g.byKey[k] == s.ID {
		delete(g.byKey, k)
	}
}

// Tick refills the bucket up to now and admits queued submissions while a slot is free,
// one at a time, each to the stream that comes next (next): the waiting stream with the
// fewest transfers running, the one served longest ago among those, its oldest submission.
// With a rate, the first one the bucket cannot cover stops admission until Wake (no
// smaller submission of another stream jumps it). A submission larger than the bucket is
// admitted on credit once the bucket is full, leaving it in debt that later refills repay,
// so it can never deadlock. At the node-wide bound admission waits for a Done, with no
// Wake.
func (g *Governor) Tick(now time.Time) Decision {
	if !g.cfg.Unlimited() {
		g.refill(now)
	}
	var d Decision
	burst := float64(g.cfg.Burst())
	for !g.full() {
		i := g.next()
		if i < 0 {
			break
		}
		head := g.pending[i]
		if !g.cfg.Unlimited() {
			need := min(float64(head.Size), burst)
			if g.tokens < need {
				wait := (need - g.tokens) / float64(g.cfg.RateBytesPerSec) * float64(time.Second)
				d.Wake = max(time.Duration(wait)+1, time.Millisecond)
				break
			}
		}
		a := admission{stream: head.Stream, key: key{head.Owner, head.Ref}}
		if !g.cfg.Unlimited() {
			a.charged = float64(head.Size)
			g.tokens -= a.charged
		}
		d.Admit = append(d.Admit, head)
		g.running[head.ID] = a
		if head.Ref != 0 {
			g.live[a.key] = head.ID
		}
		g.streams[head.Stream]++
		g.turn++
		g.served[head.Stream] = g.turn
		g.pending = append(g.pending[:i], g.pending[i+1:]...)
		if g.queued[head.Stream]--; g.queued[head.Stream] <= 0 {
			delete(g.queued, head.Stream)
		}
	}
	clear(g.pending[len(g.pending):cap(g.pending)])
	if len(g.pending) == 0 {
		g.pending = nil
	}
	g.admitted(d.Admit)
	return d
}

// next is the index in the queue of the submission that runs next, -1 if none may: among
// the streams with a submission queued and under the cap, the one with the fewest
// transfers running, then the lowest turn; its oldest submission. A stream's submissions
// all compare equal but for their place, so the first one met is its oldest.
func (g *Governor) next() int {
	best := -1
	var bestRun int
	var bestTurn uint64
	for i, s := range g.pending {
		run := g.streams[s.Stream]
		if g.cfg.PerStream > 0 && run >= g.cfg.PerStream {
			continue
		}
		turn := g.served[s.Stream]
		if best < 0 || run < bestRun || (run == bestRun && turn < bestTurn) {
			best, bestRun, bestTurn = i, run, turn
		}
	}
	return best
}

// full reports the node-wide bound reached.
func (g *Governor) full() bool {
	return g.cfg.MaxConcurrent > 0 && len(g.running) >= g.cfg.MaxConcurrent
}

// Done records that an admitted transfer ended (whatever its outcome), freeing its slot, and
// admits what may run now. An id it does not know (a transfer of a governor before a
// restart, one abandoned, or one reported twice) changes nothing.
func (g *Governor) Done(now time.Time, id uint64) Decision {
	g.release(id)
	return g.Tick(now)
}

// Unused records that an admitted transfer was never started: its owner ended between the
// submission and its CancelOwner, so nobody waits for it. Like Done it frees the slot, and
// the bucket gets back what the admission charged (a transfer that never ran is not
// paced), so an ended owner is never charged. An id it does not know (abandoned ones
// included) changes nothing.
func (g *Governor) Unused(now time.Time, id uint64) Decision {
	if a, ok := g.release(id); ok {
		g.counts.unused++
		if !g.cfg.Unlimited() {
			g.refill(now)
			g.tokens = min(g.tokens+a.charged, float64(g.cfg.Burst()))
		}
	}
	return g.Tick(now)
}

// release frees the slot of the admitted transfer id and returns its admission.
func (g *Governor) release(id uint64) (admission, bool) {
	a, ok := g.running[id]
	if !ok {
		return admission{}, false
	}
	delete(g.running, id)
	if g.live[a.key] == id {
		delete(g.live, a.key)
	}
	if g.streams[a.stream]--; g.streams[a.stream] <= 0 {
		delete(g.streams, a.stream)
	}
	g.idle(a.stream)
	return a, true
}

func (g *Governor) admitted(ss []Submission) {
	for _, s := range ss {
		g.forget(s)
	}
	g.counts.admitted += uint64(len(ss))
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
	// InFlight is how many admitted transfers have not been reported Done (nor Unused, nor
	// abandoned); MaxConcurrent and PerStream are the bounds (0: none).
	InFlight      int
	MaxConcurrent int
	PerStream     int
	// StreamsAtShare is how many streams have PerStream transfers in flight now.
	StreamsAtShare int

	// Counters since New or Resume.
	Submitted  uint64 // submissions received
	Admitted   uint64 // admitted (and charged, when paced)
	Superseded uint64 // queued submissions replaced by a resubmission of the same reference
	Canceled   uint64 // queued submissions dropped uncharged (Cancel, CancelOwner)
	Unused     uint64 // admitted but never started (their owner ended), refunded (Unused)
	Abandoned  uint64 // running admissions freed because their owner resubmitted the reference
}

// Status reports the bucket and queue as of the last event.
func (g *Governor) Status() Status {
	st := Status{RateBytesPerSec: g.cfg.RateBytesPerSec, Queued: len(g.pending),
		InFlight: len(g.running), MaxConcurrent: g.cfg.MaxConcurrent, PerStream: g.cfg.PerStream,
		Submitted: g.counts.submitted, Admitted: g.counts.admitted, Superseded: g.counts.superseded, Canceled: g.counts.canceled, Unused: g.counts.unused,
		Abandoned: g.counts.abandoned}
	if !g.cfg.Unlimited() {
		st.BurstBytes = g.cfg.Burst()
		st.Tokens = int64(g.tokens)
	}
	for _, s := range g.pending {
		st.QueuedBytes += s.Size
	}
	if g.cfg.PerStream > 0 {
		for _, n := range g.streams {
			if n >= g.cfg.PerStream {
				st.StreamsAtShare++
			}
		}
	}
	return st
}
