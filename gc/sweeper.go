package gc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Mode says what an automatic sweep does with the orphans it finds.
type Mode string

// Modes of automatic garbage collection.
const (
	ModeDryRun Mode = "dry-run" // find and report, delete nothing (the default)
	ModeDelete Mode = "delete"  // delete the orphans, exactly as `node gc --delete`
)

// ParseMode reads a mode setting.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case ModeDryRun, ModeDelete:
		return Mode(s), nil
	}
	return "", fmt.Errorf("%q: want %s or %s", s, ModeDryRun, ModeDelete)
}

// DefaultLockTTL is the lease of the sweep lock: a node that dies mid-sweep frees the lock
// after about this long.
const DefaultLockTTL = 30 * time.Second

// DefaultSweepTimeout bounds one automatic sweep by default.
const DefaultSweepTimeout = 30 * time.Minute

// SweeperConfig configures automatic garbage collection on one node.
type SweeperConfig struct {
	// Options are those of `node gc` (store, metadata, key prefix, grace): a sweep is Scan,
	// then in ModeDelete Delete, with exactly these options.
	Options  Options
	Interval time.Duration // between the end of a sweep and the next attempt; must be positive
	Mode     Mode          // default ModeDryRun
	NodeID   string        // written into the lock key's value, for operators
	LockTTL  time.Duration // default DefaultLockTTL; at least 1 s (etcd leases are whole seconds)
	// Timeout bounds one sweep, scan and delete (default DefaultSweepTimeout): a sweep past
	// it fails and the next round starts afresh.
	Timeout time.Duration
	Log     zerolog.Logger
	// Observe, when set, is called with every sweep's result (also a skipped one) once it
	// ended, before the lock is released: tests record sweep intervals with it.
	Observe func(SweepResult)
}

// SweepResult is what one sweep attempt did.
type SweepResult struct {
	Node     string
	Started  time.Time // after the lock was taken
	Finished time.Time
	// Skipped says another node held the lock: this node did nothing this round.
	Skipped bool
	Mode    Mode
	// Counts of the plan: objects listed, referenced, orphans (garbage past the grace),
	// young garbage, pending and undecided objects, foreign keys.
	Scanned, Referenced, Orphans, Young, Pending, Undecided, Foreign int
	// Unclaimed counts objects of prefixes etcd knows nothing of: reported, never collected.
	Unclaimed   int
	OrphanBytes int64
	// Deleted, Failed and Skipped orphans (ModeDelete): Failed were refused by the server,
	// StaleSkipped belong to streams that persisted since the scan.
	Deleted, Failed, StaleSkipped int
	// Err is why the sweep could not run or finish (lock, listing, etcd); undecided streams
	// are reported in Undecided and UndecidedReason, not here.
	Err             error
	UndecidedReason string
}

// SweeperStatus is what status and metrics show of automatic garbage collection.
type SweeperStatus struct {
	Enabled  bool
	Mode     Mode
	Interval time.Duration
	Grace    time.Duration
	Last     *SweepResult // the last sweep this node ran (not a skipped one); nil before
	// LastAttempt is when this node last tried to take the lock.
	LastAttempt time.Time
	// Counters since the start: sweeps run here, rounds skipped because another node held
	// the lock, sweeps that failed, orphans found (summed over sweeps), objects deleted,
	// deletes the server refused.
	Sweeps, SkippedLocked, SweepErrors, OrphansFound, ObjectsDeleted, DeleteFailures uint64
}

// Sweeper runs garbage collection periodically, one node of a cluster at a time: each round
// it takes an etcd lock (a key created only if absent, under a lease: concurrency.Mutex
// with TryLock) and, if another node holds it, skips the round. It owns one goroutine from
// Start until Stop.
type Sweeper struct {
	cfg     SweeperConfig
	lockKey string

	mu     sync.Mutex
	status SweeperStatus

	cancel context.CancelFunc
	done   chan struct{}
}

