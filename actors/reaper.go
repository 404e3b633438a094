package actors

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors/internal/shell"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/s3io"
)

// reapRequest asks the reaper to delete objects that a successful persist dropped: plain
// keys (the previous root), entries whose object goes alone (fragments, and groups a
// truncation expanded: their children stay referenced) and groups, each with the live
// objects below it. Entries do not carry the uploader's epoch, so the reaper finds their keys by
// listing (s3io.LocateEntries); an object already gone is simply not deleted again.
type reapRequest struct {
	Stream  string
	Keys    []string
	Objects []manifest.Entry
	Groups  []reapGroup
}

// reapGroup is a group object to delete with every object under it at or after From.
type reapGroup struct {
	Entry manifest.Entry
	From  uint64
}

// reapRetry fires when keys whose delete failed are due again.
type reapRetry struct{}

// ReaperStats counts what the reaper did, for status and metrics.
type ReaperStats struct {
	Deleted   atomic.Int64 // objects deleted
	Failed    atomic.Int64 // objects given up on, left for garbage collection
	Retries   atomic.Int64 // delete attempts repeated after a failure
	Queued    atomic.Int64 // keys waiting for a batch or a retry
	GroupGets atomic.Int64 // group objects downloaded to expand a deletion
	// Refused counts keys not deleted because the node's cluster claim changed: they are
	// left for garbage collection by the cluster that holds the claim.
	Refused atomic.Int64
}

const (
	reaperBatch       = 1000
	reaperMaxAttempts = 5
	reaperFirstRetry  = time.Second
	reaperMaxRetry    = 30 * time.Second
)

// reaperLedger is the reaper's state that outlives its incarnations: the failed keys and
// their attempts, so that a restarted reaper retries them instead of forgetting them.
type reaperLedger struct {
	mu       sync.Mutex     // incarnations run one after the other; this orders them for the race detector
	attempts map[string]int // key -> failed attempts so far
	retry    []string       // keys due at the next retry
}

// reaperDeps is what every reaper incarnation is built from.
type reaperDeps struct {
	ctx       context.Context // the node's: cancelled on stop
	store     *s3io.Store
	keyPrefix string
	log       zerolog.Logger
	stats     *ReaperStats
	clock     shell.Clock
	ledger    *reaperLedger
	faults    *faultHooks
	// check re-reads the node's claim before each batch (Node.checkClaim); nil: none.
	check func(context.Context) error
}

// reaper is the node's deleter: it batches deletions into DeleteObjects calls, retries
// failed keys with a growing delay and, after reaperMaxAttempts, counts them and leaves them
// to garbage collection. Deletions never block a stream actor. Each incarnation is a fresh
// value on the shared ledger: a restarted reaper re-arms the retry of the keys it holds.
type reaper struct {
	reaperDeps
	incarnation uint64

	timers    shell.Timers
	armed     bool
	stopNoted bool // leftAtStop has logged
}

func newReaper(d reaperDeps, incarnation uint64) *reaper {
	return &reaper{reaperDeps: d, incarnation: incarnation, timers: shell.Timers{Clock: d.clock}}
}

func (r *reaper) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		r.ledger.mu.Lock()
		due := len(r.ledger.retry)
		r.ledger.mu.Unlock()
		if r.incarnation > 1 {
			r.log.Warn().Uint64("incarnation", r.incarnation).Int("keys_due", due).
				Msg("reaper restarted: retrying the failed deletions it holds")
		}
		if due > 0 {
			r.arm(c)
		}
		return
	case *actor.Stopping, *actor.Restarting:
		r.timers.StopAll()
		return
	case actor.SystemMessage, actor.AutoReceiveMessage:
		return
	default:
		r.faults.atReaper(m)
	}
	r.ledger.mu.Lock()
	defer r.ledger.mu.Unlock()
	switch m := c.Message().(type) {
	case *reapRequest:
		if r.ctx.Err() != nil {
			r.leftAtStop(len(m.Keys) + len(m.Objects) + len(m.Groups))
			return
		}
		r.deleteKeys(c, r.expand(m))
	case reapRetry:
		r.armed = false
		keys := r.ledger.retry
		r.ledger.retry = nil
		r.stats.Queued.Add(-int64(len(keys)))
		if r.ctx.Err() != nil {
			r.leftAtStop(len(keys))
			return
		}
		r.stats.Retries.Add(int64(len(keys)))
		r.deleteKeys(c, keys)
	}
}

