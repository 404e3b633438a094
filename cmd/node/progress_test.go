package main

import (
	"strings"
	"testing"
	"time"

	"streamtier/actors"
	"streamtier/actors/readercore"
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
	out := strings.Join(renderProgress(prev, cur, "http://127.0.0.1:1", m), "\n")
	for _, want := range []string{"admin http://127.0.0.1:1", "upload 20.0 MiB/s", "writing 10.0 MiB/s", "committed 500", "uploaded 400",
		"persisted 300", "assembling 2.00 MiB", "2 fragments in flight (16.0 MiB)", "persist timer", "STALLED at 300", "lag        1.00 MiB · 1.5 s",
		"remote 1.00 GiB", "local 2 segments", "in 3 fragments"} {
		if !strings.Contains(out, want) {
			t.Errorf("display lacks %q:\n%s", want, out)
		}
	}
}