// NewSweeper validates cfg and prepares a sweeper.
func NewSweeper(cfg SweeperConfig) (*Sweeper, error) {
	o := cfg.Options.withDefaults()
	if o.Store == nil || o.Meta == nil {
		return nil, errors.New("gc sweeper: an object store and a metadata store are required")
	}
	if o.Stream != "" {
		return nil, errors.New("gc sweeper: sweeps the whole key prefix, not one stream")
	}
	if cfg.Interval <= 0 {
		return nil, fmt.Errorf("gc sweeper: gc_interval %v: must be positive", cfg.Interval)
	}
	if cfg.Mode == "" {
		cfg.Mode = ModeDryRun
	}
	if _, err := ParseMode(string(cfg.Mode)); err != nil {
		return nil, fmt.Errorf("gc sweeper: gc_mode %w", err)
	}
	if cfg.LockTTL == 0 {
		cfg.LockTTL = DefaultLockTTL
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultSweepTimeout
	}
	if cfg.LockTTL < time.Second {
		return nil, fmt.Errorf("gc sweeper: lock ttl %v: at least 1s", cfg.LockTTL)
	}
	if o.Grace < 0 {
		return nil, fmt.Errorf("gc sweeper: gc_grace_period %v: negative", o.Grace)
	}
	if cfg.Mode == ModeDelete && o.Grace < MinDeleteGrace {
		return nil, fmt.Errorf("gc sweeper: gc_grace_period %v is below %v in gc_mode %s: a root could be collected between its PUT and the etcd write that names it", o.Grace, MinDeleteGrace, ModeDelete)
	}
	cfg.Options = o
	return &Sweeper{
		cfg: cfg, lockKey: o.Meta.Prefix() + "/gc/lock",
		status: SweeperStatus{Enabled: true, Mode: cfg.Mode, Interval: cfg.Interval, Grace: o.Grace},
	}, nil
}

// Start runs a first sweep after one interval, then one every interval, until Stop or ctx
// ends. (Not at once: a fleet restarted together would all race for the lock at start.)
func (s *Sweeper) Start(ctx context.Context) {
	ctx, s.cancel = context.WithCancel(ctx)
	s.done = make(chan struct{})
	go s.run(ctx) // owned by s: Stop ends it
}

// Stop ends the sweeper's goroutine (cancelling a sweep in flight) and waits for it.
func (s *Sweeper) Stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	<-s.done
}

func (s *Sweeper) run(ctx context.Context) {
	defer close(s.done)
	timer := time.NewTimer(s.cfg.Interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		s.SweepOnce(ctx)
		timer.Reset(s.cfg.Interval)
	}
}

// Status is a copy of what the sweeper did so far.
func (s *Sweeper) Status() SweeperStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	if st.Last != nil {
		last := *st.Last
		st.Last = &last
	}
	return st
}

// SweepOnce runs one round now: take the lock or skip, scan, delete in ModeDelete, record.
func (s *Sweeper) SweepOnce(ctx context.Context) SweepResult {
	res := SweepResult{Node: s.cfg.NodeID, Mode: s.cfg.Mode}
	s.mu.Lock()
	s.status.LastAttempt = time.Now()
	s.mu.Unlock()
	meta := s.cfg.Options.Meta
	ttl := int((s.cfg.LockTTL + time.Second - 1) / time.Second)
	// The lease is granted under a deadline; the session around it outlives a cancelled
	// ctx, so that Close still revokes the lease (and the lock key with it) when the
	// sweeper stops mid-sweep.
	grantCtx, cancelGrant := context.WithTimeout(ctx, 10*time.Second)
	lease, err := meta.Client().Grant(grantCtx, int64(ttl))
	cancelGrant()
	var sess *concurrency.Session
	if err == nil {
		sess, err = concurrency.NewSession(meta.Client(), concurrency.WithLease(lease.ID), concurrency.WithTTL(ttl), concurrency.WithContext(context.WithoutCancel(ctx)))
	}
	if err != nil {
		if ctx.Err() != nil {
			return res // stopping: nothing to report
		}
		res.Err = fmt.Errorf("gc lock: etcd lease: %w", err)
		return s.record(res)
	}
	defer sess.Close() // revokes the lease: the lock key goes with it
	mu := concurrency.NewMutex(sess, s.lockKey)
	lockCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = mu.TryLock(lockCtx)
	cancel()
	if errors.Is(err, concurrency.ErrLocked) {
		res.Skipped = true
		return s.record(res)
	}
	if err != nil {
		if ctx.Err() != nil {
			return res
		}
		res.Err = fmt.Errorf("gc lock %s: %w", s.lockKey, err)
		return s.record(res)
	}
	// The sweep runs under the lock's lease: should the lease be lost (etcd unreachable
	// longer than its TTL), another node may take the lock, so this sweep stops.
	sweepCtx, stop := context.WithTimeout(ctx, s.cfg.Timeout)
	defer stop()
	go func() { // owned by this sweep: stop ends it
		select {
		case <-sess.Done():
			stop()
		case <-sweepCtx.Done():
		}
	}()
	res.Started = time.Now()
	s.sweep(sweepCtx, &res)
	if sweepCtx.Err() != nil && ctx.Err() == nil { // cut short by the deadline or the lease
		why := errors.New("gc lock: the lease was lost during the sweep; stopped")
		if errors.Is(sweepCtx.Err(), context.DeadlineExceeded) {
			why = fmt.Errorf("gc sweep: not done after %v; stopped", s.cfg.Timeout)
		}
		res.Err = errors.Join(why, res.Err)
	}
	res.Finished = time.Now()
	if ctx.Err() == nil { // a sweep cut short by Stop is not reported
		res = s.record(res)
	}
	unlockCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := mu.Unlock(unlockCtx); err != nil {
		s.cfg.Log.Warn().Err(err).Msg("gc: unlock failed; the lock goes with its lease")
	}
	return res
}

