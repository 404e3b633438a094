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

// TestResubmissionSupersedesInPlace: a resubmission of a queued reference replaces it where
// it stands (no second copy, no second charge) and reports the superseded id.
func TestResubmissionSupersedesInPlace(t *testing.T) {
	g := New(Config{RateBytesPerSec: 100, BurstBytes: 100}, t0)
	if got := ids(g.Submit(t0, Submission{ID: 1, Size: 100, Owner: 7, Ref: 1})); len(got) != 1 {
		t.Fatalf("first submission not admitted: %v", got)
	}
	g.Submit(t0, Submission{ID: 2, Size: 100, Owner: 7, Ref: 2})
	g.Submit(t0, Submission{ID: 3, Size: 100, Owner: 7, Ref: 3})
	d := g.Submit(t0, Submission{ID: 4, Size: 100, Owner: 7, Ref: 2}) // ref 2 again, attempt 2
	if len(d.Superseded) != 1 || d.Superseded[0] != 2 || len(d.Admit) != 0 {
		t.Fatalf("resubmission of a queued ref: %+v, want id 2 superseded and nothing admitted", d)
	}
	// Another owner's ref 2 is a different fragment: queued behind.
	if d := g.Submit(t0, Submission{ID: 5, Size: 100, Owner: 8, Ref: 2}); len(d.Superseded) != 0 {
		t.Fatalf("another owner's reference superseded: %+v", d)
	}
	if st := g.Status(); st.Queued != 3 || st.QueuedBytes != 300 || st.Superseded != 1 || st.Submitted != 5 {
		t.Fatalf("status after the resubmission: %+v, want 3 queued, 1 superseded, 5 submitted", st)
	}
	// The replacement keeps the turn of the one it replaced: 4 (for ref 2), then 3, then 5.
	for i, want := range []uint64{4, 3, 5} {
		got := ids(g.Tick(t0.Add(time.Duration(i+1) * time.Second)))
		if len(got) != 1 || got[0] != want {
			t.Fatalf("second %d: admitted %v, want [%d]", i+1, got, want)
		}
	}
	// Once admitted, the reference is free again: a later resubmission (a lost result) queues.
	if d := g.Submit(t0.Add(3*time.Second), Submission{ID: 6, Size: 100, Owner: 7, Ref: 2}); len(d.Superseded) != 0 {
		t.Fatalf("resubmission of an admitted ref superseded something: %+v", d)
	}
}

// TestRefZeroIsNeverDeduplicated: submissions without a reference all queue.
func TestRefZeroIsNeverDeduplicated(t *testing.T) {
	g := New(Config{RateBytesPerSec: 10, BurstBytes: 10}, t0)
	for i := uint64(1); i <= 3; i++ {
		if d := g.Submit(t0, Submission{ID: i, Size: 10, Owner: 1}); len(d.Superseded) != 0 {
			t.Fatalf("submission %d superseded %v", i, d.Superseded)
		}
	}
	if st := g.Status(); st.Queued != 2 {
		t.Fatalf("queued %d, want 2", st.Queued)
	}
}

// TestCancelOwnerDropsUncharged: an ended owner's queued submissions go, in queue order,
// without touching the bucket; other owners keep their turn.
func TestCancelOwnerDropsUncharged(t *testing.T) {
	g := New(Config{RateBytesPerSec: 100, BurstBytes: 100}, t0)
	g.Submit(t0, Submission{ID: 1, Size: 100, Owner: 1, Ref: 1}) // admitted: the bucket is empty
	g.Submit(t0, Submission{ID: 2, Size: 100, Owner: 2, Ref: 1})
	g.Submit(t0, Submission{ID: 3, Size: 100, Owner: 1, Ref: 2})
	g.Submit(t0, Submission{ID: 4, Size: 100, Owner: 1, Ref: 3})
	g.Submit(t0, Submission{ID: 5, Size: 100, Owner: 3, Ref: 1})
	before := g.Status().Tokens
	got := g.CancelOwner(1)
	if len(got) != 2 || got[0] != 3 || got[1] != 4 {
		t.Fatalf("cancelled %v, want [3 4]", got)
	}
	st := g.Status()
	if st.Tokens != before || st.Queued != 2 || st.Canceled != 2 {
		t.Fatalf("after cancel: %+v (tokens before %d), want the bucket untouched and 2 queued", st, before)
	}
	if again := g.CancelOwner(1); len(again) != 0 {
		t.Fatalf("second cancel dropped %v", again)
	}
	// The cancelled reference is free: the owner's ref 2 would queue anew, not supersede.
	if d := g.Submit(t0, Submission{ID: 6, Size: 100, Owner: 1, Ref: 2}); len(d.Superseded) != 0 {
		t.Fatalf("cancelled reference still indexed: %+v", d)
	}
	for i, want := range []uint64{2, 5, 6} {
		if got := ids(g.Tick(t0.Add(time.Duration(i+1) * time.Second))); len(got) != 1 || got[0] != want {
			t.Fatalf("second %d: admitted %v, want [%d]", i+1, got, want)
		}
	}
}

