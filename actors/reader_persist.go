package actors

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors/internal/shell"
	"github.com/streamtier/streamtier/actors/readercore"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/s3io"
)

// persistRequest asks a persist actor for one attempt of the core's StartPersist on Stream.
// The actor answers ReplyTo with exactly one persistDone carrying ID, unless its owner's
// context ended first (then nobody waits for it).
type persistRequest struct {
	ID      uint64
	Stream  string
	Persist readercore.StartPersist
	ReplyTo *actor.PID
}

// persistDone is a persist actor's one answer. Result is what the core is fed: the outcome
// of the attempt, or PersistFailed when it failed, ran past its deadline or panicked. When
// Deleted is set the transaction found the stream's tombstone: the core is fed
// readercore.StreamDeleted with that reason instead, whatever revision it expected.
type persistDone struct {
	ID      uint64
	Result  readercore.PersistResult
	Deleted string
}

// event is the core event d stands for.
func (d persistDone) event() readercore.Event {
	if d.Deleted != "" {
		return readercore.StreamDeleted{Reason: d.Deleted}
	}
	return d.Result
}

// persistDeps is what a persist actor needs: the stores, the key prefix, its deadline and
// where it logs and counts.
type persistDeps struct {
	store     *s3io.Store
	meta      *metadata.Store
	keyPrefix string
	timeout   time.Duration // Config.PersistTimeout: the root PUT and the transaction together
	log       zerolog.Logger
	metrics   *Metrics
	faults    *faultHooks
	clock     shell.Clock // stamps the result the core takes; nil: the wall clock
	claim     *claimState // the cluster record persists compare; a lost claim refuses them
	stream    string
	// doubt is the stream's attempt in doubt (streamHandle.doubt), settled first.
	doubt *atomic.Pointer[inDoubt]
	// lose records a claim found changed by a persist (Node.loseClaim).
	lose func(reason string)
	// fresh is when the stream's writer was last sure of its record (streamHandle.fresh);
	// staleAfter is Config.StaleAfter.
	fresh      *freshness
	staleAfter time.Duration
}

// freshness is when a stream's writer last knew its record was current (a successful
// persist or resolution) and since when its persists fail, in ms on the node's clock (0:
// never, not failing).
type freshness struct {
	sure, failing atomic.Int64
}

// sureAt records a successful persist or resolution.
func (f *freshness) sureAt(now time.Time) {
	f.sure.Store(now.UnixMilli())
	f.failing.Store(0)
}

// failedAt records a failed persist (the first of a run sets failing).
func (f *freshness) failedAt(now time.Time) { f.failing.CompareAndSwap(0, now.UnixMilli()) }

// stale says why the writer must resolve again before it persists: its last success is
// older than staleAfter, or its persists have failed for longer than timeout; "" if not.
func (f *freshness) stale(now time.Time, staleAfter, timeout time.Duration) string {
	ms := now.UnixMilli()
	if s := f.sure.Load(); s > 0 && staleAfter > 0 && ms-s > staleAfter.Milliseconds() {
		return fmt.Sprintf("its last successful persist or resolution was %v ago, more than %v", time.Duration(ms-s)*time.Millisecond, staleAfter)
	}
	if s := f.failing.Load(); s > 0 && timeout > 0 && ms-s > timeout.Milliseconds() {
		return fmt.Sprintf("its persists have failed for %v, longer than the persist timeout %v", time.Duration(ms-s)*time.Millisecond, timeout)
	}
	return ""
}

// persister is the persist actor: a child of the reader incarnation that needs a persist,
// one per attempt. It handles one persistRequest: it PUTs the root under a fresh uid, then
// runs the conditional etcd transaction, all within its deadline and with its owner's
// context; it answers and stops. A panic becomes PersistFailed. (One actor per attempt
// rather than one per stream: an attempt stuck outside its context never holds up the next
// one; the owner's overdue timer answers for it, see shell.TaskSet.)
type persister struct {
	ctx  context.Context // the owner incarnation's: cancelled when it stops or restarts
	deps persistDeps
}

func newPersister(ctx context.Context, deps persistDeps) *persister {
	return &persister{ctx: ctx, deps: deps}
}