// sweep is `node gc` (Scan, then Delete in ModeDelete) with the sweeper's options.
func (s *Sweeper) sweep(ctx context.Context, res *SweepResult) {
	o := s.cfg.Options
	plan, err := Scan(ctx, o)
	if err != nil {
		res.Err = err
		return
	}
	res.Scanned, res.Referenced, res.Orphans, res.Young = plan.Scanned, plan.Referenced, len(plan.Orphans), len(plan.Young)
	res.Pending, res.Undecided, res.Foreign = len(plan.Pending), len(plan.Undecided), len(plan.Foreign)
	res.Unclaimed = len(plan.Unclaimed)
	for _, or := range plan.Orphans {
		res.OrphanBytes += or.Size
	}
	if len(plan.Undecided) > 0 {
		res.UndecidedReason = fmt.Sprintf("stream %s: %s", plan.Undecided[0].Stream, plan.Undecided[0].Reason)
	}
	if s.cfg.Mode != ModeDelete || len(plan.Orphans) == 0 {
		return
	}
	if ctx.Err() != nil {
		res.Err = ctx.Err()
		return
	}
	d, err := Delete(ctx, o, plan)
	res.Deleted, res.Failed, res.StaleSkipped = len(d.Deleted), len(d.Failed), len(d.Skipped)
	if err != nil {
		res.Err = err
	}
}

// record updates the status with res, logs it and hands it to Observe.
func (s *Sweeper) record(res SweepResult) SweepResult {
	s.mu.Lock()
	switch {
	case res.Skipped:
		s.status.SkippedLocked++
	default:
		last := res
		s.status.Last = &last
		s.status.Sweeps++
		s.status.OrphansFound += uint64(res.Orphans)
		s.status.ObjectsDeleted += uint64(res.Deleted)
		s.status.DeleteFailures += uint64(res.Failed)
		if res.Err != nil {
			s.status.SweepErrors++
		}
	}
	s.mu.Unlock()
	log := s.cfg.Log
	switch {
	case res.Skipped:
		log.Debug().Msg("gc: another node holds the sweep lock; skipped")
	case res.Err != nil:
		log.Error().Err(res.Err).Msg("gc sweep failed")
	default:
		ev := log.Info()
		if res.Undecided > 0 || res.Failed > 0 {
			ev = log.Warn().Str("undecided", res.UndecidedReason)
		}
		ev.Str("mode", string(res.Mode)).Int("scanned", res.Scanned).Int("orphans", res.Orphans).Int64("orphan_bytes", res.OrphanBytes).
			Int("young", res.Young).Int("pending", res.Pending).Int("undecided_objects", res.Undecided).
			Int("deleted", res.Deleted).Int("delete_failed", res.Failed).Int("stale_skipped", res.StaleSkipped).
			Str("took", res.Finished.Sub(res.Started).String()).Msg("gc sweep")
	}
	if s.cfg.Observe != nil {
		s.cfg.Observe(res)
	}
	return res
}
