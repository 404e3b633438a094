package actors

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors/governorcore"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// Pauses at the memory bound many times a second: the first is a warning at once, each is
// a debug line, the rest are summed into one line a minute, a warning only when the drain
// was paused for most of that minute.
func TestPauseLogRateLimits(t *testing.T) {
	log, logs := testLogger(t)
	log = log.Level(zerolog.InfoLevel) // as a node runs by default
	var l pauseLog
	t0 := time.Unix(1_700_000_000, 0)
	now := t0
	// 120 pauses of 100 ms every 250 ms: 30 s, 40% paused.
	for range 120 {
		l.pause(log, now, 100, 64)
		now = now.Add(100 * time.Millisecond)
		l.resume(log, now, 1, 10, 64)
		now = now.Add(150 * time.Millisecond)
	}
	if n := logs.Count("drain paused"); n != 1 || logs.Count(`"level":"warn"`, "drain paused") != 1 {
		t.Fatalf("%d pause lines in 30 s, want the first one alone, a warning", n)
	}
	// The next 30 s: the minute is up at the first pause after 60 s from the first line.
	for range 121 {
		l.pause(log, now, 100, 64)
		now = now.Add(100 * time.Millisecond)
		l.resume(log, now, 1, 10, 64)
		now = now.Add(150 * time.Millisecond)
	}
	if n := logs.Count(`"level":"info"`, `"pauses":240`, "drain paused now and then"); n != 1 {
		t.Fatalf("%d summaries of 240 pauses at info, want 1: %d lines", n, logs.Count("drain"))
	}
	// A drain paused nearly all the time: the summary is a warning.
	for range 300 {
		l.pause(log, now, 100, 64)
		now = now.Add(240 * time.Millisecond)
		l.resume(log, now, 1, 10, 64)
		now = now.Add(10 * time.Millisecond)
	}
	if n := logs.Count(`"level":"warn"`, "drain paused most of the time"); n != 1 {
		t.Fatalf("%d warnings for a drain paused 96%% of the time, want 1", n)
	}
	// What is pending when the reader stops is written then.
	l.pause(log, now, 100, 64)
	l.flush(log, now.Add(time.Second))
	if lines := logs.Count("drain paused"); lines != 4 {
		t.Fatalf("%d pause lines after the flush, want 4", lines)
	}
}

// recordHandler keeps every slog record a node writes, for a test to read.
type recordHandler struct {
	mu   *sync.Mutex
	recs *[]slog.Record
}

func newRecordHandler() recordHandler {
	return recordHandler{mu: &sync.Mutex{}, recs: &[]slog.Record{}}
}

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.recs = append(*h.recs, r.Clone())
	return nil
}
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordHandler) WithGroup(string) slog.Handler      { return h }

// count is how many records at level hold every part in their message or attributes.
func (h recordHandler) count(level slog.Level, parts ...string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range *h.recs {
		if r.Level != level {
			continue
		}
		text := r.Message
		r.Attrs(func(a slog.Attr) bool { text += " " + a.Key + "=" + a.Value.String(); return true })
		all := true
		for _, p := range parts {
			all = all && strings.Contains(text, p)
		}
		if all {
			n++
		}
	}
	return n
}

// A node given an *slog.Logger logs through it, with levels and fields. Under a governor
// rate far below what the log holds, the drain pauses at the bound again and again: one
// warning, the rest at debug. A log that starts above offset 0 is said to start there (info),
// not to have lost offsets.
func TestNodeSlogPausesAndLogStart(t *testing.T) {
	w := newWorld(t, worldOptions{})
	h := newRecordHandler()
	n := startNode(w, Config{Slog: slog.New(h), Governor: governorcore.Config{RateBytesPerSec: 2 << 20, BurstBytes: 64 << 10},
		Stream: StreamOptions{FragmentTargetSize: 32 << 10, MaxUnpersistedBytes: 32 << 10, PersistThreshold: 1,
			PersistInterval: 20 * time.Millisecond}})
	lg := openLog(t, segments.Options{FirstOffset: 1000, MaxSegmentBytes: 256 << 10})
	writeLog(t, lg, 11, loadgen.Limit{Bytes: 1 << 20})
	if err := n.AddStream(StreamSpec{ID: "slow", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	persisted(t, n, "slow", lg.NextOffset(), 60*time.Second)
	pauses := n.Metrics().DrainPauses.Load()
	t.Logf("%d pauses", pauses)
	if pauses < 5 {
		t.Fatalf("%d pauses: the test did not make the drain pause often", pauses)
	}
	if got := h.count(slog.LevelInfo, "stream added", "stream=slow", "node="); got != 1 {
		t.Errorf("%d info records \"stream added\" with the stream and node fields, want 1", got)
	}
	if got := h.count(slog.LevelWarn, "drain paused"); got != 1 {
		t.Errorf("%d warnings about pauses for %d pauses, want 1", got, pauses)
	}
	if got := h.count(slog.LevelDebug, "drain paused"); int64(got) != pauses {
		t.Errorf("%d debug records of pauses, want %d", got, pauses)
	}
	if got := h.count(slog.LevelInfo, "the local log starts at offset 1000"); got != 1 {
		t.Errorf("%d info records saying the log starts at 1000, want 1", got)
	}
	for _, l := range []slog.Level{slog.LevelInfo, slog.LevelWarn, slog.LevelError} {
		if got := h.count(l, "lost offsets"); got != 0 {
			t.Errorf("%d records at %s say offsets were lost", got, l)
		}
	}
}
