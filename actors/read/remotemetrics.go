package read

import (
	"sync/atomic"
	"time"

	"github.com/streamtier/streamtier/actors/internal/shell"
)

// Error classes of RemoteStats.Errors (a remote source's GETs; ErrorClass classifies a reader's final error).
const (
	RemoteErrRetriable = iota // 5xx, throttling, resets, timeouts, cut bodies: retried
	RemoteErrNotFound         // 404: retention raced the read (or the manifest lagged)
	RemoteErrFatal            // 403, corrupt objects or manifests: the read fails
	remoteErrClasses
)

// RemoteStats are the remote readers' counters and gauges, node-wide.
type RemoteStats struct {
	Bytes       atomic.Int64 // bytes of range GET bodies received
	GETs        atomic.Int64 // range GETs issued
	Concurrency atomic.Int64 // range GETs the open readers allow in flight (the search's levels, summed)
	Buffered    atomic.Int64 // bytes the open readers hold against their budget, summed
	Open        atomic.Int64 // remote readers open
	Errors      [remoteErrClasses]atomic.Int64
	// LearnedConcurrency is the level the node's reads last settled at (Budget.Learned; 0:
	// none yet): where the next read's search starts.
	LearnedConcurrency atomic.Int64

	firstChunk shell.Latencies // recent times from open to the first chunk
}

// RemoteErrorClasses names RemoteStats.Errors' classes, in index order, for metrics.
func RemoteErrorClasses() []string { return []string{"retriable", "not_found", "fatal"} }

func (s *RemoteStats) observeFirstChunk(d time.Duration) {
	s.firstChunk.Add(d)
}

// FirstChunkQuantiles returns the p50 and p99 of recent times from opening a remote read
// to its first chunk.
func (s *RemoteStats) FirstChunkQuantiles() (p50, p99 time.Duration) {
	return s.firstChunk.Quantiles()
}
