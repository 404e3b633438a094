package main

import (
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/actors/readercore"
)

func TestQuiet(t *testing.T) {
	done := actors.StreamStatus{Phase: "running", LocalCommitted: 100, Core: readercore.Status{PersistedNext: 100, Next: 100, PersistState: "idle"}}
	if !quiet(done) {
		t.Fatal("a stream with everything persisted is not quiet")
	}
	for name, change := range map[string]func(*actors.StreamStatus){
		"resolving":         func(s *actors.StreamStatus) { s.Phase = "resolving" },
		"behind":            func(s *actors.StreamStatus) { s.Core.PersistedNext = 99 },
		"in flight":         func(s *actors.StreamStatus) { s.Core.InFlight = 1 },
		"waiting retry":     func(s *actors.StreamStatus) { s.Core.WaitingRetry = 1 },
		"buffered":          func(s *actors.StreamStatus) { s.Core.Buffered = 1 },
		"unpersisted edits": func(s *actors.StreamStatus) { s.Core.UnpersistedEdits = 1 },
		"assembling":        func(s *actors.StreamStatus) { s.Core.AssemblyBytes = 1 },
		"rebalancing":       func(s *actors.StreamStatus) { s.Core.Rebalancing = true },
		"retention":         func(s *actors.StreamStatus) { s.Core.RetentionBusy = true },
		"persist in flight": func(s *actors.StreamStatus) { s.Core.PersistState = "in-flight" },
		"committed more":    func(s *actors.StreamStatus) { s.LocalCommitted = 101 },
	} {
		s := done
		change(&s)
		if quiet(s) {
			t.Errorf("%s: reported quiet", name)
		}
	}
}

func TestRenderProgress(t *testing.T) {
	now := time.Now()
	st := actors.StreamStatus{Stream: "demo", Phase: "running", LocalCommitted: 500, LocalSegments: 2, LocalBytes: 3 << 20,
		LagBytes: 1 << 20, LagSeconds: 1.5,
		Core: readercore.Status{Next: 400, PersistedNext: 300, AssemblyBytes: 2 << 20, InFlight: 2, InFlightBytes: 16 << 20,
			PersistState: "timer", LastPersistAt: now.Add(-800 * time.Millisecond).UnixMilli(), Stalled: true, StalledOffset: 300, TotalSize: 1 << 30}}
	prev := sample{at: now.Add(-time.Second), uploaded: 0, written: map[string]int64{"demo": 0}, streams: []actors.StreamStatus{st}}
	cur := sample{at: now, uploaded: 20 << 20, written: map[string]int64{"demo": 10 << 20}, streams: []actors.StreamStatus{st}}
	m := &actors.Metrics{}
	m.FragmentsUploaded.Add(3)
	out := strings.Join(renderProgress(prev, cur, header{adminURL: "http://127.0.0.1:1", demoRetention: "keeps the last 4.00 GiB in S3"}, m), "\n")
	for _, want := range []string{"admin http://127.0.0.1:1", "upload 20.0 MiB/s (last 1s)", "demo stream keeps the last 4.00 GiB in S3", "writing 10.0 MiB/s", "committed 500", "uploaded 400",
		"persisted 300", "assembling 2.00 MiB", "2 fragments in flight (16.0 MiB)", "persist timer", "STALLED at 300", "lag        1.00 MiB · 1.5 s",
		"remote 1.00 GiB", "local 2 segments", "in 3 fragments"} {
		if !strings.Contains(out, want) {
			t.Errorf("display lacks %q:\n%s", want, out)
		}
	}
}

// TestRateWindow: the display's rates come from the oldest sample within rateWindow, so
// an upload rate made of whole fragments completing averages over many of them.
func TestRateWindow(t *testing.T) {
	t0 := time.Now()
	var w window
	const frag = 8 << 20
	var up, wr int64
	var prev, cur sample
	for i := range 60 { // 30 s of redraws every 500 ms at 20 MiB/s, fragments of 8 MiB
		at := t0.Add(time.Duration(i) * 500 * time.Millisecond)
		wr = int64(i) * 10 << 20
		up = wr / frag * frag // what whole fragments have been uploaded
		cur = sample{at: at, uploaded: up, written: map[string]int64{"demo": wr}}
		prev = w.add(cur)
	}
	if span := cur.at.Sub(prev.at); span < rateWindow || span > rateWindow+500*time.Millisecond {
		t.Fatalf("window spans %v, want %v", span, rateWindow)
	}
	dt := cur.at.Sub(prev.at).Seconds()
	upRate, wrRate := float64(cur.uploaded-prev.uploaded)/dt, float64(cur.written["demo"]-prev.written["demo"])/dt
	if d := (upRate - wrRate) / wrRate; d > 0.05 || d < -0.05 {
		t.Fatalf("over %v the upload rate %.1f MiB/s and the write rate %.1f MiB/s differ by %.0f%%", cur.at.Sub(prev.at), upRate/(1<<20), wrRate/(1<<20), d*100)
	}
	if len(w.samples) > 22 {
		t.Fatalf("window keeps %d samples", len(w.samples))
	}
}

