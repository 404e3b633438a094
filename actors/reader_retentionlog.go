package actors

import (
	"time"

	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors/readercore"
	"github.com/streamtier/streamtier/manifest"
)

// retentionLogEvery is the least time between two remote retention log lines of a stream.
// Retention evaluates after persists: at 100 MB/s it dropped a prefix three times a second,
// and a line per evaluation (96 in 33 s) buried everything else.
const retentionLogEvery = 30 * time.Second

// retentionLog sums what remote retention changed since its last line and says it at most
// once per retentionLogEvery: the first change at once (retention has begun), the rest
// summed. Each evaluation is a debug line. It holds no goroutine: a change, a stop or a
// restart writes what is due (flush on stop writes what is pending).
type retentionLog struct {
	last    time.Time // when the last line was written (zero: never)
	since   time.Time // first change summed into the pending line
	runs    int       // evaluations summed
	removed int       // manifest entries dropped
	deletes int       // objects queued for deletion after the persist
	bytes   int64     // bytes dropped from the remote tier
	first   uint64    // the first offset held remotely after the latest change
}

// note sums one evaluation's edit and writes the line when one is due.
func (l *retentionLog) note(log zerolog.Logger, now time.Time, e manifest.Edit, deferred int) {
	if ev := log.Debug(); ev.Enabled() {
		ev.Str("edit", readercore.FormatEdit(e)).Int("deferred_deletes", deferred).Msg("remote retention evaluated")
	}
	if l.runs == 0 {
		l.since = now
	}
	l.runs++
	l.removed += e.Remove
	l.deletes += deferred
	l.bytes -= e.SizeDelta
	l.first = e.FirstOffset
	if l.last.IsZero() || now.Sub(l.last) >= retentionLogEvery {
		l.flush(log, now)
	}
}

// flush writes the pending line, if any.
func (l *retentionLog) flush(log zerolog.Logger, now time.Time) {
	if l.runs == 0 {
		return
	}
	log.Info().Int("evaluations", l.runs).Int("entries_dropped", l.removed).Int("objects_to_delete", l.deletes).
		Int64("bytes_dropped", l.bytes).Uint64("first_offset", l.first).Dur("over", now.Sub(l.since)).
		Msg("remote retention dropped the oldest data")
	*l = retentionLog{last: now}
}
