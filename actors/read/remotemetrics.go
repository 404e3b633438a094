package actors

import (
	"sync/atomic"
	"time"
)

// Error classes of RemoteReadStats.Errors (a remote source's GETs; ReadErrorClass classifies a reader's final error).
const (
	RemoteErrRetriable = iota // 5xx, throttling, resets, timeouts, cut bodies: retried
	RemoteErrNotFound         // 404: retention raced the read (or the manifest lagged)
	RemoteErrFatal            // 403, corrupt objects or manifests: the read fails
	remoteErrClasses
)

// RemoteReadStats are the remote readers' counters and gauges, node-wide.
type RemoteReadStats struct {
	Bytes       atomic.Int64 // bytes of range GET bodies received
	GETs        atomic.Int64 // range GETs issued
	Concurrency atomic.Int64 // range GETs the open readers allow in flight (the search's levels, summed)
	Buffered    atomic.Int64 // bytes the open readers hold against their budget, summed
	Open        atomic.Int64 // remote readers open
	Errors      [remoteErrClasses]atomic.Int64

	firstChunk latencies // recent times from open to the first chunk
}

func (s *RemoteReadStats) observeFirstChunk(d time.Duration) {
	s.firstChunk.add(d)
}

// FirstChunkQuantiles returns the p50 and p99 of recent times from opening a remote read
// to its first chunk.
func (s *RemoteReadStats) FirstChunkQuantiles() (p50, p99 time.Duration) {
	return s.firstChunk.quantiles()
}
