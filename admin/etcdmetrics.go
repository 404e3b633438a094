package admin

import (
	"context"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/s3io"
)

// etcdOps names the key-value operations counted, as metric labels.
var etcdOps = [...]string{"get", "put", "delete", "txn", "compact", "do"}

const (
	opGet = iota
	opPut
	opDelete
	opTxn
	opCompact
	opDo
)

// EtcdMetrics counts a client's key-value requests by operation and outcome, with
// latency in the same buckets as the S3 metrics. Install it with InstrumentEtcd.
type EtcdMetrics struct {
	ops [len(etcdOps)]etcdOp
}

type etcdOp struct {
	ok, retriable, other atomic.Uint64
	buckets              [len(s3io.LatencyBuckets) + 1]atomic.Uint64
	sumNs                atomic.Int64
}

func (m *EtcdMetrics) observe(op int, start time.Time, err error) {
	o := &m.ops[op]
	switch {
	case err == nil:
		o.ok.Add(1)
	case metadata.IsRetriable(err):
		o.retriable.Add(1)
	default:
		o.other.Add(1)
	}
	d := time.Since(start)
	i := 0
	for i < len(s3io.LatencyBuckets) && d > s3io.LatencyBuckets[i] {
		i++
	}
	o.buckets[i].Add(1)
	o.sumNs.Add(int64(d))
}

// EtcdOpSnapshot is a copy of one operation's counters.
type EtcdOpSnapshot struct {
	Op        string
	Requests  uint64
	Retriable uint64 // failed with a retriable error (unreachable, no leader, timeout)
	Other     uint64 // failed otherwise
	Buckets   [len(s3io.LatencyBuckets) + 1]uint64
	Sum       time.Duration
}

// EtcdSnapshot holds every operation's counters.
type EtcdSnapshot struct {
	Ops []EtcdOpSnapshot
}

// Snapshot copies the counters (nil-safe: a nil EtcdMetrics has none).
func (m *EtcdMetrics) Snapshot() EtcdSnapshot {
	var s EtcdSnapshot
	if m == nil {
		return s
	}
	for i := range m.ops {
		o := &m.ops[i]
		op := EtcdOpSnapshot{Op: etcdOps[i], Retriable: o.retriable.Load(), Other: o.other.Load(), Sum: time.Duration(o.sumNs.Load())}
		op.Requests = o.ok.Load() + op.Retriable + op.Other
		for b := range op.Buckets {
			op.Buckets[b] = o.buckets[b].Load()
		}
		s.Ops = append(s.Ops, op)
	}
	return s
}

// InstrumentEtcd wraps the client's key-value interface so that every request it makes
// (and every request of a metadata.Store on it) is counted. Call it before the client is
// shared: it replaces cli.KV.
func InstrumentEtcd(cli *clientv3.Client) *EtcdMetrics {
	m := &EtcdMetrics{}
	cli.KV = &countingKV{KV: cli.KV, kv: cli.KV, m: m}
	return m
}

// countingKV is a clientv3.KV that observes every request (a method it does not override
// passes through uncounted).
type countingKV struct {
	clientv3.KV
	kv clientv3.KV
	m  *EtcdMetrics
}

func (c *countingKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	start := time.Now()
	r, err := c.kv.Put(ctx, key, val, opts...)
	c.m.observe(opPut, start, err)
	return r, err
}

func (c *countingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	start := time.Now()
	r, err := c.kv.Get(ctx, key, opts...)
	c.m.observe(opGet, start, err)
	return r, err
}

func (c *countingKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	start := time.Now()
	r, err := c.kv.Delete(ctx, key, opts...)
	c.m.observe(opDelete, start, err)
	return r, err
}

func (c *countingKV) Compact(ctx context.Context, rev int64, opts ...clientv3.CompactOption) (*clientv3.CompactResponse, error) {
	start := time.Now()
	r, err := c.kv.Compact(ctx, rev, opts...)
	c.m.observe(opCompact, start, err)
	return r, err
}

func (c *countingKV) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	start := time.Now()
	r, err := c.kv.Do(ctx, op)
	c.m.observe(opDo, start, err)
	return r, err
}

func (c *countingKV) Txn(ctx context.Context) clientv3.Txn {
	return &countingTxn{txn: c.kv.Txn(ctx), m: c.m}
}

// countingTxn observes the commit of a transaction.
type countingTxn struct {
	txn clientv3.Txn
	m   *EtcdMetrics
}

func (t *countingTxn) If(cs ...clientv3.Cmp) clientv3.Txn   { t.txn = t.txn.If(cs...); return t }
func (t *countingTxn) Then(ops ...clientv3.Op) clientv3.Txn { t.txn = t.txn.Then(ops...); return t }
func (t *countingTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.txn = t.txn.Else(ops...); return t }

func (t *countingTxn) Commit() (*clientv3.TxnResponse, error) {
	start := time.Now()
	r, err := t.txn.Commit()
	t.m.observe(opTxn, start, err)
	return r, err
}
