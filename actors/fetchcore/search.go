package fetchcore

import "time"

// probeEvery is how many measured rounds the search holds a concurrency before it probes
// the next level up again (the server, the network or the other readers may have changed).
const probeEvery = 8

// riseFactor is how much faster a round must be to count as a rise: measurement noise
// below it does not double the concurrency.
const riseFactor = 1.05

// fallFactor is how far the rate at a held level must fall below the rate it settled at
// before the search steps back a level.
const fallFactor = 0.7

// search finds the concurrency of range GETs by measurement: it starts at one and doubles
// while the rate of completed bytes rises, steps back to the best level when a doubling
// does not pay, holds there, steps back a level when the rate falls below fallFactor of
// what it was when it settled, and probes one level up again every probeEvery rounds. A
// round lasts max(c, 3) completions; its rate is the bytes completed over the time between
// the completion that opened it and the one that closed it (the shell's monotonic time in
// RangeDone.At). A round in which most completions found fewer than c GETs in flight (the
// budget, the consumer or the manifest held the reader back) says nothing about c and
// changes nothing.
type search struct {
	ceiling  int
	c        int
	bestRate float64 // bytes per second at bestC
	bestC    int
	probing  bool    // doubling; false: holding at c
	held     int     // rounds held since the last probe
	settled  float64 // the rate when the search settled at c (0: not measured yet)
	fixed    bool    // Config.FixedConcurrency: no search

	anchored   bool
	roundStart time.Duration
	bytes      int64
	done, full int
}

func newSearch(ceiling int) search {
	return search{ceiling: ceiling, c: 1, bestC: 1, probing: ceiling > 1}
}

// observe counts one completion of n bytes at time at; inflight is the number of GETs in
// flight just before it completed.
func (s *search) observe(at time.Duration, n int64, inflight int) {
	if s.fixed {
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
	if s.done < max(s.c, 3) {
		return
	}
	elapsed := at - s.roundStart
	valid := elapsed > 0 && s.full*2 >= s.done
	rate := float64(s.bytes) / elapsed.Seconds()
	s.roundStart, s.bytes, s.done, s.full = at, 0, 0, 0
	if valid {
		s.adjust(rate)
	}
}

func (s *search) adjust(rate float64) {
	if s.probing {
		if rate > s.bestRate*riseFactor {
			s.bestRate, s.bestC = rate, s.c
			if s.c < s.ceiling {
				s.c = min(2*s.c, s.ceiling)
			} else {
				s.probing, s.held, s.settled = false, 0, 0
			}
			return
		}
		s.c, s.probing, s.held, s.settled = s.bestC, false, 0, 0 // the doubling did not pay: step back
		return
	}
	if s.settled == 0 {
		s.settled = rate
	} else if rate < s.settled*fallFactor && s.c > 1 {
		// the rate fell well below what it was when the search settled here: the server or
		// the network is overloaded; step back a level and measure again
		s.c, s.bestC, s.held, s.settled = s.c/2, s.c/2, 0, 0
		s.bestRate = 0
		return
	}
	s.bestRate = rate // the rate at the level held is what a probe must beat
	s.held++
	if s.held >= probeEvery && s.c < s.ceiling {
		s.bestC, s.c, s.probing, s.held, s.settled = s.c, min(2*s.c, s.ceiling), true, 0, 0
	}
}