// Receive handles the one request; lifecycle messages are ignored.
func (p *persister) Receive(c actor.Context) {
	req, ok := c.Message().(*persistRequest)
	if !ok {
		return
	}
	defer c.Stop(c.Self())
	done := p.run(req)
	if p.ctx.Err() == nil {
		c.Send(req.ReplyTo, done)
	}
}

// run makes the attempt and returns its answer; it never panics.
func (p *persister) run(req *persistRequest) (done persistDone) {
	ctx, cancel := context.WithTimeout(p.ctx, p.deps.timeout)
	defer cancel()
	start := time.Now()
	defer func() {
		if v := recover(); v != nil {
			p.deps.metrics.TaskPanics.Add(1)
			p.deps.log.Error().Str("stream", req.Stream).Str("panic", fmt.Sprint(v)).Str("stack", string(debug.Stack())).
				Msg("persist panicked; reported as a failure")
			done = persistDone{ID: req.ID, Result: persistFailure(req.Stream, req.Persist.Ref, fmt.Sprintf("persist panicked: %v", v), shell.OrWall(p.deps.clock).Now())}
		}
		done.Result.Now = shell.OrWall(p.deps.clock).Now().UnixMilli()
		p.deps.metrics.observePersist(done.Result.Outcome, time.Since(start))
	}()
	p.deps.faults.atTask("persist")
	now := shell.OrWall(p.deps.clock).Now()
	if f := p.deps.fresh; f != nil {
		if why := f.stale(now, p.deps.staleAfter, p.deps.timeout); why != "" {
			// A stale writer lists and reads etcd again before it builds another root.
			if res, stop := recheck(ctx, p.deps, req.Stream, req.Persist, why); stop {
				if res.Outcome == readercore.PersistFailed {
					f.failedAt(now)
				}
				return persistDone{ID: req.ID, Result: res}
			}
			f.sureAt(now)
		}
	}
	res, deleted := doPersist(ctx, p.deps, req.Stream, req.Persist)
	if f := p.deps.fresh; f != nil {
		switch res.Outcome {
		case readercore.PersistOK:
			f.sureAt(shell.OrWall(p.deps.clock).Now())
		case readercore.PersistFailed:
			f.failedAt(now)
		}
	}
	return persistDone{ID: req.ID, Result: res, Deleted: deleted}
}

// persistFailure is the PersistFailed result of a persist of stream that gave no answer of
// its own (it panicked, or its answer never came).
func persistFailure(stream string, ref readercore.Ref, reason string, now time.Time) readercore.PersistResult {
	return readercore.PersistResult{Ref: ref, Outcome: readercore.PersistFailed, Now: now.UnixMilli(),
		Reason: fmt.Sprintf("persist %s: %s", stream, reason)}
}

// recheck is a stale writer's look before it persists: the roots above its parent, the
// deletion marker, then the record. Anything that moved (a root above, a record that does
// not name the parent, a marker) answers a conflict, so that the core resolves again; a
// failed look is a failed persist. stop is false when the writer may persist.
func recheck(ctx context.Context, d persistDeps, stream string, e readercore.StartPersist, why string) (readercore.PersistResult, bool) {
	result := func(o readercore.PersistOutcome, reason string) (readercore.PersistResult, bool) {
		return readercore.PersistResult{Ref: e.Ref, Outcome: o, Reason: fmt.Sprintf("persist %s: stale writer (%s): %s", stream, why, reason)}, true
	}
	var above []string
	err := d.store.ListAfter(ctx, manifest.RootsPrefix(d.keyPrefix, stream), manifest.RootsStartAfter(d.keyPrefix, stream, e.Parent.Seq+1), func(o s3io.ObjectInfo) error {
		if k, err := manifest.ParseKey(d.keyPrefix, o.Key); err == nil && k.Kind == manifest.ObjectRoot && k.KeyVersion >= 3 {
			above = append(above, o.Key)
		}
		return nil
	})
	if err != nil {
		return result(readercore.PersistFailed, fmt.Sprintf("list roots: %v", err))
	}
	marker, err := d.store.HasMarker(ctx, d.keyPrefix, stream)
	if err != nil {
		return result(readercore.PersistFailed, fmt.Sprintf("read the deletion marker: %v", err))
	}
	rec, _, _, _, _, err := d.meta.ReadForRecovery(ctx, stream)
	if err != nil {
		return result(readercore.PersistFailed, fmt.Sprintf("read etcd: %v", err))
	}
	switch {
	case marker:
		return result(readercore.PersistConflict, "the stream has a deletion marker: resolve again")
	case len(above) > 0:
		return result(readercore.PersistConflict, fmt.Sprintf("roots above its parent seq %d: %v: resolve again", e.Parent.Seq, above))
	case rec == nil && e.Parent != (readercore.RootRef{}), rec != nil && (rec.Seq != e.Parent.Seq || rec.RootUID != e.Parent.UID):
		return result(readercore.PersistConflict, "the manifest record no longer names its parent: resolve again")
	}
	d.log.Info().Str("stream", stream).Str("reason", why).Msg("stale writer: the listing and etcd still name its parent; persisting")
	return readercore.PersistResult{}, false
}

