package read

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/streamtier/streamtier/actors/internal/shell"
	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/segments"
)

// ErrorClass is what kind of failure ended a read, for the read error counters.
type ErrorClass uint8

// Classes of read errors.
const (
	// ClassUnavailable: the manifest was not resolved yet (ErrUnavailable).
	ClassUnavailable ErrorClass = iota
	// ClassCorrupt: bytes that do not verify, remote or local.
	ClassCorrupt
	// ClassMissing: an object the manifest names is not in S3 (ErrRemoteMissing).
	ClassMissing
	// ClassRemote: S3 or etcd failing past the retries the caller's context allowed.
	ClassRemote
	// ClassLocal: the local log failing (a closed log, an I/O error).
	ClassLocal
	// ClassCanceled: the caller's context ended.
	ClassCanceled
	// ClassOther: bad input (an offset ahead of the log, a bad spec) and the rest.
	ClassOther
	readErrClasses
)

// String names the class as the metric label has it.
func (c ErrorClass) String() string {
	return [...]string{"unavailable", "corrupt", "missing", "remote", "local", "canceled", "other"}[c]
}

// ErrorClasses lists every class, for exporters.
func ErrorClasses() []ErrorClass {
	out := make([]ErrorClass, readErrClasses)
	for i := range out {
		out[i] = ErrorClass(i)
	}
	return out
}

// ClassifyError says which class a reader's error falls in.
func ClassifyError(err error) ErrorClass {
	switch {
	case errors.Is(err, ErrUnavailable):
		return ClassUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ClassCanceled
	case errors.Is(err, ErrRemoteCorrupt), errors.Is(err, fragment.ErrCorrupt), errors.Is(err, segments.ErrChunkCRC):
		return ClassCorrupt
	case errors.Is(err, ErrRemoteMissing):
		return ClassMissing
	case errors.Is(err, ErrOffsetAhead), errors.Is(err, ErrBadFrom), errors.Is(err, ErrUnknownStream):
		return ClassOther
	case errors.Is(err, segments.ErrClosed), errors.Is(err, segments.ErrSegmentGone):
		return ClassLocal
	case s3io.Classify(err) == s3io.ClassRetriable, s3io.Classify(err) == s3io.ClassNonTransient:
		return ClassRemote
	}
	return ClassOther
}

// Metrics are the cross-tier readers' counters (they only rise) and gauges. The remote
// source's own figures (GETs, concurrency, buffered bytes) are its own.
type Metrics struct {
	ReadersOpen   atomic.Int64 // gauge: readers open now
	ReadersOpened atomic.Int64
	ChunksLocal   atomic.Int64
	ChunksRemote  atomic.Int64
	BytesLocal    atomic.Int64 // chunk bytes delivered from the local log
	BytesRemote   atomic.Int64 // chunk bytes delivered from the remote tier
	Gaps          atomic.Int64 // declared gaps delivered
	Skipped       atomic.Int64 // ranges skipped because remote retention raced a reader
	Handoffs      atomic.Int64 // readers that moved from the remote tier to the local log
	Errors        [readErrClasses]atomic.Int64

	firstChunk shell.Latencies // recent times from open to the first chunk
}

func (m *Metrics) observe(it Item) {
	switch {
	case it.Kind == ItemGap:
		m.Gaps.Add(1)
	case it.Kind == ItemSkipped:
		m.Skipped.Add(1)
	case it.Tier == TierLocal:
		m.ChunksLocal.Add(1)
		m.BytesLocal.Add(int64(len(it.Chunk)))
	default:
		m.ChunksRemote.Add(1)
		m.BytesRemote.Add(int64(len(it.Chunk)))
	}
}

func (m *Metrics) countError(err error) { m.Errors[ClassifyError(err)].Add(1) }

func (m *Metrics) observeFirstChunk(d time.Duration) {
	m.firstChunk.Add(d)
}

// FirstChunkQuantiles returns the p50 and p99 of recent readers' time from open to their
// first chunk.
func (m *Metrics) FirstChunkQuantiles() (p50, p99 time.Duration) {
	return m.firstChunk.Quantiles()
}

// FirstChunkTotals returns how many readers got a first chunk and the sum of their times
// from open to it: with FirstChunkQuantiles, a Prometheus summary.
func (m *Metrics) FirstChunkTotals() (count uint64, sum time.Duration) {
	return m.firstChunk.Totals()
}
