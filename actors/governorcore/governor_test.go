package governorcore

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

var t0 = time.Unix(1_700_000_000, 0)

func ids(d Decision) []uint64 {
	var out []uint64
	for _, s := range d.Admit {
		out = append(out, s.ID)
	}
	return out
}

func TestUnlimitedAdmitsAtOnce(t *testing.T) {
	g := New(Config{}, t0)
	for i := uint64(1); i <= 3; i++ {
		d := g.Submit(t0, Submission{ID: i, Size: 1 << 40})
		if len(d.Admit) != 1 || d.Admit[0].ID != i || d.Wake != 0 {
			t.Fatalf("submit %d: got %+v, want immediate admission", i, d)
		}
	}
	if st := g.Status(); st.Queued != 0 || st.BurstBytes != 0 {
		t.Fatalf("unlimited governor holds state: %+v", st)
	}
}

func TestBurstDefaultsToFifthOfRate(t *testing.T) {
	if b := (Config{RateBytesPerSec: 100}).Burst(); b != 20 {
		t.Fatalf("burst = %d, want 20", b)
	}
	if b := (Config{RateBytesPerSec: 100, BurstBytes: 7}).Burst(); b != 7 {
		t.Fatalf("burst = %d, want 7", b)
	}
}

func TestPacedFIFOAndWake(t *testing.T) {
	g := New(Config{RateBytesPerSec: 1000, BurstBytes: 500}, t0)
	if got := ids(g.Submit(t0, Submission{ID: 1, Size: 400})); len(got) != 1 {
		t.Fatalf("first submission not admitted from a full bucket: %v", got)
	}
	d := g.Submit(t0, Submission{ID: 2, Size: 300})
	if len(d.Admit) != 0 {
		t.Fatalf("admitted with 100 tokens for 300 bytes: %v", ids(d))
	}
	if d.Wake < 200*time.Millisecond || d.Wake > 201*time.Millisecond {
		t.Fatalf("wake = %v, want about 200ms", d.Wake)
	}
	// A small submission behind it waits its turn (FIFO), even though it would fit.
	if d := g.Submit(t0, Submission{ID: 3, Size: 50}); len(d.Admit) != 0 {
		t.Fatalf("queue jumped: %v", ids(d))
	}
	if d := g.Tick(t0.Add(100 * time.Millisecond)); len(d.Admit) != 0 {
		t.Fatalf("admitted early: %v", ids(d))
	}
	d = g.Tick(t0.Add(250 * time.Millisecond))
	if got := ids(d); len(got) != 2 || got[0] != 2 || got[1] != 3 {
		t.Fatalf("admitted %v at 250ms, want [2 3]", got)
	}
}

func TestOversizedAdmittedOnCredit(t *testing.T) {
	g := New(Config{RateBytesPerSec: 1000, BurstBytes: 100}, t0)
	d := g.Submit(t0, Submission{ID: 1, Size: 5000})
	if got := ids(d); len(got) != 1 {
		t.Fatalf("oversized submission not admitted from a full bucket: %+v", d)
	}
	if st := g.Status(); st.Tokens != -4900 {
		t.Fatalf("tokens = %d, want debt of -4900", st.Tokens)
	}
	d = g.Submit(t0, Submission{ID: 2, Size: 10})
	if len(d.Admit) != 0 || d.Wake < 4910*time.Millisecond {
		t.Fatalf("debt not repaid before the next admission: %+v", d)
	}
	if got := ids(g.Tick(t0.Add(4911 * time.Millisecond))); len(got) != 1 || got[0] != 2 {
		t.Fatalf("after repayment admitted %v, want [2]", got)
	}
}

func TestCancelDropsQueued(t *testing.T) {
	g := New(Config{RateBytesPerSec: 10, BurstBytes: 10}, t0)
	g.Submit(t0, Submission{ID: 1, Size: 10})
	g.Submit(t0, Submission{ID: 2, Size: 10})
	if !g.Cancel(2) || g.Cancel(2) {
		t.Fatal("cancel of a queued submission must succeed once")
	}
	if st := g.Status(); st.Queued != 0 {
		t.Fatalf("queue after cancel: %+v", st)
	}
}

func TestValidateNamesSetting(t *testing.T) {
	for _, c := range []Config{{RateBytesPerSec: -1}, {RateBytesPerSec: 10, BurstBytes: -1}, {BurstBytes: 5}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	if err := (Config{RateBytesPerSec: 10}).Validate(); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
}

// TestPropertyPacing drives random submissions and ticks and checks: FIFO order, every
// submission eventually admitted when ticked at the wake times (no deadlock), and admitted
// bytes never exceed burst + rate x elapsed + the largest oversized credit.
func TestPropertyPacing(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rate := rapid.Int64Range(1, 1<<20).Draw(t, "rate")
		burst := rapid.Int64Range(0, 1<<20).Draw(t, "burst")
		cfg := Config{RateBytesPerSec: rate, BurstBytes: burst}
		g := New(cfg, t0)
		now := t0
		var next, wantNext uint64 = 1, 1
		var admitted, maxSize int64
		var wake time.Duration
		check := func(d Decision) {
			for _, s := range d.Admit {
				if s.ID != wantNext {
					t.Fatalf("admitted %d, want %d (FIFO)", s.ID, wantNext)
				}
				wantNext++
				admitted += s.Size
			}
			wake = d.Wake
			limit := float64(cfg.Burst()) + now.Sub(t0).Seconds()*float64(rate) + float64(max(maxSize-cfg.Burst(), 0)) + 1
			if float64(admitted) > limit {
				t.Fatalf("admitted %d bytes by %v, limit %.0f", admitted, now.Sub(t0), limit)
			}
		}
		steps := rapid.IntRange(1, 50).Draw(t, "steps")
		for i := 0; i < steps; i++ {
			if rapid.Bool().Draw(t, "submit") {
				size := rapid.Int64Range(1, 4*cfg.Burst()+1).Draw(t, "size")
				maxSize = max(maxSize, size)
				check(g.Submit(now, Submission{ID: next, Size: size}))
				next++
			} else {
				now = now.Add(time.Duration(rapid.Int64Range(0, int64(2*time.Second)).Draw(t, "advance")))
				check(g.Tick(now))
			}
		}
		// Liveness: ticking at the wake times admits everything.
		for i := 0; wantNext < next; i++ {
			if wake <= 0 {
				t.Fatalf("submissions %d..%d queued with no wake-up", wantNext, next-1)
			}
			if i > 10*int(next) {
				t.Fatal("no progress: governor deadlocked")
			}
			now = now.Add(wake)
			check(g.Tick(now))
		}
	})
}
