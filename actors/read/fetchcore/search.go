package fetchcore

import "time"

// minRound is the fewest completions a measured round lasts: at low levels a round of c
// completions is a few milliseconds, which on a shared machine measures the neighbours.
const minRound = 8

// probeEvery is how many measured rounds the search holds a concurrency before it probes
// the next level up again (the server, the network or the other readers may have changed).
// Each probe that does not pay (the doubling measured no rise, or the rise was taken back)
// doubles the wait before the next one, up to maxProbeEvery; a rise that pays resets it: a
// probe runs rounds at a level that was just found worse.
const (
	probeEvery    = 8
	maxProbeEvery = 64
)

// riseFactor is how much faster a round must be to count as a rise: measurement noise
// below it does not double the concurrency, and a doubling that buys less than 15 % is not
// worth twice the connections and the memory in flight (on a server that shares its cores,
// it costs more than it brings).
const riseFactor = 1.15

// fallFactor is how far the smoothed rate at a held level must fall below the rate it
// settled at before the search steps back a level.
const fallFactor = 0.7

// confirmRounds is how many measured rounds a level the search rose to is held before its
// smoothed rate is compared with the rate of the level below: one probe round is noisy (on
// a server sharing its cores, a round of eight completions varies by a third), and a rise
// that does not pay riseFactor over more rounds is taken back.
const confirmRounds = 2

// fallRounds is how many measured rounds in a row the smoothed rate must stay below
// fallFactor of the settled rate before the search steps back: one noisy round does not.
const fallRounds = 3

// search finds the concurrency of range GETs by measurement: it starts at Config.StartConcurrency
// and doubles while the rate of completed bytes rises, steps back to the best level when a
// doubling does not pay, holds there, takes the last rise back when the level's smoothed
// rate over its first confirmRounds held rounds does not pay riseFactor over the level below,
// steps back a level when the smoothed rate stays below fallFactor of what it was when it
// settled for fallRounds rounds, and probes one level up again after probeEvery rounds (more
// after probes that did not pay). A round lasts max(c, minRound) completions; its rate is the
// bytes completed over the time between the completion that opened it and the one that
// closed it (the shell's monotonic time in RangeDone.At). After a change of level the
// completions of the GETs issued before it are not measured. A round in which most completions
// found fewer than c GETs in flight (the budget, the consumer or the manifest held the
// reader back) says nothing about c and changes nothing.
type search struct {
	ceiling  int
	c        int
	bestRate float64 // bytes per second at bestC
	bestC    int
	// belowBest is the rate of the level below bestC, measured when the search rose to
	// bestC (0: bestC was not reached by a rise); below is the same for the level held,
	// until confirmRounds held rounds confirmed the rise or took it back.
	belowBest, below float64
	probing          bool    // doubling; false: holding at c
	every            int     // held rounds before the next probe: probeEvery, doubled by each probe that did not pay
	held             int     // rounds held since the last probe
	settled          float64 // the rate when the search settled at c (0: not measured yet)
	smooth           float64 // the rate at the held level, smoothed over rounds
	low              int     // rounds in a row with smooth below fallFactor of settled
	fixed            bool    // Config.FixedConcurrency: no search
	// learned is the last level held for confirmRounds measured rounds with its rise (if
	// any) confirmed: where the next read of the same node may start (0: none yet).
	learned int

	skip       int // completions still to ignore after a change of level
	anchored   bool
	roundStart time.Duration
	bytes      int64
	done, full int
}

// searchFor is the search a core with cfg (defaults applied) runs: none with a fixed
// concurrency, else from the learned level or the start.
func searchFor(cfg Config) search {
	if cfg.FixedConcurrency > 0 {
		return search{ceiling: cfg.FixedConcurrency, c: cfg.FixedConcurrency, bestC: cfg.FixedConcurrency, fixed: true}
	}
	return newSearch(cfg.start(), cfg.MaxConcurrency)
}

