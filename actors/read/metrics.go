package actors

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/segments"
)

// ReadErrorClass is what kind of failure ended a read, for the read error counters.
type ReadErrorClass uint8

// Classes of read errors.
const (
	// ReadErrUnavailable: the manifest was not resolved yet (ErrReadUnavailable).
	ReadErrUnavailable ReadErrorClass = iota
	// ReadErrCorrupt: bytes that do not verify, remote or local.
	ReadErrCorrupt
	// ReadErrMissing: an object the manifest names is not in S3 (ErrRemoteMissing).
	ReadErrMissing
	// ReadErrRemote: S3 or etcd failing past the retries the caller's context allowed.
	ReadErrRemote
	// ReadErrLocal: the local log failing (a closed log, an I/O error).
	ReadErrLocal
	// ReadErrCanceled: the caller's context ended.
	ReadErrCanceled
	// ReadErrOther: bad input (an offset ahead of the log, a bad spec) and the rest.
	ReadErrOther
	readErrClasses
)

// String names the class as the metric label has it.
func (c ReadErrorClass) String() string {
	return [...]string{"unavailable", "corrupt", "missing", "remote", "local", "canceled", "other"}[c]
}

// ReadErrorClasses lists every class, for exporters.
func ReadErrorClasses() []ReadErrorClass {
	out := make([]ReadErrorClass, readErrClasses)
	for i := range out {
		out[i] = ReadErrorClass(i)
	}
	return out
}

// ClassifyReadError says which class a reader's error falls in.
func ClassifyReadError(err error) ReadErrorClass {
	switch {
	case errors.Is(err, ErrReadUnavailable):
		return ReadErrUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ReadErrCanceled
	case errors.Is(err, ErrRemoteCorrupt), errors.Is(err, fragment.ErrCorrupt), errors.Is(err, segments.ErrChunkCRC):
		return ReadErrCorrupt
	case errors.Is(err, ErrRemoteMissing):
		return ReadErrMissing
	case errors.Is(err, ErrOffsetAhead), errors.Is(err, ErrBadReadFrom), errors.Is(err, ErrUnknownStream):
		return ReadErrOther
	case errors.Is(err, segments.ErrClosed), errors.Is(err, segments.ErrSegmentGone):
		return ReadErrLocal
	case s3io.Classify(err) == s3io.ClassRetriable, s3io.Classify(err) == s3io.ClassNonTransient:
		return ReadErrRemote
	}
	return ReadErrOther
}

// ReadMetrics are the cross-tier readers' counters (they only rise) and gauges. The remote
// source's own figures (GETs, concurrency, buffered bytes) are its own.
type ReadMetrics struct {
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

	firstChunk latencies // recent times from open to the first chunk
}

func (m *ReadMetrics) observe(it ReadItem) {
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

func (m *ReadMetrics) countError(err error) { m.Errors[ClassifyReadError(err)].Add(1) }

func (m *ReadMetrics) observeFirstChunk(d time.Duration) {
	m.firstChunk.add(d)
}

// FirstChunkQuantiles returns the p50 and p99 of recent readers' time from open to their
// first chunk.
func (m *ReadMetrics) FirstChunkQuantiles() (p50, p99 time.Duration) {
	return m.firstChunk.quantiles()
}
