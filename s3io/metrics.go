package s3io

import (
	"errors"
	"sync/atomic"
	"time"

	smithy "github.com/aws/smithy-go"
)

// Op names an S3 operation for metrics. One S3 request is one observation: a list of three
// pages counts three, a delete of 2500 keys counts three batches.
type Op int

// Operations observed by a Store.
const (
	OpPutFragment Op = iota
	OpPutObject
	OpGetObject
	OpGetRange
	OpHead
	OpDeleteObjects
	OpList
	OpEnsureBucket
	OpProbe
	// NumOps counts the operations above; it sizes per-operation arrays.
	NumOps
)

// String names the operation as a metric label.
func (o Op) String() string {
	switch o {
	case OpPutFragment:
		return "put_fragment"
	case OpPutObject:
		return "put_object"
	case OpGetObject:
		return "get_object"
	case OpGetRange:
		return "get_range"
	case OpHead:
		return "head"
	case OpDeleteObjects:
		return "delete_objects"
	case OpList:
		return "list"
	case OpEnsureBucket:
		return "ensure_bucket"
	case OpProbe:
		return "probe"
	}
	return "unknown"
}

// LatencyBuckets are the upper bounds of the latency histogram buckets; a last implicit
// bucket counts everything slower.
var LatencyBuckets = [...]time.Duration{
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second,
	10 * time.Second, 30 * time.Second, time.Minute,
}

// Metrics counts requests per operation and outcome class, bytes moved, and request latency
// in fixed buckets. All fields are atomics; a Store updates them, anyone may Snapshot.
// A 404 (no such key or bucket) is counted apart, as NotFound, and not as an error: it is
// how the system learns that an object does not exist yet (a new stream's root, a bucket
// to create), an answer rather than a failure. Its error class is unchanged (Classify).
type Metrics struct {
	ops     [NumOps]opMetrics
	streams streamTally
}

type opMetrics struct {
	byClass  [NumClasses]atomic.Uint64
	notFound atomic.Uint64 // 404 answers, not in byClass
	refused  atomic.Uint64 // 412 answers to conditional puts, not in byClass
	bytes    atomic.Uint64
	buckets  [len(LatencyBuckets) + 1]atomic.Uint64
	sumNs    atomic.Int64
}

// observe records one request of op on key (an object key or a list prefix, for the
// per-stream counts) that took d, moved n bytes and ended with err.
func (m *Metrics) observe(op Op, key string, d time.Duration, n int64, err error) {
	m.streams.add(key, op)
	o := &m.ops[op]
	switch {
	case expectedNotFound(op, err):
		o.notFound.Add(1)
	case op == OpPutObject && IsPreconditionFailed(err):
		o.refused.Add(1) // only conditional puts carry a precondition
	default:
		o.byClass[Classify(err)].Add(1)
	}
	if n > 0 {
		o.bytes.Add(uint64(n))
	}
	i := 0
	for i < len(LatencyBuckets) && d > LatencyBuckets[i] {
		i++
	}
	o.buckets[i].Add(1)
	o.sumNs.Add(int64(d))
}

// expectedNotFound reports a 404 that answers a question: a GET or HEAD of a key that does
// not exist (yet), or the bucket check before the bucket is created. A 404 to a PUT, a
// LIST or a DELETE, or a missing bucket anywhere else, is an error.
func expectedNotFound(op Op, err error) bool {
	if err == nil || !IsNotFound(err) {
		return false
	}
	switch op {
	case OpEnsureBucket:
		return true
	case OpGetObject, OpGetRange, OpHead:
		var apiErr smithy.APIError
		return !errors.As(err, &apiErr) || apiErr.ErrorCode() != "NoSuchBucket"
	}
	return false
}

// OpSnapshot is a copy of one operation's counters.
type OpSnapshot struct {
	Op       Op
	Requests uint64                          // all requests
	ByClass  [NumClasses]uint64              // requests by Class of their outcome (ClassNone = success), 404s aside
	NotFound uint64                          // requests answered 404: an answer, not an error
	Refused  uint64                          // conditional puts answered 412 (the key exists, or its ETag moved): an answer, not an error
	Bytes    uint64                          // payload bytes sent or received
	Buckets  [len(LatencyBuckets) + 1]uint64 // latency histogram (non-cumulative), last is +Inf
	Sum      time.Duration                   // total latency
}

// Errors is the number of failed requests; a 404 or a refused conditional put is not one.
func (s OpSnapshot) Errors() uint64 {
	return s.Requests - s.ByClass[ClassNone] - s.NotFound - s.Refused
}

// MetricsSnapshot holds every operation's counters, indexed by Op.
type MetricsSnapshot [NumOps]OpSnapshot

// Snapshot copies every operation's counters (each counter is read atomically; the set is
// not one instant, which metrics do not need).
func (m *Metrics) Snapshot() MetricsSnapshot {
	var out MetricsSnapshot
	for op := range out {
		o := &m.ops[op]
		s := OpSnapshot{Op: Op(op), Bytes: o.bytes.Load(), Sum: time.Duration(o.sumNs.Load()), NotFound: o.notFound.Load(), Refused: o.refused.Load()}
		s.Requests = s.NotFound + s.Refused
		for c := range s.ByClass {
			s.ByClass[c] = o.byClass[c].Load()
			s.Requests += s.ByClass[c]
		}
		for b := range s.Buckets {
			s.Buckets[b] = o.buckets[b].Load()
		}
		out[op] = s
	}
	return out
}

// Streams counts the requests of each stream by kind since the store was made; requests of
// no single stream are under "".
func (m *Metrics) Streams() map[string]StreamRequests { return m.streams.snapshot() }