// expand turns a request into object keys, downloading group objects to learn their
// children and listing to find each entry's key. A group that cannot be read is left to
// garbage collection with its children (one already gone is not a failure: nothing of it is
// left to learn); so are the entries whose keys a failing listing did not find.
func (r *reaper) expand(m *reapRequest) []string {
	keys := append([]string(nil), m.Keys...)
	entries := append([]manifest.Entry(nil), m.Objects...)
	fetch := func(e manifest.Entry) ([]manifest.Entry, error) {
		r.stats.GroupGets.Add(1)
		return r.store.Tier(r.keyPrefix, m.Stream).Children(r.ctx, e)
	}
	for _, g := range m.Groups {
		es, err := manifest.CollectForDelete(g.Entry, g.From, fetch)
		if err != nil {
			if s3io.IsNotFound(err) {
				r.log.Info().Err(err).Str("stream", m.Stream).Uint64("group_offset", g.Entry.FirstOffset).
					Msg("reaper: group already gone; objects below it, if any are left, are garbage collection's")
				continue
			}
			r.stats.Failed.Add(1)
			r.log.Warn().Err(err).Str("stream", m.Stream).Uint64("group_offset", g.Entry.FirstOffset).
				Msg("reaper: cannot expand a group; its objects are left for garbage collection")
			continue
		}
		entries = append(entries, es...)
	}
	if len(entries) == 0 {
		return keys
	}
	found, err := r.store.LocateEntries(r.ctx, r.keyPrefix, m.Stream, entries)
	for _, e := range entries {
		if k, ok := found[e]; ok {
			keys = append(keys, k)
		}
	}
	if err != nil {
		r.stats.Failed.Add(int64(len(entries) - len(found)))
		r.log.Warn().Err(err).Str("stream", m.Stream).Int("entries", len(entries)).Int("located", len(found)).
			Msg("reaper: cannot list the objects to delete; those not located are left for garbage collection")
	}
	return keys
}

// leftAtStop counts deletions that arrive, fall due or fail once the node is stopping: they
// are left for garbage collection, and said once, not once per request or key (every
// stream's last persist may ask for some, and each attempt would only fail on the cancelled
// context).
func (r *reaper) leftAtStop(n int) {
	if n == 0 {
		return
	}
	r.stats.Failed.Add(int64(n))
	if !r.stopNoted {
		r.stopNoted = true
		r.log.Info().Int("objects", n).Msg("reaper: the node is stopping; deletions not made yet are left for garbage collection")
	}
}

func (r *reaper) deleteKeys(c actor.Context, keys []string) {
	for len(keys) > 0 {
		if r.ctx.Err() != nil { // the node stopped while the earlier batches went out
			r.leftAtStop(len(keys))
			return
		}
		n := min(len(keys), reaperBatch)
		batch := keys[:n]
		keys = keys[n:]
		if r.check != nil {
			if err := r.check(r.ctx); errors.Is(err, ErrClaimChanged) {
				r.stats.Refused.Add(int64(len(batch) + len(keys)))
				r.log.Error().Err(err).Int("keys", len(batch)+len(keys)).Msg("reaper: the cluster claim changed: nothing is deleted")
				return
			} else if err != nil {
				// The claim could not be read: nothing is deleted now; the batch is retried.
				r.log.Warn().Err(err).Msg("reaper: cannot re-read the cluster claim before a batch; retried later")
				r.ledger.retry = append(r.ledger.retry, batch...)
				r.ledger.retry = append(r.ledger.retry, keys...)
				r.stats.Queued.Add(int64(len(batch) + len(keys)))
				r.arm(c)
				return
			}
		}
		failed, err := r.store.DeleteObjects(r.ctx, batch)
		if err != nil {
			failed = make(map[string]error, len(batch))
			for _, k := range batch {
				failed[k] = err
			}
		}
		r.stats.Deleted.Add(int64(len(batch) - len(failed)))
		l := r.ledger
		stopped := 0
		for _, k := range batch {
			ferr, bad := failed[k]
			if !bad {
				delete(l.attempts, k)
				continue
			}
			if r.ctx.Err() != nil { // failed because the node is stopping: no retry comes
				delete(l.attempts, k)
				stopped++
				continue
			}
			l.attempts[k]++
			if l.attempts[k] >= reaperMaxAttempts {
				delete(l.attempts, k)
				r.stats.Failed.Add(1)
				r.log.Warn().Err(ferr).Str("key", k).Msg("reaper: delete failed; left for garbage collection")
				continue
			}
			l.retry = append(l.retry, k)
			r.stats.Queued.Add(1)
		}
		r.leftAtStop(stopped)
	}
	if len(r.ledger.retry) > 0 {
		r.arm(c)
	}
}

// arm schedules the retry of the ledger's failed keys, after the longest delay any of them
// is due (doubling per attempt from reaperFirstRetry to reaperMaxRetry). The ledger is locked.
func (r *reaper) arm(c actor.Context) {
	if r.armed {
		return
	}
	r.armed = true
	delay := reaperFirstRetry
	for _, k := range r.ledger.retry {
		delay = max(delay, min(reaperFirstRetry<<max(r.ledger.attempts[k]-1, 0), reaperMaxRetry))
	}
	r.timers.After(c.ActorSystem().Root, c.Self(), delay, reapRetry{})
}
