package actors

// A reader incarnation's start: its core (with what the handle carries across incarnations:
// the runtime retention policy, a dormant core's counts), its resolution of the persisted
// manifest (stream_resolve.go runs it), the retries until the core runs, and what the core
// is given once it does (the waiters, the replicas, a first retention run).

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/streamtier/streamtier/actors/readercore"
)

func (r *reader) start(c actor.Context) {
	r.ctx, r.cancel = context.WithCancel(r.n.ctx)
	r.initShell(c)
	r.persistTimers = make(map[readercore.Ref]uint64)
	r.waiters = make(map[readercore.WaiterID]bool)
	inc := r.h.incarnations.Add(1)
	cfg := r.n.cfg.coreConfig(r.h.spec)
	cfg.RefBase = inc << 40
	cfg.AnchorReinitialized = r.h.anchorReinit.Load()
	if p := r.h.policy.Load(); p != nil {
		cfg.Retention = *p
	}
	carried := r.h.takeCarry() // set when the stream woke from dormancy
	if carried != nil {
		cfg.Counters = *carried
	}
	core, err := readercore.New(cfg)
	if err != nil { // validated in AddStream; a failure here is a bug
		panic(fmt.Errorf("stream %s: %w", r.h.spec.ID, err))
	}
	r.core = core
	r.h.setReader(c.Self())
	r.n.metrics.StreamsRunning.Add(1)
	r.counted = true
	r.wakeLive = new(atomic.Bool)
	r.wakeLive.Store(true)
	r.spawnDrain(c)
	r.persistDeps = persistDeps{
		store: r.n.store, meta: r.n.meta, keyPrefix: r.n.cfg.KeyPrefix, timeout: r.n.cfg.PersistTimeout,
		metrics: r.n.metrics, faults: r.n.cfg.faults, clock: r.n.cfg.clock,
		claim: &r.n.claim, stream: r.h.spec.ID, doubt: &r.h.doubt, lose: r.n.loseClaim,
		fresh: &r.h.fresh, staleAfter: r.n.cfg.StaleAfter,
	}
	if sink := r.n.cfg.Replicas; sink != nil {
		blog, metrics := r.log.With().Str("actor", "broadcast").Logger(), r.n.metrics
		r.broadcaster = c.Spawn(actor.PropsFromProducer(func() actor.Actor { return newBroadcaster(sink, blog, metrics) }))
	}
	if inc > 1 && carried == nil {
		r.log.Info().Uint64("incarnation", inc).Msg("reader restarted: resolving the manifest again")
	}
	r.resolve(c)
}

func (r *reader) onResolved(c actor.Context, m *resolvedMsg) {
	if r.running {
		return
	}
	if m.Deleted != "" {
		r.resolveErr = ""
		r.log.Error().Str("reason", m.Deleted).Msg("the stream was deleted: refusing to tier it")
		r.step(c, readercore.StreamDeleted{Reason: m.Deleted})
		return
	}
	if m.Stall != nil {
		r.stalledOnMetadata(c, m.Stall)
		return
	}
	if r.h.setStall(r.n.metrics, nil) {
		r.log.Info().Msg("the stream's metadata is repaired: resolution goes on")
		r.notifyMetadata(nil)
	}
	if m.Err != nil {
		r.retryResolve(c, m.Err)
		return
	}
	if err := r.step(c, m.Resolved); err != nil {
		r.retryResolve(c, err)
		return
	}
	if err := r.step(c, m.Log); err != nil {
		// The core refused the start (a comparison that does not fit the log): it is
		// still starting and waits for a new resolution.
		r.retryResolve(c, err)
		return
	}
	r.running, r.resolveErr = true, ""
	r.h.markReady()
	r.h.fresh.sureAt(r.n.cfg.clock.Now())
	r.n.metrics.Resolutions.Add(1)
	r.h.recovered()
	for _, w := range r.h.outstanding() {
		r.waiters[w.Waiter] = true
		r.step(c, w)
	}
	for _, rep := range r.h.replicas() { // the spec's and those registered at run time
		r.step(c, readercore.ReplicaRegistered{Replica: rep})
	}
	// Remote retention also runs now (max-age of an idle stream) and then periodically.
	r.step(c, readercore.EvaluateRetention{Now: r.n.cfg.clock.Now().UnixMilli()})
	r.timers.After(c.ActorSystem().Root, c.Self(), r.n.cfg.RetentionInterval, retentionTickMsg{})
	r.log.Info().Int64("revision", m.Resolved.Revision).Uint64("next_offset", m.Resolved.Manifest.NextOffset).Msg("manifest resolved")
	if l := m.Log; l.First == l.Next && l.Next < m.Resolved.Manifest.NextOffset {
		// Nothing to compare yet. Data the broker writes below the remote next offset would
		// never be drained (and local retention would take it): compare again once it comes.
		r.log.Warn().Uint64("local_next", l.Next).Uint64("remote_next", m.Resolved.Manifest.NextOffset).
			Msg("the local log is empty and ends below the remote tier: it is compared again when data arrives")
		r.timers.After(c.ActorSystem().Root, c.Self(), logRecheck, logGrowthCheckMsg{first: l.First, next: l.Next})
	}
}

