package recovery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/manifest/resolve"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/s3io"
)

// Options say where to recover and whether to write.
type Options struct {
	Store     *s3io.Store
	Meta      *metadata.Store
	KeyPrefix string // default manifest.DefaultKeyPrefix
	// Write writes the records (`node recover --yes`); without it Recover only plans.
	Write bool
	// Verify also checks that every live fragment of the chosen root is stored.
	Verify bool
	// Concurrency is how many streams All inspects at once (default 16).
	Concurrency int
}

// Report is one row of the recovery table: the root the bucket names, what etcd holds and
// what recovery does (or did, with Write).
type Report struct {
	Stream  string
	Outcome resolve.TopOutcome
	Root    resolve.Root // the chosen root (TopV3, TopSingleV2)
	// First and Next are the chosen manifest's range; Size its total size.
	First, Next, Size uint64
	Etcd              resolve.Etcd
	Plan              resolve.Plan
	Written           bool // the records (or the tombstone) were written
	Requests          int  // S3 requests of the inspection
	// Newest is the LastModified of the prefix's newest root (zero: none).
	Newest time.Time
	// Check is why the chosen root failed its check (nil when it passed).
	Check error

	planned bool
	read    metadata.RecoveryRead
	m       manifest.Manifest
	tomb    bool
	anchor  bool
}

// Recover inspects one stream in the bucket, reads its etcd records, plans with
// resolve.PlanRecovery and, with o.Write, writes them: the anchor, the manifest record naming
// the chosen root and the stored epoch, in one transaction conditional on what was read (a
// writer that persisted in between makes it fail: metadata.ErrRecoveryRace), or the
// tombstone of a marked stream. It never lowers a record. The caller has checked the claim.
func Recover(ctx context.Context, o Options, stream string) (Report, error) {
	if o.Store == nil || o.Meta == nil {
		return Report{}, errors.New("recover: an object store and a metadata store are required")
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = manifest.DefaultKeyPrefix
	}
	in, err := Inspect(ctx, o.Store, o.KeyPrefix, stream, o.Verify)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Stream: stream, Outcome: in.Choice.Outcome, Root: in.Choice.Root, Requests: in.Requests, Newest: in.Newest, Check: in.Check}
	m := in.Root.Manifest
	rep.First, rep.Next, rep.Size = m.FirstOffset, m.NextOffset, m.TotalSize
	rec, epoch, anchor, tomb, read, err := o.Meta.ReadForRecovery(ctx, stream)
	if err != nil {
		return rep, fmt.Errorf("recover %s: %w", stream, err)
	}
	rep.Etcd = resolve.Etcd{Tombstone: tomb, Anchor: anchor, StoredEpoch: epoch}
	if rec != nil {
		rep.Etcd.Record = &resolve.Record{Seq: rec.Seq, Epoch: rec.Epoch, UID: rec.RootUID}
	}
	rep.Plan = resolve.PlanRecovery(in.Choice, in.Check, rep.Etcd)
	rep.planned, rep.read, rep.m, rep.tomb, rep.anchor = true, read, m, tomb, anchor
	if !o.Write {
		return rep, nil
	}
	return Apply(ctx, o.Meta, rep)
}

// Apply writes what a planned report (from Recover without Write) decided, conditional on
// what that plan read of etcd: a writer or another recovery that wrote meanwhile makes it
// fail with metadata.ErrRecoveryRace (plan again). `node recover --yes` plans every
// stream, takes the claim, then applies, so that it inspects the bucket once.
func Apply(ctx context.Context, meta *metadata.Store, rep Report) (Report, error) {
	if !rep.planned {
		return rep, fmt.Errorf("recover %s: apply needs a report planned by Recover", rep.Stream)
	}
	stream, m := rep.Stream, rep.m
	switch rep.Plan.Action {
	case resolve.RecoverTombstone:
		if !rep.tomb {
			if err := meta.DeleteStream(ctx, stream); err != nil {
				return rep, fmt.Errorf("recover %s: tombstone: %w", stream, err)
			}
			rep.Written = true
		}
	case resolve.RecoverWrite:
		r := rep.Plan.Root
		record := metadata.ManifestRecord{Seq: r.Seq, Epoch: r.Epoch, RootUID: r.UID,
			FirstOffset: m.FirstOffset, NextOffset: m.NextOffset, TotalSize: m.TotalSize, FirstTimestamp: m.FirstTimestamp}
		if err := meta.RecoverRecords(ctx, stream, rep.read, record, rep.Plan.StoredEpoch); err != nil {
			return rep, fmt.Errorf("recover %s: %w", stream, err)
		}
		rep.Written = true
	case resolve.RecoverUpToDate:
		if !rep.anchor {
			if err := meta.Anchor(ctx, stream); err != nil {
				return rep, fmt.Errorf("recover %s: anchor: %w", stream, err)
			}
			rep.Written = true
		}
	}
	return rep, nil
}

// All recovers every stream the bucket knows under the key prefix (ListStreams), or the
// streams given, one after the other, and returns a report per stream in order. A stream
// that fails (an S3 or etcd error, a race with a writer) has its error in errs under its
// id; the others go on. Streams are inspected o.Concurrency at a time. The caller has checked or taken the claim (Claim).
func All(ctx context.Context, o Options, streams []string) (reports []Report, errs map[string]error, err error) {
	if o.KeyPrefix == "" {
		o.KeyPrefix = manifest.DefaultKeyPrefix
	}
	if len(streams) == 0 {
		if o.Store == nil {
			return nil, nil, errors.New("recover: an object store is required")
		}
		if streams, err = ListStreams(ctx, o.Store, o.KeyPrefix); err != nil {
			return nil, nil, err
		}
	}
	workers := o.Concurrency
	if workers <= 0 {
		workers = 16
	}
	reports = make([]Report, len(streams))
	failed := make([]error, len(streams))
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < min(workers, len(streams)); w++ {
		wg.Add(1)
		go func() { // joined by wg; ends when next is closed
			defer wg.Done()
			for i := range next {
				reports[i], failed[i] = Recover(ctx, o, streams[i])
				if reports[i].Stream == "" {
					reports[i].Stream = streams[i]
				}
			}
		}()
	}
	for i := range streams {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	errs = map[string]error{}
	for i, e := range failed {
		if e != nil {
			errs[streams[i]] = e
		}
	}
	return reports, errs, ctx.Err()
}

// ApplyAll applies every planned report (Apply), concurrency at a time (default 16), and
// returns the reports with the errors of the streams that failed, by id. Reports already
// holding an error in skip are left as they are.
func ApplyAll(ctx context.Context, meta *metadata.Store, reps []Report, skip map[string]error, concurrency int) ([]Report, map[string]error) {
	if concurrency <= 0 {
		concurrency = 16
	}
	out := slices.Clone(reps)
	failed := make([]error, len(reps))
	var wg sync.WaitGroup
	sem := make(chan struct{}, concurrency)
	for i := range out {
		if skip[out[i].Stream] != nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() { // bounded by sem, joined by wg
			defer wg.Done()
			defer func() { <-sem }()
			out[i], failed[i] = Apply(ctx, meta, out[i])
		}()
	}
	wg.Wait()
	errs := map[string]error{}
	for i, e := range failed {
		if e != nil {
			errs[out[i].Stream] = e
		}
	}
	return out, errs
}