// inDoubt is a version 3 persist attempt whose outcome is unknown (its PUT or its etcd
// transaction timed out or lost its answer): the stream's next persist or resolution
// settles it first, with the same root (seq, uid, bytes) and the same expected record,
// before anything new is built (manifest.md, "Persist").
type inDoubt struct {
	key  string
	body []byte
	rp   metadata.RootPersist
	// txn says the etcd transaction ran (and may have applied); false: only the PUT may
	// have landed.
	txn bool
}

// doPersist runs one version 3 persist attempt: settle an attempt in doubt, PUT
// root-<seq20>.manifest if absent (a 412 is a conflict: resolve again), then the etcd
// transaction (metadata.PersistRoot). deleted is set (the reason) when the stream has a
// tombstone, and res is then a not-found for the metrics.
func doPersist(ctx context.Context, d persistDeps, stream string, e readercore.StartPersist) (res readercore.PersistResult, deleted string) {
	failed := func(err error) (readercore.PersistResult, string) {
		return readercore.PersistResult{Ref: e.Ref, Outcome: readercore.PersistFailed, Reason: err.Error()}, ""
	}
	if err := d.claim.err(); err != nil {
		return failed(fmt.Errorf("persist %s: %w", stream, err))
	}
	if p := d.doubt.Load(); p != nil {
		// An earlier attempt may have applied: decide it before building another root.
		mr, err := settle(ctx, d, p)
		if err != nil {
			return failed(fmt.Errorf("persist %s: settle the attempt in doubt (%s): %w", stream, p.key, err))
		}
		d.doubt.CompareAndSwap(p, nil)
		switch mr.Outcome {
		case 0, metadata.RootConflict:
			// It never landed, or the record moved on without it (a stray now).
		case metadata.RootPersisted:
			// It did persist, though the core was told it failed: its view is stale.
			return readercore.PersistResult{Ref: e.Ref, Outcome: readercore.PersistConflict,
				Reason: fmt.Sprintf("an earlier attempt in doubt persisted %s after all: resolve again", p.key)}, ""
		default:
			return rootResult(stream, e, p.rp.Record.RootUID, mr)
		}
	}
	if e.Seq == 0 {
		return failed(fmt.Errorf("persist %s: no seq for the version 3 root (a core that never resolved)", stream))
	}
	uid := rand.Uint64() | 1 // never 0: 0 means "none" in a parent uid
	lin := manifest.Lineage{Seq: e.Seq, Epoch: e.Epoch, UID: uid, ParentSeq: e.Parent.Seq, ParentUID: e.Parent.UID}
	key := manifest.SeqRootKey(d.keyPrefix, stream, e.Seq)
	body := manifest.EncodeRootV3(lin, e.Root)
	rp := metadata.RootPersist{WriterEpoch: e.Epoch, Expected: e.ExpectedRevision, Cluster: d.claim.opened,
		Record: metadata.ManifestRecord{Seq: e.Seq, Epoch: e.Epoch, RootUID: uid, FirstOffset: e.Root.FirstOffset,
			NextOffset: e.Root.NextOffset, TotalSize: e.Root.TotalSize, FirstTimestamp: e.Root.FirstTimestamp}}
	if err := d.store.PutObjectIfAbsent(ctx, key, body); err != nil {
		if s3io.IsPreconditionFailed(err) {
			return readercore.PersistResult{Ref: e.Ref, Outcome: readercore.PersistConflict,
				Reason: fmt.Sprintf("root %s exists: another writer took seq %d (412 on If-None-Match): resolve again", key, e.Seq)}, ""
		}
		if c := s3io.Classify(err); c == s3io.ClassRetriable || c == s3io.ClassCanceled || ctx.Err() != nil {
			// The PUT may have landed: the next attempt looks for it first.
			d.doubt.Store(&inDoubt{key: key, body: body, rp: rp})
		}
		return failed(fmt.Errorf("persist %s: put root %s: %w", stream, key, err))
	}
	mr, err := d.meta.PersistRoot(ctx, stream, rp)
	if err != nil {
		// etcd may have applied it: the next attempt retries this very transaction first.
		d.doubt.Store(&inDoubt{key: key, body: body, rp: rp, txn: true})
		return failed(fmt.Errorf("persist %s: etcd (outcome unknown, retried with the same root): %w", stream, err))
	}
	if mr.Outcome == metadata.RootClusterChanged && d.lose != nil {
		d.lose(fmt.Sprintf("a persist of %s found the cluster record changed", stream))
	}
	return rootResult(stream, e, uid, mr)
}

