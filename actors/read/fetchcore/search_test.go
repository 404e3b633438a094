package fetchcore

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// server is a steady server for the search: at each level of GETs in flight it completes
// ranges of rangeBytes at its rate for that level (bytes per second, all GETs together),
// one completion at a time; noisy, when set, overrides the rate during the n-th visit of
// the search to a level (counting from 1), to model a lucky probe.
type server struct {
	rate  map[int]float64
	noisy map[[2]int]float64 // {level, visit} -> rate
	after func(*search)      // called after each completion, when set
	// window, when windowRate is set, is a run of completions [from, to) (counted from the
	// first) at windowRate: a burst (the GETs a read issues at once at its start come
	// back together) or a slow patch.
	window     [2]int
	windowRate float64
}

const rangeBytes = 4 << 20

// run feeds the search maxCompletions completions and returns the levels it went through,
// in order (the first is where it started).
func (sv server) run(s *search, maxCompletions int) []int {
	levels := []int{s.c}
	visits := map[int]int{s.c: 1}
	var at time.Duration
	for i := range maxCompletions {
		c := s.c
		r := sv.rate[c]
		if nr, ok := sv.noisy[[2]int{c, visits[c]}]; ok {
			r = nr
		}
		if sv.windowRate > 0 && i >= sv.window[0] && i < sv.window[1] {
			r = sv.windowRate
		}
		at += time.Duration(float64(rangeBytes) / r * float64(time.Second))
		s.observe(at, rangeBytes, c)
		if sv.after != nil {
			sv.after(s)
		}
		if s.c != c {
			levels = append(levels, s.c)
			visits[s.c]++
		}
	}
	return levels
}

func fmtLevels(l []int) string { return strings.Trim(fmt.Sprint(l), "[]") }

// A rise that one lucky probe round took is taken back once the level is held: on a server
// where 8 GETs in flight are slower than 4 (a server sharing the reader's cores), a probe
// round at 8 that happened to be fast does not keep the reader at 8 for the rest of the read.
// Before confirmRounds the search rose to 8 and stayed there (16 did not pay, 8 held).
func TestSearchTakesBackAnUnconfirmedRise(t *testing.T) {
	sv := server{
		rate:  map[int]float64{4: 1000e6, 8: 800e6, 16: 700e6, 32: 600e6},
		noisy: map[[2]int]float64{{8, 1}: 1400e6}, // the first visit to 8 is lucky
	}
	s := newSearch(4, 32)
	got := sv.run(&s, 200)
	if want := "4 8 16 8 4"; !strings.HasPrefix(fmtLevels(got), want) {
		t.Fatalf("levels %s, want them to start %s (the lucky rise to 8 taken back)", fmtLevels(got), want)
	}
	if s.c != 4 {
		t.Fatalf("the search ended at %d, want 4 (levels %s)", s.c, fmtLevels(got))
	}
}

// Held at the best level, the search probes the next one up now and then, and backs off:
// each probe that does not pay doubles the wait before the next (up to maxProbeEvery
// rounds), and a failed probe never takes the search below the level it held.
func TestSearchProbesLessAfterProbesThatDidNotPay(t *testing.T) {
	sv := server{rate: map[int]float64{1: 300e6, 2: 600e6, 4: 1000e6, 8: 900e6, 16: 800e6, 32: 700e6}}
	s := newSearch(4, 32)
	got := sv.run(&s, 4000) // 500 rounds of 8 at level 4
	probes := 0
	for i, l := range got {
		if l < 4 {
			t.Fatalf("level %d (change %d of %s): a probe that did not pay took the search below the level it held", l, i, fmtLevels(got))
		}
		if l == 8 {
			probes++
		}
	}
	// At a fixed pace (every 8 rounds) that would be about 60 probes; backing off to 64
	// rounds, about 10.
	if probes > 15 {
		t.Fatalf("%d probes of 8 in 500 rounds: %s", probes, fmtLevels(got))
	}
	if s.c != 4 && s.c != 8 {
		t.Fatalf("ended at %d", s.c)
	}
}

// A rise that pays less than a doubling must (riseFactor) over more rounds is taken back
// too: 8 GETs in flight that bring 5 % more than 4 are not worth twice the connections and
// the memory.
func TestSearchTakesBackARiseThatPaysTooLittle(t *testing.T) {
	sv := server{
		rate:  map[int]float64{4: 1000e6, 8: 1050e6, 16: 1050e6, 32: 1050e6},
		noisy: map[[2]int]float64{{8, 1}: 1400e6},
	}
	s := newSearch(4, 32)
	if got := sv.run(&s, 200); !strings.HasPrefix(fmtLevels(got), "4 8 16 8 4") || s.c != 4 {
		t.Fatalf("levels %s, ended at %d: want 4 8 16 8 4 ... ending at 4", fmtLevels(got), s.c)
	}
}

