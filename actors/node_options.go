package actors

import (
	"time"

	"github.com/streamtier/streamtier/actors/read/fetchcore"
	"github.com/streamtier/streamtier/actors/readercore"
)

// NoIdleCut, as StreamOptions.FragmentMaxAge, turns the idle cut off: a quiet stream's tail
// is uploaded only when its fragment reaches its target size (or by Flush, ForceCut).
const NoIdleCut time.Duration = -1

// StreamOptions are the per-stream settings the node honours, every one of them: in
// Config.Stream for all streams, in StreamSpec.Options for one (its non-zero fields win).
// A zero field takes the default (docs/operations.md); a negative FragmentMaxAge (NoIdleCut)
// turns the idle cut off. Nothing here is ignored.
type StreamOptions struct {
	// FragmentTargetSize cuts a fragment once its chunk bytes reach it (default 64 MiB).
	FragmentTargetSize uint64
	// FragmentMaxAge cuts the fragment being assembled, whatever its size, once its oldest
	// chunk waited this long (default 60 s; negative: never).
	FragmentMaxAge time.Duration
	// PersistThreshold persists once this many edits wait (default 5); PersistInterval is
	// the longest an edit waits for a persist (default 2 s).
	PersistThreshold int
	PersistInterval  time.Duration
	// RebalanceThreshold is M, the entries per group object of the manifest (default 1024).
	RebalanceThreshold int
	// UploadRetryDelay and UploadRetryMaxDelay space the retries of an upload that failed
	// non-transiently (1 s doubling to 30 s); TransientBackoffBase and TransientBackoffMax
	// those after retriable failures (10 ms doubling to 5 s).
	UploadRetryDelay     time.Duration
	UploadRetryMaxDelay  time.Duration
	TransientBackoffBase time.Duration
	TransientBackoffMax  time.Duration
	// TransferDeadline resubmits an upload whose result never came (default four times the
	// store's transfer timeout).
	TransferDeadline time.Duration
	// RetentionTimeout bounds a group download for remote retention (default 60 s).
	RetentionTimeout time.Duration
	// MaxUnpersistedBytes bounds the bytes drained and not yet durable; at it the drain
	// pauses and the local log grows (EventListener.OnPause). Default (2 x the uploads one
	// stream may run + 2) fragment targets: 50 with the node's defaults.
	MaxUnpersistedBytes uint64
}

// over returns o with the non-zero fields of top in place of its own.
func (o StreamOptions) over(top StreamOptions) StreamOptions {
	pick := func(dst *time.Duration, v time.Duration) {
		if v != 0 {
			*dst = v
		}
	}
	if top.FragmentTargetSize != 0 {
		o.FragmentTargetSize = top.FragmentTargetSize
	}
	if top.PersistThreshold != 0 {
		o.PersistThreshold = top.PersistThreshold
	}
	if top.RebalanceThreshold != 0 {
		o.RebalanceThreshold = top.RebalanceThreshold
	}
	if top.MaxUnpersistedBytes != 0 {
		o.MaxUnpersistedBytes = top.MaxUnpersistedBytes
	}
	pick(&o.FragmentMaxAge, top.FragmentMaxAge)
	pick(&o.PersistInterval, top.PersistInterval)
	pick(&o.UploadRetryDelay, top.UploadRetryDelay)
	pick(&o.UploadRetryMaxDelay, top.UploadRetryMaxDelay)
	pick(&o.TransientBackoffBase, top.TransientBackoffBase)
	pick(&o.TransientBackoffMax, top.TransientBackoffMax)
	pick(&o.TransferDeadline, top.TransferDeadline)
	pick(&o.RetentionTimeout, top.RetentionTimeout)
	return o
}

// core is o as the reader's core takes it (the stream, epoch and retention come with the
// spec); the two mean the same by zero and by a negative FragmentMaxAge.
func (o StreamOptions) core() readercore.Config {
	return readercore.Config{
		FragmentTargetSize: o.FragmentTargetSize, FragmentMaxAge: o.FragmentMaxAge,
		PersistThreshold: o.PersistThreshold, PersistInterval: o.PersistInterval, RebalanceThreshold: o.RebalanceThreshold,
		UploadRetryDelay: o.UploadRetryDelay, UploadRetryMaxDelay: o.UploadRetryMaxDelay,
		TransientBackoffBase: o.TransientBackoffBase, TransientBackoffMax: o.TransientBackoffMax,
		TransferDeadline: o.TransferDeadline, RetentionTimeout: o.RetentionTimeout, MaxUnpersistedBytes: o.MaxUnpersistedBytes,
	}
}

// ReadOptions are the remote readers' settings the node honours (its read budget is
// Config.ReadBudgetBytes, divided among the open readers). Zero takes the default.
type ReadOptions struct {
	// RangeSize is the length of one range GET (default 4 MiB).
	RangeSize int64
	// MaxConcurrency is the ceiling of range GETs in flight per reader (default 32).
	MaxConcurrency int
}

// fetch is o as the remote reader's core takes it (the budget is set per reader).
func (o ReadOptions) fetch() fetchcore.Config {
	return fetchcore.Config{RangeSize: o.RangeSize, MaxConcurrency: o.MaxConcurrency}
}
