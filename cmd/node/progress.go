package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/nodeconfig"
	"github.com/streamtier/streamtier/segments"
)

// display is the live progress block on a terminal: it redraws a few lines in place and
// lets log lines scroll above it (logs written through it erase the block, print, redraw).
type display struct {
	mu     sync.Mutex
	out    io.Writer
	active bool
	block  []string // lines currently drawn
}

func newDisplay(s nodeconfig.Settings, stdout io.Writer) *display {
	active := s.Progress == "terminal" || s.Progress == "auto" && isTerminal(stdout)
	return &display{out: stdout, active: active}
}

// erase moves the cursor to the start of the block and clears to the end of the screen.
func (d *display) erase() {
	if len(d.block) > 0 {
		fmt.Fprintf(d.out, "\x1b[%dF\x1b[J", len(d.block))
	}
}

func (d *display) draw() {
	for _, l := range d.block {
		fmt.Fprintln(d.out, l)
	}
}

// Write prints a log line above the block.
func (d *display) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.active {
		return d.out.Write(p)
	}
	d.erase()
	n, err := d.out.Write(p)
	d.draw()
	return n, err
}

// show replaces the block.
func (d *display) show(lines []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.active {
		return
	}
	d.erase()
	d.block = lines
	d.draw()
}

// stop erases the block; later writes go straight through.
func (d *display) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.active {
		d.erase()
		d.block = nil
		d.active = false
	}
}