// logRecheck is how often a local log that could not yet be compared with the remote tier
// (empty and behind it at resolution, or a prefix of it) is looked at for growth.
const logRecheck = time.Second

// logGrowthCheckMsg asks the reader to look at a local log that held [first, next) when
// the core could not yet decide how it relates to the remote tier.
type logGrowthCheckMsg struct{ first, next uint64 }

// checkLogGrowth reinitializes once the log changed, so that a new resolution compares it
// with the remote tier chunk by chunk: a wiped log started again below the remote next
// offset then stalls as diverged (instead of having its first offsets never drained), and
// a log that was a prefix of the remote tier either matches it (caught up) or forks (and
// the remote tier is truncated at the divergence point).
func (r *reader) checkLogGrowth(c actor.Context, m logGrowthCheckMsg) {
	lg := r.h.spec.Log
	if lg.FirstOffset() == m.first && lg.NextOffset() == m.next {
		r.timers.After(c.ActorSystem().Root, c.Self(), logRecheck, m)
		return
	}
	reason := fmt.Sprintf("the local log, [%d,%d) when compared, now holds [%d,%d): comparing it with the remote tier again", m.first, m.next, lg.FirstOffset(), lg.NextOffset())
	r.log.Info().Msg(reason)
	panic(errReinitialize{reason: reason})
}

// retryResolve counts a failed resolution, says why in status and the log, and tries again
// after a growing delay.
// stalledOnMetadata records a metadata stall (logged once per phase, counted in its
// gauge, shown in status) and resolves again after Config.StallRetry.
func (r *reader) stalledOnMetadata(c actor.Context, st *metadataStall) {
	r.resolveErr = st.Reason
	r.n.metrics.StalledResolutions.Add(1)
	if r.h.setStall(r.n.metrics, st) {
		r.log.Error().Str("phase", st.Phase).Str("reason", st.Reason).
			Msg("the stream stalls: nothing is written, drained, retained or collected for it until its metadata is repaired")
		r.notifyMetadata(st)
	}
	r.timers.After(c.ActorSystem().Root, c.Self(), r.n.cfg.StallRetry, resolveRetryMsg{})
}

func (r *reader) retryResolve(c actor.Context, err error) {
	r.resolveTries++
	r.resolveErr = err.Error()
	delay := min(100*time.Millisecond<<min(r.resolveTries-1, 10), r.n.cfg.ResolveBackoffMax)
	r.n.metrics.ResolveFailures.Add(1)
	r.log.Warn().Err(err).Int("attempt", r.resolveTries).Dur("retry_in", delay).Msg("cannot resolve the manifest; retrying")
	r.timers.After(c.ActorSystem().Root, c.Self(), delay, resolveRetryMsg{})
}