func newSearch(start, ceiling int) search {
	c := min(start, ceiling)
	return search{ceiling: ceiling, c: c, bestC: c, probing: ceiling > c, every: probeEvery}
}

// observe counts one completion of n bytes at time at; inflight is the number of GETs in
// flight just before it completed.
func (s *search) observe(at time.Duration, n int64, inflight int) {
	if s.fixed {
		return
	}
	if s.skip > 0 {
		s.skip--
		return
	}
	if !s.anchored {
		s.anchored, s.roundStart = true, at
		return
	}
	s.bytes += n
	s.done++
	if inflight >= s.c {
		s.full++
	}
	if s.done < max(s.c, minRound) {
		return
	}
	elapsed := at - s.roundStart
	valid := elapsed > 0 && s.full*2 >= s.done
	rate := float64(s.bytes) / elapsed.Seconds()
	s.roundStart, s.bytes, s.done, s.full = at, 0, 0, 0
	if valid {
		before := s.c
		s.adjust(rate)
		if s.c != before {
			// the GETs issued at the old level are still out: their completions would mix
			// both levels into the next round, so they are not measured
			s.skip, s.anchored = before, false
		}
	}
}

func (s *search) adjust(rate float64) {
	if s.probing {
		if rate > s.bestRate*riseFactor {
			s.belowBest, s.bestRate, s.bestC = s.bestRate, rate, s.c
			if s.c < s.ceiling {
				s.c = min(2*s.c, s.ceiling)
			} else {
				s.hold()
				s.below = s.belowBest
			}
			return
		}
		s.c = s.bestC // the doubling did not pay: step back
		s.hold()
		s.below = s.belowBest
		s.every = min(2*s.every, maxProbeEvery)
		return
	}
	if s.settled == 0 {
		s.settled, s.smooth = rate, rate
	} else {
		s.smooth = (s.smooth + rate) / 2
		if s.held < confirmRounds {
			// the rate the fall rule measures against is the level's first rounds
			// smoothed, not its first round alone: a first round that caught a burst of
			// completions would have the search step back from a level that is fine
			s.settled = s.smooth
		}
	}
	if s.below > 0 && s.held+1 >= confirmRounds {
		below := s.below
		s.below = 0
		if s.smooth <= below*riseFactor && s.c > 1 {
			// the rise to this level, measured over more rounds, does not pay what a
			// doubling must over the level below: one noisy probe round took it; take it back
			s.c /= 2
			s.bestC, s.bestRate, s.belowBest = s.c, below, 0
			s.hold()
			s.every = min(2*s.every, maxProbeEvery)
			return
		}
		s.every = probeEvery // the rise paid: probe on at the usual pace
	}
	if s.smooth < s.settled*fallFactor && s.c > 1 {
		s.low++
		if s.low >= fallRounds {
			// the rate stayed well below what it was when the search settled here: the
			// server or the network is overloaded; step back a level and measure again
			s.c = s.c / 2
			s.bestC, s.bestRate, s.belowBest = s.c, 0, 0
			s.hold()
			return
		}
	} else {
		s.low = 0
	}
	s.bestRate = s.smooth // the rate at the level held is what a probe must beat
	s.held++
	if s.held >= confirmRounds {
		s.learned = s.c
	}
	if s.held >= s.every && s.c < s.ceiling {
		// the level held is confirmed (or was not reached by a rise): a probe that does not
		// pay comes back to it with nothing to confirm
		s.bestC, s.c, s.probing, s.belowBest = s.c, min(2*s.c, s.ceiling), true, 0
		s.held, s.settled, s.smooth, s.low = 0, 0, 0, 0
	}
}

// hold stops probing: the next rounds measure the level held afresh (a level reached by a
// rise sets below after it, to have the rise confirmed).
func (s *search) hold() {
	s.probing, s.held, s.settled, s.smooth, s.low, s.below = false, 0, 0, 0, 0, 0
}