// newLogger builds the process logger: console lines on a terminal, JSON otherwise (or as
// log_format says), through the display when it shares the terminal.
func newLogger(s nodeconfig.Settings, stderr io.Writer, d *display) zerolog.Logger {
	level, err := zerolog.ParseLevel(s.LogLevel)
	if err != nil {
		level = zerolog.InfoLevel
	}
	w := stderr
	term := isTerminal(stderr)
	if d.active && term {
		w = d
	}
	if s.LogFormat == "console" || s.LogFormat == "auto" && term {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000"}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}

// sample is one look at the node for the progress display.
type sample struct {
	at       time.Time
	streams  []actors.StreamStatus
	skipped  int              // quiet streams not asked (log mode: see progressLog.skip)
	quiet    int              // quiet streams asked, unchanged since their last line (log mode: progressLog.due)
	uploaded int64            // node-wide fragment bytes uploaded
	written  map[string]int64 // per demo stream, chunk bytes appended to its log
}

// sample asks the node for the status of every open stream, except those skip says to
// leave out this time (nil: none), which it counts in skipped. It keeps the statuses keep
// says to (nil: all) and counts the others in quiet: with ten thousand idle streams, the
// log mode's round every quietRecheck held all their statuses (8 MiB) to log none.
func (p *process) sample(ctx context.Context, skip func(*openStream) bool, keep func(actors.StreamStatus) bool) sample {
	open := p.openStreams()
	sm := sample{at: time.Now(), uploaded: p.node.Metrics().BytesUploaded.Load(), written: map[string]int64{}}
	for _, st := range open {
		if st.demo != nil {
			sm.written[st.id] = st.demo.logBytes.Load()
		}
		if skip != nil && skip(st) {
			sm.skipped++
			continue
		}
		s, err := p.node.Status(ctx, st.id)
		if err != nil {
			s = actors.StreamStatus{Stream: st.id, Phase: "unknown"}
			if p.cluster != nil && errors.Is(err, actors.ErrUnknownStream) {
				continue // replicated here, not written
			}
		}
		if keep != nil && !keep(s) {
			sm.quiet++
			continue
		}
		sm.streams = append(sm.streams, s)
	}
	return sm
}

// askNone is the skip of the first look, which only starts the rates' window.
func askNone(*openStream) bool { return true }

// rateWindow is the span over which the display and the progress line compute the write
// and upload rates: both from the same two samples, and long enough that fragments
// completing in bursts (an 8 MiB one every ~0.4 s at the demo's rate) average out; over
// one 500 ms redraw the upload rate jumped between 0, 16 and 32 MiB/s against a steady
// write rate while the lag stayed flat.
const rateWindow = 10 * time.Second

// window keeps the samples of the last rateWindow; its oldest and newest give the rates.
// It keeps what the rates need (the time, the bytes uploaded and written), not the
// streams' statuses: with ten thousand streams those were 8 MiB a sample, held three times.
type window struct{ samples []sample }

// add appends s (without its statuses) and drops the samples that the next-oldest one
// still covers the window without; it returns the oldest sample kept.
func (w *window) add(s sample) sample {
	s.streams = nil
	w.samples = append(w.samples, s)
	for len(w.samples) > 2 && s.at.Sub(w.samples[1].at) >= rateWindow {
		w.samples = w.samples[1:]
	}
	return w.samples[0]
}

// header is what the first line of the display says besides the rates.
type header struct {
	adminURL string
	// demoRetention is the demo stream's remote retention for the header ("" without a
	// demo stream).
	demoRetention string
}

// progress shows the display (every 500 ms) or logs a progress line per stream (every
// progress_interval) until ctx ends.
func (p *process) progress(ctx context.Context) {
	if p.s.Progress == "off" {
		<-ctx.Done()
		return
	}
	interval := p.s.ProgressInterval
	if p.display.active {
		interval = 500 * time.Millisecond
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	h := header{adminURL: p.admin.URL(), demoRetention: p.demoRetention()}
	var w window
	logged := newProgressLog(quietRecheck)
	var skip func(*openStream) bool
	var keep func(actors.StreamStatus) bool
	if !p.display.active {
		skip = func(st *openStream) bool {
			return st.log != nil && logged.skip(st.id, logOffsetsOf(st.log), time.Now())
		}
		keep = logged.due
	}
	w.add(p.sample(ctx, askNone, nil))
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cur := p.sample(ctx, skip, keep)
		prev := w.add(cur)
		if p.display.active {
			p.display.show(renderProgress(prev, cur, h, p.node.Metrics()))
		} else {
			p.logProgress(prev, cur, logged)
		}
	}
}

// quietRecheck is how long the progress log goes without asking a quiet stream whose local
// log did not change for its status (its phase may change without its log: a lost claim,
// a deleted stream).
const quietRecheck = time.Minute

// progressState is what a stream's progress line said that changes only when the stream
// moves (not its rates or ages).
type progressState struct {
	phase                          string
	committed, uploaded, persisted uint64
	lagBytes                       int64
	remoteBytes                    uint64
}

func stateOf(s actors.StreamStatus) progressState {
	return progressState{phase: s.Phase, committed: s.LocalCommitted, uploaded: s.Core.Next, persisted: s.Core.PersistedNext,
		remoteBytes: s.Core.TotalSize, lagBytes: s.LagBytes}
}

// logOffsets are a local log's offsets, which change whenever its writer appends or
// commits and its retention trims.
type logOffsets struct{ first, committed, next uint64 }

func logOffsetsOf(l *segments.Log) logOffsets {
	return logOffsets{first: l.FirstOffset(), committed: l.CommittedNext(), next: l.NextOffset()}
}

// progressEntry is what the progress log remembers of a stream.
type progressEntry struct {
	state progressState // what its last line said
	quiet bool          // whether its last status was quiet
	log   logOffsets    // its local log when that status was taken
	asked time.Time     // when that status was taken
	round uint64        // the last round that saw the stream
}

// progressLog remembers, per stream, its last progress line and status, so that an idle
// stream is logged once when it becomes quiet and then neither logged nor asked for its
// status at every interval: ten thousand idle streams logged ten thousand identical lines
// every five seconds, and asked ten thousand statuses for them, nearly all an idle node
// allocated.
type progressLog struct {
	recheck time.Duration
	round   uint64
	streams map[string]*progressEntry
}

func newProgressLog(recheck time.Duration) *progressLog {
	return &progressLog{recheck: recheck, streams: map[string]*progressEntry{}}
}

// skip reports whether the stream need not be asked for its status now: its last status
// was quiet, its local log still has the same offsets, and it was asked less than recheck
// ago.
func (l *progressLog) skip(id string, log logOffsets, now time.Time) bool {
	e, ok := l.streams[id]
	if !ok || !e.quiet || e.log != log || now.Sub(e.asked) >= l.recheck {
		if ok {
			e.log, e.asked = log, now // the status asked now goes with these offsets
		} else {
			l.streams[id] = &progressEntry{log: log, asked: now, round: l.round}
		}
		return false
	}
	e.round = l.round + 1
	return true
}

// due reports whether s gets a progress line now: unless it is quiet (everything it
// committed persisted, nothing in flight: see quiet) and its last line said the same. It
// records the status.
func (l *progressLog) due(s actors.StreamStatus) bool {
	st, q := stateOf(s), quiet(s)
	e, ok := l.streams[s.Stream]
	if !ok {
		e = &progressEntry{}
		l.streams[s.Stream] = e
	}
	e.round, e.quiet = l.round+1, q
	if ok && e.state == st && q && e.state.phase != "" {
		return false
	}
	e.state = st
	return true
}

// endRound forgets the streams that this round neither asked nor skipped (removed from
// the node).
func (l *progressLog) endRound() {
	l.round++
	for id, e := range l.streams {
		if e.round < l.round {
			delete(l.streams, id)
		}
	}
}

// demoRetention describes the demo stream's remote retention for the display.
func (p *process) demoRetention() string {
	if !p.s.Demo {
		return ""
	}
	pol := p.s.Retention(p.s.DemoStreamSettings())
	var parts []string
	if pol.MaxBytes > 0 {
		parts = append(parts, "the last "+human(pol.MaxBytes))
	}
	if pol.MaxAgeMillis > 0 {
		parts = append(parts, "at most "+dur(time.Duration(pol.MaxAgeMillis)*time.Millisecond)+" old")
	}
	if len(parts) == 0 {
		return "keeps everything in S3 (no retention)"
	}
	return "keeps " + strings.Join(parts, ", ") + " in S3"
}

// logProgress logs a progress line for each stream of cur (those that moved since their
// last line or are not quiet: the sample kept only those, progressLog.due), and one line
// counting the quiet streams left out.
func (p *process) logProgress(prev, cur sample, logged *progressLog) {
	dt := cur.at.Sub(prev.at).Seconds()
	defer logged.endRound()
	unchanged := cur.skipped + cur.quiet
	for _, s := range cur.streams {
		c := s.Core
		ev := p.log.Info().Str("stream", s.Stream).Str("phase", s.Phase).
			Uint64("committed", s.LocalCommitted).Uint64("uploaded", c.Next).Uint64("persisted", c.PersistedNext).
			Uint64("remote_bytes", c.TotalSize).Int("in_flight", c.InFlight).Int64("lag_bytes", s.LagBytes).
			Float64("lag_seconds", round2(s.LagSeconds)).Float64("upload_mb_per_s", round2(float64(cur.uploaded-prev.uploaded)/dt/1e6)).
			Dur("rate_window", cur.at.Sub(prev.at).Round(time.Millisecond))
		if w, ok := cur.written[s.Stream]; ok {
			if pw, had := prev.written[s.Stream]; had {
				ev = ev.Float64("write_mb_per_s", round2(float64(w-pw)/dt/1e6))
			}
		}
		if c.LastPersistAt > 0 {
			ev = ev.Float64("last_persist_age_seconds", round2(time.Since(time.UnixMilli(c.LastPersistAt)).Seconds()))
		}
		if c.Stalled {
			ev = ev.Uint64("stalled_at", c.StalledOffset)
		}
		if c.Paused {
			ev = ev.Uint64("paused_bytes_awaiting_upload", c.HeldBytes)
		}
		if c.DrainStalled {
			ev = ev.Uint64("drain_stalled_at", c.DrainStalledOffset).Str("drain_stall", c.DrainStallReason)
		}
		if s.StopReason != "" {
			ev = ev.Str("stopped", s.StopReason)
		}
		ev.Msg("progress")
	}
	if unchanged > 0 {
		p.log.Info().Int("streams", len(cur.streams)+unchanged).Int("quiet_unchanged", unchanged).
			Msg("progress: quiet streams unchanged since their last progress line are not logged again")
	}
}

func round2(f float64) float64 { return float64(int64(f*100+0.5)) / 100 }

// renderProgress draws the display's lines from two samples. It is pure.
// The rates are over the same span, prev to cur (up to rateWindow).
func renderProgress(prev, cur sample, h header, m *actors.Metrics) []string {
	dt := cur.at.Sub(prev.at).Seconds()
	if dt <= 0 {
		dt = 1
	}
	out := []string{fmt.Sprintf("streamtier · admin %s · upload %s/s (last %s) · Ctrl-C stops cleanly",
		h.adminURL, human(float64(cur.uploaded-prev.uploaded)/dt), dur(cur.at.Sub(prev.at)))}
	if h.demoRetention != "" {
		out = append(out, "  demo stream "+h.demoRetention+" (--demo-retention-max-bytes or --retention-max-bytes to change)")
	}
	for _, s := range cur.streams {
		c := s.Core
		in := ""
		w, ok := cur.written[s.Stream]
		if pw, had := prev.written[s.Stream]; ok && had {
			w -= pw
			in = fmt.Sprintf(" · writing %s/s", human(float64(w)/dt))
		}
		last := "no persist yet"
		if c.LastPersistAt > 0 {
			last = "last persist " + ago(time.Since(time.UnixMilli(c.LastPersistAt)).Seconds()) + " ago"
		}
		stalled := ""
		if c.Stalled {
			stalled = fmt.Sprintf(" · STALLED at %d", c.StalledOffset)
		}
		if c.Paused {
			stalled += fmt.Sprintf(" · paused: %s awaiting upload", human(float64(c.HeldBytes)))
		}
		if c.DrainStalled {
			stalled += fmt.Sprintf(" · DRAIN STALLED at %d", c.DrainStalledOffset)
		}
		if s.StopReason != "" {
			out = append(out, fmt.Sprintf("  %s [%s] %s", s.Stream, s.Phase, s.StopReason))
			continue
		}
		out = append(out,
			fmt.Sprintf("  %s [%s]%s", s.Stream, s.Phase, in),
			fmt.Sprintf("    offsets    committed %d · uploaded %d · persisted %d", s.LocalCommitted, c.Next, c.PersistedNext),
			fmt.Sprintf("    pipeline   assembling %s · %d fragments in flight (%s) · persist %s, %s%s",
				human(c.AssemblyBytes), c.InFlight+c.WaitingRetry+c.Buffered, human(c.InFlightBytes), c.PersistState, last, stalled),
			fmt.Sprintf("    lag        %s · %.1f s · remote %s · local %d segments, %s",
				human(s.LagBytes), s.LagSeconds, human(c.TotalSize), s.LocalSegments, human(s.LocalBytes)),
		)
	}
	p50, p99, _, _ := m.LatencyQuantiles()
	out = append(out, fmt.Sprintf("  tiered %s in %d fragments · %d persists (p50 %s, p99 %s)",
		human(m.BytesUploaded.Load()), m.FragmentsUploaded.Load(), m.Persists.Load(), dur(p50), dur(p99)))
	return out
}
