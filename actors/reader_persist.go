package actors

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
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
	res, deleted := doPersist(ctx, p.deps, req.Stream, req.Persist)
	return persistDone{ID: req.ID, Result: res, Deleted: deleted}
}

// persistFailure is the PersistFailed result of a persist of stream that gave no answer of
// its own (it panicked, or its answer never came).
func persistFailure(stream string, ref readercore.Ref, reason string, now time.Time) readercore.PersistResult {
	return readercore.PersistResult{Ref: ref, Outcome: readercore.PersistFailed, Now: now.UnixMilli(),
		Reason: fmt.Sprintf("persist %s: %s", stream, reason)}
}

// doPersist runs one persist attempt; deleted is set (the reason) when the stream has a
// tombstone, and res is then a not-found for the metrics.
func doPersist(ctx context.Context, d persistDeps, stream string, e readercore.StartPersist) (res readercore.PersistResult, deleted string) {
	uid := rand.Uint64()
	key := manifest.RootKey(d.keyPrefix, stream, e.Epoch, uid)
	failed := func(err error) (readercore.PersistResult, string) {
		return readercore.PersistResult{Ref: e.Ref, Outcome: readercore.PersistFailed, Reason: err.Error()}, ""
	}
	if err := d.store.PutObject(ctx, key, manifest.EncodeRoot(e.Root)); err != nil {
		return failed(fmt.Errorf("persist %s: put root %s: %w", stream, key, err))
	}
	rec := metadata.ManifestRecord{
		Epoch: e.Epoch, RootUID: uid, FirstOffset: e.Root.FirstOffset, NextOffset: e.Root.NextOffset,
		TotalSize: e.Root.TotalSize, FirstTimestamp: e.Root.FirstTimestamp,
	}
	mr, err := d.meta.Persist(ctx, stream, e.Epoch, e.ExpectedRevision, rec)
	if err != nil {
		return failed(fmt.Errorf("persist %s: etcd: %w", stream, err))
	}
	switch mr.Outcome {
	case metadata.PersistOK:
		return readercore.PersistResult{Ref: e.Ref, Outcome: readercore.PersistOK, Revision: mr.Revision, RootUID: uid}, ""
	case metadata.PersistConflict:
		reason := fmt.Sprintf("revision %d at epoch %d is stored, expected %d at epoch %d", mr.Revision, mr.StoredEpoch, e.ExpectedRevision, e.Epoch)
		if mr.StoredEpoch > e.Epoch {
			// A higher epoch persisted: deposed, not outrun. Reinitializing would meet the
			// same fence at every persist.
			return readercore.PersistResult{Ref: e.Ref, Outcome: readercore.PersistFenced, StoredEpoch: mr.StoredEpoch, Reason: reason}, ""
		}
		return readercore.PersistResult{Ref: e.Ref, Outcome: readercore.PersistConflict, Reason: reason}, ""
	case metadata.PersistDeleted:
		why := fmt.Sprintf("stream %s was deleted (its tombstone does not decode)", stream)
		if mr.Tombstone != nil {
			why = (&metadata.DeletedError{Tombstone: *mr.Tombstone}).Error()
		}
		return readercore.PersistResult{Ref: e.Ref, Outcome: readercore.PersistNotFound, Reason: why}, why + "; " + deletedHint
	default:
		reason := fmt.Sprintf("stream %s: no manifest record at revision %d", stream, e.ExpectedRevision)
		if e.ExpectedRevision == 0 {
			reason = fmt.Sprintf("stream %s has no anchor", stream)
		}
		return readercore.PersistResult{Ref: e.Ref, Outcome: readercore.PersistNotFound, Reason: reason}, ""
	}
}