// settle decides an attempt in doubt with the same root and expected record. When only its
// PUT was in doubt, a root that is not there (or another writer's) never landed: outcome 0.
// Otherwise the same transaction runs again; it reports RootPersisted when the earlier one
// applied (the record names this root).
func settle(ctx context.Context, d persistDeps, p *inDoubt) (metadata.RootResult, error) {
	if !p.txn {
		got, err := d.store.GetObject(ctx, p.key)
		if s3io.IsNotFound(err) {
			return metadata.RootResult{}, nil
		}
		if err != nil {
			return metadata.RootResult{}, fmt.Errorf("look for the root: %w", err)
		}
		if obj, err := manifest.DecodeRootObject(got); err != nil || obj.Lineage.UID != p.rp.Record.RootUID {
			return metadata.RootResult{}, nil // another writer's root holds the seq
		}
	}
	return d.meta.PersistRoot(ctx, d.stream, p.rp)
}

// rootResult turns PersistRoot's decision into the core's result.
func rootResult(stream string, e readercore.StartPersist, uid uint64, mr metadata.RootResult) (readercore.PersistResult, string) {
	switch mr.Outcome {
	case metadata.RootPersisted:
		return readercore.PersistResult{Ref: e.Ref, Outcome: readercore.PersistOK, Revision: mr.Revision, RootUID: uid}, ""
	case metadata.RootFenced:
		reason := fmt.Sprintf("epoch %d is stored, above this writer's %d", mr.StoredEpoch, e.Epoch)
		return readercore.PersistResult{Ref: e.Ref, Outcome: readercore.PersistFenced, StoredEpoch: mr.StoredEpoch, Reason: reason}, ""
	case metadata.RootDeleted:
		why := fmt.Sprintf("stream %s was deleted (its etcd tombstone)", stream)
		return readercore.PersistResult{Ref: e.Ref, Outcome: readercore.PersistNotFound, Reason: why}, why + "; " + deletedHint
	case metadata.RootMetadataMissing:
		reason := fmt.Sprintf("stream %s: the anchor, the manifest record at version %d or the cluster record is gone: resolve again", stream, e.ExpectedRevision)
		return readercore.PersistResult{Ref: e.Ref, Outcome: readercore.PersistNotFound, Reason: reason}, ""
	case metadata.RootClusterChanged:
		return readercore.PersistResult{Ref: e.Ref, Outcome: readercore.PersistFailed,
			Reason: fmt.Sprintf("persist %s: %v: the cluster record is not the one this node opened with", stream, ErrClaimChanged)}, ""
	}
	reason := fmt.Sprintf("the record is at version %d with stored epoch %d, expected version %d at epoch %d", mr.Revision, mr.StoredEpoch, e.ExpectedRevision, e.Epoch)
	return readercore.PersistResult{Ref: e.Ref, Outcome: readercore.PersistConflict, Reason: reason}, ""
}
