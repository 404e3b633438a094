package faults

import (
	"testing"
	"time"
)

// TestPlanReplays checks that a seed always yields the same schedule, that another seed
// yields another, and that plans respect the options.
func TestPlanReplays(t *testing.T) {
	o := DefaultOptions(3)
	var a, b, other []Cycle
	for i := range 200 {
		a = append(a, Plan(42, i, o))
		b = append(b, Plan(42, i, o))
		other = append(other, Plan(43, i, o))
	}
	if Digest(a) != Digest(b) {
		t.Fatal("the same seed gave two schedules")
	}
	if Digest(a) == Digest(other) {
		t.Fatal("two seeds gave the same schedule")
	}
	seen := map[Kind]int{}
	forks := 0
	for _, c := range a {
		rewinds, rewrites := 0, 0
		for _, f := range c.Faults {
			if IsRewind(f.Kind) {
				rewinds++
				if f.At+f.For >= c.Duration {
					t.Fatalf("a rewind that ends past the cycle: %s", c)
				}
			}
			if IsBrokerRewrite(f.Kind) {
				rewrites++
				if f.At >= c.Duration || (c.LostTail != nil && c.LostTail.Stream == f.Stream) {
					t.Fatalf("a broker rewrite past the cycle or on the lost tail's stream: %s", c)
				}
			}
		}
		if c.Duration < o.MinCycle || len(c.Appends) != 3 || len(c.Faults) == 0 || len(c.Faults) > o.MaxFaults+rewinds+rewrites || rewinds > 1 || rewrites > 1 {
			t.Fatalf("bad cycle: %s", c)
		}
		if c.LostTail != nil {
			seen[LostTail]++
			if c.LostTail.Fork {
				forks++
				if c.LostTail.ForkBytes <= 0 {
					t.Fatalf("a fork that writes nothing: %s", c)
				}
			}
			if c.Appends[c.LostTail.Stream] != 0 {
				t.Fatalf("a lost tail's stream grows in its cycle: %s", c)
			}
		}
		for i, f := range c.Faults {
			seen[f.Kind]++
			if i > 0 && f.At < c.Faults[i-1].At || f.At >= c.Duration {
				t.Fatalf("faults out of order or past the cycle's end: %s", c)
			}
			if f.Kind == LocalAhead && c.Appends[f.Stream] < 4*o.SegmentBytes {
				t.Fatalf("a local-ahead stream grows too little: %s", c)
			}
		}
	}
	for _, k := range Kinds {
		if seen[k] == 0 {
			t.Errorf("200 cycles never drew a %s", k)
		}
	}
	if forks == 0 || forks == seen[LostTail] {
		t.Errorf("%d of %d lost tails fork: want some, not all", forks, seen[LostTail])
	}
	if d := a[0].Duration; d > time.Minute {
		t.Fatalf("cycle of %v", d)
	}
}

// TestRewindsLeaveTheScheduleAlone checks that the etcd rewinds, drawn last, change nothing
// else of a seed's schedule: with RewindPercent 0 every cycle is the same but for them.
func TestRewindsLeaveTheScheduleAlone(t *testing.T) {
	with, without := DefaultOptions(3), DefaultOptions(3)
	with.BrokerPercent, without.BrokerPercent = 0, 0 // drawn after the rewind: see the test below
	without.RewindPercent = 0
	n := 0
	for i := range 300 {
		a, b := Plan(70, i, with), Plan(70, i, without)
		var kept []Fault
		for _, f := range a.Faults {
			if IsRewind(f.Kind) {
				n++
				continue
			}
			kept = append(kept, f)
		}
		a.Faults, a.Duration = kept, b.Duration
		if a.String() != b.String() {
			t.Fatalf("cycle %d: a rewind changed the schedule:\n%s\n%s", i, a, b)
		}
	}
	if n == 0 {
		t.Fatal("300 cycles drew no rewind")
	}
}

// TestBrokerRewritesLeaveTheScheduleAlone checks that the broker rewrites (deposed tails,
// retention racing a behind stream), drawn after everything else, change nothing else of
// seed 70's schedule (the CI soak's): with BrokerPercent 0 every cycle is the same but for
// them.
func TestBrokerRewritesLeaveTheScheduleAlone(t *testing.T) {
	with, without := DefaultOptions(3), DefaultOptions(3)
	without.BrokerPercent = 0
	seen := map[Kind]int{}
	for i := range 300 {
		a, b := Plan(70, i, with), Plan(70, i, without)
		var kept []Fault
		for _, f := range a.Faults {
			if IsBrokerRewrite(f.Kind) {
				seen[f.Kind]++
				continue
			}
			kept = append(kept, f)
		}
		a.Faults, a.Duration = kept, b.Duration
		if a.String() != b.String() {
			t.Fatalf("cycle %d: a broker rewrite changed the schedule:\n%s\n%s", i, a, b)
		}
	}
	for _, k := range BrokerRewrites {
		if seen[k] == 0 {
			t.Errorf("300 cycles of seed 70 drew no %s", k)
		}
	}
}