// A rise that pays over more rounds is kept: the server doubles its rate from 4 to 8 and
// gains nothing beyond, so the search settles at 8 and stays there between its probes.
func TestSearchKeepsAConfirmedRise(t *testing.T) {
	sv := server{rate: map[int]float64{4: 500e6, 8: 1000e6, 16: 1000e6, 32: 1000e6}}
	s := newSearch(4, 32)
	got := sv.run(&s, 200)
	if want := "4 8 16 8"; !strings.HasPrefix(fmtLevels(got), want) {
		t.Fatalf("levels %s, want them to start %s", fmtLevels(got), want)
	}
	for i, l := range got[3:] {
		if l != 8 && l != 16 { // 16 only as a probe from 8
			t.Fatalf("level %d after settling at 8 (levels %s, change %d)", l, fmtLevels(got), i+3)
		}
	}
	if s.c != 8 && s.c != 16 {
		t.Fatalf("the search ended at %d, want 8 (or probing 16): levels %s", s.c, fmtLevels(got))
	}
}

// learnedLevels runs sv and returns the distinct levels the search reported as learned
// (where the next read would start), in order.
func (sv server) learnedLevels(s *search, maxCompletions int) (levels, learned []int) {
	sv.after = func(s *search) {
		if s.learned != 0 && (len(learned) == 0 || learned[len(learned)-1] != s.learned) {
			learned = append(learned, s.learned)
		}
	}
	return sv.run(s, maxCompletions), learned
}

// The level a search gives the next read (Status.Settled) is one it held and confirmed:
// the lucky probe's 8, taken back, is never learned; a rise that pays is, once held.
func TestSearchLearnsOnlyConfirmedLevels(t *testing.T) {
	lucky := server{
		rate:  map[int]float64{4: 1000e6, 8: 800e6, 16: 700e6, 32: 600e6},
		noisy: map[[2]int]float64{{8, 1}: 1400e6},
	}
	s := newSearch(4, 32)
	levels, learned := lucky.learnedLevels(&s, 200)
	if fmtLevels(learned) != "4" {
		t.Fatalf("learned %s (levels %s): want only 4, the lucky 8 never", fmtLevels(learned), fmtLevels(levels))
	}
	pays := server{rate: map[int]float64{4: 500e6, 8: 1000e6, 16: 1000e6, 32: 1000e6}}
	s = newSearch(4, 32)
	if levels, learned = pays.learnedLevels(&s, 200); fmtLevels(learned) != "8" {
		t.Fatalf("learned %s (levels %s): want 8, the confirmed rise", fmtLevels(learned), fmtLevels(levels))
	}
	// The next read starts at the learned 8 (probing 16 at once, as any start below the
	// ceiling does) and stays there.
	s = searchFor(Config{Learned: 8, MaxConcurrency: 32}.withDefaults())
	if levels, learned = pays.learnedLevels(&s, 200); !strings.HasPrefix(fmtLevels(levels), "8 16 8") || fmtLevels(learned) != "8" {
		t.Fatalf("after learning 8: levels %s, learned %s: want 8 16 8 ..., learned 8", fmtLevels(levels), fmtLevels(learned))
	}
	fixed := search{ceiling: 4, c: 4, bestC: 4, fixed: true}
	if _, learned = pays.learnedLevels(&fixed, 200); len(learned) != 0 {
		t.Fatalf("a fixed concurrency learned %s: it measures nothing", fmtLevels(learned))
	}
}

// A read that starts at a level (the node's learned one, here the ceiling) whose first
// round caught the burst of its first GETs coming back together does not step back from
// it: the fall rule measures against the level's first rounds smoothed, not the first
// alone. Before, a first round 1.8 times the steady rate had the search fall to 16, where
// the server gives 40 % less, for the rest of the read.
func TestSearchKeepsAStartLevelPastItsFirstBurst(t *testing.T) {
	sv := server{rate: map[int]float64{8: 400e6, 16: 600e6, 32: 1000e6}, window: [2]int{0, 33}, windowRate: 1800e6}
	s := newSearch(32, 32)
	if got := sv.run(&s, 2000); fmtLevels(got) != "32" {
		t.Fatalf("levels %s: want 32 throughout", fmtLevels(got))
	}
}

// A read starts at the level the node's reads settled at, within the ceiling; with none,
// at the configured start.
func TestStartAtTheLearnedLevel(t *testing.T) {
	for _, c := range []struct{ start, learned, ceiling, want int }{
		{0, 0, 32, 4}, {0, 8, 32, 8}, {0, 32, 32, 32}, {0, 32, 16, 16}, {1, 0, 32, 1}, {1, 2, 32, 2},
	} {
		s := searchFor(Config{StartConcurrency: c.start, Learned: c.learned, MaxConcurrency: c.ceiling}.withDefaults())
		if s.c != c.want {
			t.Errorf("start %d, learned %d, ceiling %d: starts at %d, want %d", c.start, c.learned, c.ceiling, s.c, c.want)
		}
	}
}