// TestResumeCarriesTheBucket: a restarted governor resumes its predecessor's bucket, debt
// included, instead of starting full; a level above the burst is cut to it.
func TestResumeCarriesTheBucket(t *testing.T) {
	cfg := Config{RateBytesPerSec: 1000, BurstBytes: 500}
	g := Resume(cfg, -1000, t0)
	d := g.Submit(t0, Submission{ID: 1, Size: 100})
	if len(d.Admit) != 0 || d.Wake < 1100*time.Millisecond || d.Wake > 1101*time.Millisecond {
		t.Fatalf("resumed in debt: %+v, want nothing admitted and a wake after about 1.1 s", d)
	}
	if st := Resume(cfg, 1<<40, t0).Status(); st.Tokens != 500 {
		t.Fatalf("resumed above the burst: tokens %d, want 500", st.Tokens)
	}
}

// TestPropertyDedupeAndCancel drives random owners and references with resubmissions,
// owner cancellations and ticks, and checks: never two queued submissions of one reference,
// a superseded or cancelled submission is never admitted, every admitted byte was charged
// once (the bucket bound holds for admitted submissions only), and everything left is
// admitted when ticked at the wake times.
func TestPropertyDedupeAndCancel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := Config{RateBytesPerSec: rapid.Int64Range(1, 1<<16).Draw(t, "rate"), BurstBytes: rapid.Int64Range(1, 1<<16).Draw(t, "burst")}
		g := New(cfg, t0)
		now := t0
		queued := map[uint64]Submission{} // what the model says is queued
		dead := map[uint64]bool{}         // superseded or cancelled
		var admitted, maxSize int64
		var wake time.Duration
		check := func(d Decision) {
			for _, id := range d.Superseded {
				if _, ok := queued[id]; !ok {
					t.Fatalf("superseded %d, which is not queued", id)
				}
				delete(queued, id)
				dead[id] = true
			}
			for _, s := range d.Admit {
				if dead[s.ID] {
					t.Fatalf("admitted %d after it was superseded or cancelled", s.ID)
				}
				delete(queued, s.ID)
				admitted += s.Size
			}
			wake = d.Wake
			seen := map[key]bool{}
			for _, s := range queued {
				if k := (key{s.Owner, s.Ref}); s.Ref != 0 {
					if seen[k] {
						t.Fatalf("two queued submissions of owner %d ref %d", s.Owner, s.Ref)
					}
					seen[k] = true
				}
			}
			if st := g.Status(); st.Queued != len(queued) {
				t.Fatalf("core queues %d, model %d", st.Queued, len(queued))
			}
			limit := float64(cfg.Burst()) + now.Sub(t0).Seconds()*float64(cfg.RateBytesPerSec) + float64(max(maxSize-cfg.Burst(), 0)) + 1
			if float64(admitted) > limit {
				t.Fatalf("admitted %d bytes by %v, limit %.0f", admitted, now.Sub(t0), limit)
			}
		}
		next := uint64(1)
		for i, steps := 0, rapid.IntRange(1, 80).Draw(t, "steps"); i < steps; i++ {
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0, 1:
				s := Submission{ID: next, Size: rapid.Int64Range(1, 2*cfg.Burst()).Draw(t, "size"),
					Owner: rapid.Uint64Range(1, 3).Draw(t, "owner"), Ref: rapid.Uint64Range(0, 4).Draw(t, "ref")}
				next++
				maxSize = max(maxSize, s.Size)
				queued[s.ID] = s
				check(g.Submit(now, s))
			case 2:
				owner := rapid.Uint64Range(1, 3).Draw(t, "cancel")
				for _, id := range g.CancelOwner(owner) {
					if queued[id].Owner != owner {
						t.Fatalf("cancelled %d of owner %d, not %d", id, queued[id].Owner, owner)
					}
					delete(queued, id)
					dead[id] = true
				}
				for _, s := range queued {
					if s.Owner == owner {
						t.Fatalf("owner %d still has %d queued", owner, s.ID)
					}
				}
			default:
				now = now.Add(time.Duration(rapid.Int64Range(0, int64(time.Second)).Draw(t, "advance")))
				check(g.Tick(now))
			}
		}
		for i := 0; len(queued) > 0; i++ {
			if wake <= 0 {
				t.Fatalf("%d submissions queued with no wake-up", len(queued))
			}
			if i > 10*int(next) {
				t.Fatal("no progress: governor deadlocked")
			}
			now = now.Add(wake)
			check(g.Tick(now))
		}
	})
}