// TestProgressLogsAQuietStreamOnce: a quiet stream gets a progress line when it becomes
// quiet, and no more while it stays as it was; one that moves or is not quiet gets one
// every time. Ten thousand idle streams logged ten thousand identical lines every five
// seconds, nearly all an idle node allocated.
func TestProgressLogsAQuietStreamOnce(t *testing.T) {
	idle := actors.StreamStatus{Stream: "a", Phase: "running", LocalCommitted: 100, Core: readercore.Status{PersistedNext: 100, Next: 100, PersistState: "idle"}}
	busy := actors.StreamStatus{Stream: "b", Phase: "running", LocalCommitted: 100, LagBytes: 10, Core: readercore.Status{PersistedNext: 90, Next: 100, InFlight: 1}}
	l := newProgressLog(time.Minute)
	if !l.due(idle) || !l.due(busy) {
		t.Fatal("a stream's first line not logged")
	}
	l.endRound()
	for range 3 {
		if l.due(idle) {
			t.Fatal("an unchanged quiet stream logged again")
		}
		if !l.due(busy) {
			t.Fatal("a stream with uploads in flight not logged")
		}
		l.endRound()
	}
	moved := idle
	moved.LocalCommitted, moved.Core.PersistedNext, moved.Core.Next = 120, 120, 120
	if !l.due(moved) || l.due(moved) {
		t.Fatal("a quiet stream that moved: want one line, then none")
	}
	stalled := moved
	stalled.Phase = "metadata_missing"
	if !l.due(stalled) {
		t.Fatal("a phase change not logged")
	}
	l.endRound()
	l.due(busy)
	l.endRound()
	if _, ok := l.streams["a"]; ok || len(l.streams) != 1 {
		t.Fatalf("a stream neither asked nor skipped in a round is kept: %v", l.streams)
	}
}

// TestProgressSkipsAQuietStream: a quiet stream whose local log has not changed is not
// asked for its status again until recheck has passed; a change of its log, or a status
// that was not quiet, has it asked at once.
func TestProgressSkipsAQuietStream(t *testing.T) {
	t0 := time.Now()
	l := newProgressLog(time.Minute)
	idle := actors.StreamStatus{Stream: "a", Phase: "running", LocalCommitted: 100, Core: readercore.Status{PersistedNext: 100, Next: 100, PersistState: "idle"}}
	off := logOffsets{first: 0, committed: 100, next: 100}
	round := func(at time.Time, log logOffsets, st actors.StreamStatus) (asked bool) {
		defer l.endRound()
		if l.skip("a", log, at) {
			return false
		}
		l.due(st)
		return true
	}
	if !round(t0, off, idle) {
		t.Fatal("a new stream not asked")
	}
	for i := 1; i < 12; i++ {
		if round(t0.Add(time.Duration(i)*5*time.Second), off, idle) {
			t.Fatalf("round %d: an unchanged quiet stream asked again", i)
		}
	}
	if !round(t0.Add(time.Minute), off, idle) {
		t.Fatal("not asked again after recheck")
	}
	grown := logOffsets{first: 0, committed: 100, next: 120}
	busy := idle
	busy.LocalNext, busy.LocalCommitted, busy.LagBytes = 120, 120, 20 // committed, not yet persisted
	if !round(t0.Add(65*time.Second), grown, busy) {
		t.Fatal("a stream whose log changed not asked")
	}
	if !round(t0.Add(70*time.Second), grown, busy) {
		t.Fatal("a stream that was not quiet not asked")
	}
	if len(l.streams) != 1 {
		t.Fatalf("%d streams remembered", len(l.streams))
	}
}

// TestWindowKeepsNoStatuses: the rate window keeps only what the rates need; with ten
// thousand streams each sample's statuses were 8 MiB, held three times over.
func TestWindowKeepsNoStatuses(t *testing.T) {
	var w window
	t0 := time.Now()
	for i := range 5 {
		w.add(sample{at: t0.Add(time.Duration(i) * 5 * time.Second), streams: make([]actors.StreamStatus, 100)})
	}
	for i, s := range w.samples {
		if s.streams != nil {
			t.Fatalf("sample %d of the window keeps %d statuses", i, len(s.streams))
		}
	}
}
