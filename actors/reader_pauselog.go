package actors

import (
	"time"

	"github.com/rs/zerolog"
)

// pauseLogEvery is the least time between two flow-control summary lines of a stream. A
// drain pauses at max_unpersisted_bytes and resumes at the next persist: under a write rate
// S3 cannot follow that is several times a second (461 pauses and 461 resumes in 35 s, 95%
// of an embedding broker's log when each was a line).
const pauseLogEvery = time.Minute

// pauseLog keeps flow-control pauses out of the way of what needs a person. The first
// pause of a reader is a warning at once (the local log grows while uploads catch up); every
// pause and resume is a debug line; the rest are summed into one line at most once per
// pauseLogEvery: how many pauses and how long the drain was paused. The summary is a
// warning when the drain was paused for most of its window (uploads cannot keep up with the
// writes: the local log grows without bound), info otherwise. Like retentionLog it holds
// no goroutine: a pause, a resume or the reader's stop writes what is due.
type pauseLog struct {
	last     time.Time     // when the last line was written (zero: never)
	since    time.Time     // start of the window the pending summary covers
	pauses   int           // pauses in the window
	paused   time.Duration // time paused in the window, over the pauses that ended
	pausedAt time.Time     // start of the current pause; zero while the drain runs
	held     uint64        // held bytes at the last pause
	bound    uint64
}

// pause notes a pause of the drain at bound, with held bytes awaiting upload.
func (l *pauseLog) pause(log zerolog.Logger, now time.Time, held, bound uint64) {
	log.Debug().Uint64("held_bytes", held).Uint64("bound", bound).Msg("drain paused")
	l.pausedAt, l.held, l.bound = now, held, bound
	if l.last.IsZero() {
		log.Warn().Uint64("held_bytes", held).Uint64("bound", bound).Dur("summary_every", pauseLogEvery).
			Msg("drain paused: bytes awaiting upload reached max_unpersisted_bytes; the local log grows on until uploads catch up (later pauses are summed)")
		*l = pauseLog{last: now, since: now, pausedAt: now, held: held, bound: bound}
		return
	}
	l.pauses++
	if now.Sub(l.last) >= pauseLogEvery {
		l.flush(log, now)
	}
}

// resume notes the drain's resume.
func (l *pauseLog) resume(log zerolog.Logger, now time.Time, from, held, bound uint64) {
	log.Debug().Uint64("from", from).Uint64("held_bytes", held).Uint64("bound", bound).Msg("drain resumed")
	if !l.pausedAt.IsZero() {
		l.paused += now.Sub(l.pausedAt)
		l.pausedAt = time.Time{}
	}
	if !l.last.IsZero() && now.Sub(l.last) >= pauseLogEvery {
		l.flush(log, now)
	}
}

// flush writes the pending summary, if any pause happened since the last line.
func (l *pauseLog) flush(log zerolog.Logger, now time.Time) {
	if l.pauses == 0 {
		return
	}
	paused := l.paused
	if !l.pausedAt.IsZero() {
		paused += now.Sub(l.pausedAt)
	}
	window := now.Sub(l.since)
	ev := log.Info()
	msg := "drain paused now and then at max_unpersisted_bytes (flow control)"
	if window > 0 && paused*2 >= window {
		ev = log.Warn()
		msg = "drain paused most of the time at max_unpersisted_bytes: uploads do not keep up with the writes and the local log grows"
	}
	ev.Int("pauses", l.pauses).Dur("paused", paused.Round(time.Millisecond)).Dur("over", window.Round(time.Millisecond)).
		Uint64("held_bytes", l.held).Uint64("bound", l.bound).Msg(msg)
	pausedAt := l.pausedAt
	if !pausedAt.IsZero() {
		pausedAt = now // the current pause counts in the next window from now on
	}
	*l = pauseLog{last: now, since: now, pausedAt: pausedAt, held: l.held, bound: l.bound}
}
