package read

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors/internal/shell"
	"github.com/streamtier/streamtier/actors/read/fetchcore"
)

// The remote reader: one actor per open remote source. Its decisions are the pure
// fetchcore.Core's; the actor executes the effects: range GETs, index fetches and manifest
// walks in goroutines it owns (shell.TaskSet.Go: each under a deadline, cancelled with the
// reader, its result posted to the actor's mailbox, all of them awaited at Close), backoff
// timers on the injected clock, items handed to the consumer's queue (a chunk across ranges
// copied into a pooled buffer first). The source (remoteRead) is what the cross-tier reader
// holds: Next pops that queue and reports what it consumed.

func init() { openRemoteSource = openRemoteRead }

// Messages of the remote reader actor.
type (
	remoteTimer    struct{ id uint64 }
	remoteConsumed struct{ bytes int64 }
	remoteResume   struct{}
	remoteGetDone  struct {
		id   uint64
		data []byte
		err  error
		at   time.Duration
		ran  bool // the GET returned (false: overdue, it may still be writing its buffer)
	}
	remoteIndexDone struct{ ev fetchcore.IndexFetched }
	remoteWalkDone  struct{ ev fetchcore.LeavesFetched }
)

// walkTimeout bounds one manifest walk (a manifest read, a few group objects, a listing).
const walkTimeout = 2 * time.Minute

// closeWait bounds how long Close waits for the reader's goroutines once their context is
// cancelled (they honour it: a GET's connection is closed at once); past it Close logs the
// ones left and returns, as protoactor's StopFuture gives up on an actor after 10 s.
const closeWait = 10 * time.Second

// remoteReader is the actor.
type remoteReader struct {
	env     Env
	core    *fetchcore.Core
	src     *remoteRead
	walker  *leafWalker
	log     zerolog.Logger
	metrics *RemoteStats
	clock   shell.Clock
	opened  time.Time

	ctx    context.Context
	cancel context.CancelFunc
	tm     shell.Timers
	tasks  shell.TaskSet
	gets   map[uint64]runningGet // core get id -> its task
	bufs   map[uint64][]byte     // core get id -> the buffer lent to it, until Release
	copies map[uint64][]byte     // core copy id -> the pooled copy of a chunk across ranges, until Release
	rangeN int64                 // the core's range size: the buffers' size

	firstChunk bool
	learned    int   // the settled level this reader last gave the budget
	shownConc  int64 // what this reader adds to the node's gauges
	shownHeld  int64
}

type runningGet struct {
	task   uint64
	cancel context.CancelFunc
}

// openRemoteRead opens the remote reader of env.Stream at from.
func openRemoteRead(ctx context.Context, env Env, from uint64) (remoteSource, error) {
	if env.Store == nil || env.Latest == nil || env.Stream == "" {
		return nil, errors.New("open remote read: a store, a stream and a manifest source are required")
	}
	ownSystem := env.System == nil
	if ownSystem {
		env.System = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
			return slog.New(shell.ZerologHandler{Log: env.Log.With().Str("component", "protoactor").Logger()})
		}))
	}
	if env.Budget == nil {
		env.Budget = NewBudget(0)
	}
	if env.Stats == nil {
		env.Stats = &RemoteStats{}
	}
	env.Clock = shell.OrWall(env.Clock)
	cfg := env.Fetch
	cfg.Budget = env.Budget.total
	cfg.Learned = env.Budget.Learned()
	core, err := fetchcore.New(cfg, from)
	if err != nil {
		return nil, fmt.Errorf("open remote read of %s: %w", env.Stream, err)
	}
	log := env.Log.With().Str("actor", "remote-reader").Str("stream", env.Stream).Uint64("from", from).Logger()
	src := &remoteRead{root: env.System.Root, signal: make(chan struct{}, 1), budget: env.Budget, stats: env.Stats, log: log}
	if ownSystem {
		src.system = env.System
	}
	r := &remoteReader{
		env: env, core: core, src: src, walker: newLeafWalker(env), log: log,
		metrics: env.Stats, clock: env.Clock, opened: env.Clock.Now(), gets: map[uint64]runningGet{},
		bufs: map[uint64][]byte{}, copies: map[uint64][]byte{}, rangeN: cfg.RangeSize,
	}
	if r.rangeN == 0 {
		r.rangeN = fetchcore.DefaultRangeSize
	}
	r.ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	r.tm.Clock = env.Clock
	r.tasks = shell.TaskSet{Log: log, Panics: env.Panics, AtTask: env.AtTask}
	props := actor.PropsFromProducer(func() actor.Actor { return r },
		actor.WithSupervisor(actor.NewOneForOneStrategy(0, 0, func(any) actor.Directive { return actor.StopDirective })))
	src.pid = env.System.Root.Spawn(props)
	env.Budget.join(env.System.Root, src.pid) // every reader, this one too, gets its share by message
	env.Stats.Open.Add(1)
	return src, nil
}

func (r *remoteReader) Receive(c actor.Context) {
	defer func() {
		if p := recover(); p != nil {
			r.src.finish(fmt.Errorf("remote reader of %s crashed: %v", r.env.Stream, p))
			r.log.Error().Str("panic", fmt.Sprint(p)).Msg("remote reader crashed; the read fails")
			c.Stop(c.Self())
		}
	}()
	switch m := c.Message().(type) {
	case *actor.Started:
		r.execute(c, r.core.Start())
	case *actor.Stopping:
		r.cancel()
		r.tm.StopAll()
		r.metrics.Concurrency.Add(-r.shownConc)
		r.metrics.Buffered.Add(-r.shownHeld)
		r.shownConc, r.shownHeld = 0, 0
		clear(r.bufs) // GETs may still write into theirs, the consumer may hold the last chunk
		clear(r.copies)
	case budgetShare:
		r.step(c, fetchcore.SetBudget{Bytes: m.bytes})
	case remoteConsumed:
		r.step(c, fetchcore.Consumed{Bytes: m.bytes})
	case remoteResume:
		r.step(c, fetchcore.Resume{})
	case remoteTimer:
		r.step(c, fetchcore.TimerFired{ID: m.id})
	case shell.TaskDone:
		if res, ok := r.tasks.Done(&r.tm, m); ok {
			r.onResult(c, res)
		}
	case shell.TaskOverdue:
		if res, _, ok := r.tasks.Overdue(m); ok {
			r.onResult(c, res)
		}
	}
}

func (r *remoteReader) onResult(c actor.Context, res any) {
	switch m := res.(type) {
	case remoteGetDone:
		if g, ok := r.gets[m.id]; ok {
			g.cancel()
			delete(r.gets, m.id)
		}
		if !m.ran {
			delete(r.bufs, m.id) // its GET may still write into it: never reused
		}
		ev := fetchcore.RangeDone{ID: m.id, Data: m.data, Outcome: outcomeOf(m.err), Err: m.err, At: m.at}
		r.metrics.Bytes.Add(int64(len(m.data)))
		r.countError(ev.Outcome)
		r.step(c, ev)
	case remoteIndexDone:
		r.countError(m.ev.Outcome)
		r.step(c, m.ev)
	case remoteWalkDone:
		r.countError(m.ev.Outcome)
		r.step(c, m.ev)
	}
}

func (r *remoteReader) countError(o fetchcore.Outcome) {
	switch o {
	case fetchcore.Retriable:
		r.metrics.Errors[RemoteErrRetriable].Add(1)
	case fetchcore.NotFound:
		r.metrics.Errors[RemoteErrNotFound].Add(1)
	case fetchcore.Fatal:
		r.metrics.Errors[RemoteErrFatal].Add(1)
	}
}

func (r *remoteReader) step(c actor.Context, ev fetchcore.Event) { r.execute(c, r.core.Step(ev)) }

func (r *remoteReader) since() time.Duration { return r.clock.Now().Sub(r.opened) }

// execute carries out the core's effects in order.
func (r *remoteReader) execute(c actor.Context, effs []fetchcore.Effect) {
	for _, e := range effs {
		switch e := e.(type) {
		case fetchcore.Get:
			r.spawnGet(c, e)
		case fetchcore.Cancel:
			if g, ok := r.gets[e.ID]; ok {
				g.cancel()
				r.tasks.Settle(&r.tm, g.task)
				delete(r.gets, e.ID)
			}
			delete(r.bufs, e.ID) // its GET may still write into it: never reused
		case fetchcore.Release:
			lent := r.bufs
			if e.Copy {
				lent = r.copies
			}
			if b, ok := lent[e.ID]; ok {
				delete(lent, e.ID)
				r.env.Budget.bufs.put(b)
			}
		case fetchcore.FetchIndex:
			store := r.env.Store
			r.tasks.Go(c, r.ctx, &r.tm, &r.src.running, shell.TaskSpec{
				Name: "remote-read-index", Timeout: 2 * store.TransferTimeout(),
				Run: func(ctx context.Context) any {
					recs, err := store.ReadFragmentIndex(ctx, e.Key, 0, e.Size)
					return remoteIndexDone{ev: fetchcore.IndexFetched{ID: e.ID, Records: recs, Outcome: outcomeOf(err), Err: err}}
				},
				Failed: func(reason string) any {
					return remoteIndexDone{ev: fetchcore.IndexFetched{ID: e.ID, Outcome: fetchcore.Retriable, Err: errors.New(reason)}}
				},
			})
		case fetchcore.NeedLeaves:
			w := r.walker
			r.tasks.Go(c, r.ctx, &r.tm, &r.src.running, shell.TaskSpec{
				Name: "remote-read-walk", Timeout: walkTimeout,
				Run: func(ctx context.Context) any { return remoteWalkDone{ev: w.walk(ctx, e.ID, e.From, e.Fresh)} },
				Failed: func(reason string) any {
					return remoteWalkDone{ev: fetchcore.LeavesFetched{ID: e.ID, Outcome: fetchcore.Retriable, Err: errors.New(reason)}}
				},
			})
		case fetchcore.ArmTimer:
			r.tm.After(c.ActorSystem().Root, c.Self(), e.After, remoteTimer{id: e.ID})
		case fetchcore.Deliver:
			it := Item{Kind: ItemKind(e.Item.Kind), Tier: TierRemote, Offset: e.Item.Offset, End: e.Item.End}
			if e.Item.Kind == fetchcore.ItemChunk {
				it.Header, it.Chunk = e.Item.Header, e.Item.Chunk
				if e.Item.Parts != nil { // across ranges: copied now, the ranges' buffers may be released next
					buf := r.env.Budget.bufs.get(r.rangeN, int64(e.Item.Size()))
					it.Chunk = e.Item.Assemble(buf)
					r.copies[e.Item.Copy] = it.Chunk
				}
				if !r.firstChunk {
					r.firstChunk = true
					r.metrics.observeFirstChunk(r.since())
				}
			}
			r.src.push(it)
		case fetchcore.End:
			r.src.end(e.At)
		case fetchcore.Fail:
			r.log.Error().Err(e.Err).Msg("remote read failed")
			r.src.finish(fmt.Errorf("remote read of %s: %w", r.env.Stream, e.Err))
		}
	}
	st := r.core.Status()
	if st.Settled != r.learned && st.Settled > 0 {
		r.learned = st.Settled
		r.env.Budget.learn(st.Settled)
		r.metrics.LearnedConcurrency.Store(int64(st.Settled))
	}
	conc, held := int64(st.Concurrency), r.core.Held()
	if st.Err != nil {
		conc = 0
	}
	r.metrics.Concurrency.Add(conc - r.shownConc)
	r.metrics.Buffered.Add(held - r.shownHeld)
	r.shownConc, r.shownHeld = conc, held
}

func (r *remoteReader) spawnGet(c actor.Context, e fetchcore.Get) {
	ctx, cancel := context.WithCancel(r.ctx)
	store, clk, opened := r.env.Store, r.clock, r.opened
	get := r.env.getRange
	if get == nil {
		get = store.GetRangePartial
	}
	buf := r.env.Budget.bufs.get(r.rangeN, e.Len)
	r.bufs[e.ID] = buf
	r.metrics.GETs.Add(1)
	task := r.tasks.Go(c, ctx, &r.tm, &r.src.running, shell.TaskSpec{
		Name: "remote-read-get", Timeout: store.TransferTimeout(),
		Run: func(ctx context.Context) any {
			data, err := get(ctx, e.Key, e.Off, e.Len, buf)
			return remoteGetDone{id: e.ID, data: data, err: err, at: clk.Now().Sub(opened), ran: true}
		},
		Failed: func(reason string) any {
			return remoteGetDone{id: e.ID, err: fmt.Errorf("%s: %w", reason, context.DeadlineExceeded), at: clk.Now().Sub(opened)}
		},
	})
	r.gets[e.ID] = runningGet{task: task, cancel: cancel}
}

// remoteRead is the consumer's side of a remote reader: the queue of delivered items.
type remoteRead struct {
	root   *actor.RootContext
	pid    *actor.PID
	system *actor.ActorSystem // owned (an offline read): shut down on Close
	budget *Budget
	stats  *RemoteStats
	log    zerolog.Logger
	signal chan struct{}
	// running counts the reader's goroutines (GETs, index fetches, walks): the actor adds
	// them, Close waits for them once the actor stopped and cancelled their context.
	running sync.WaitGroup

	held int64 // chunk bytes of the item Next returned last: consumed at the next Next
	done int64 // chunk bytes consumed and not yet reported to the reader

	mu        sync.Mutex
	items     []Item
	endAt     *uint64
	ended     bool // the last Next returned the end: the next one resumes
	err       error
	closed    bool
	closeOnce sync.Once
}

func (s *remoteRead) wake() {
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

func (s *remoteRead) push(it Item) {
	s.mu.Lock()
	s.items = append(s.items, it)
	s.mu.Unlock()
	s.wake()
}

func (s *remoteRead) end(at uint64) {
	s.mu.Lock()
	s.endAt = &at
	s.mu.Unlock()
	s.wake()
}

func (s *remoteRead) finish(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	s.wake()
}

// consumedBatch is how many consumed bytes the consumer's side gathers before it tells the
// reader (one message per chunk cost a wake-up of the reader's actor per chunk); it tells
// it at once whenever it is about to wait, so the reader never waits on room the consumer
// already gave back.
const consumedBatch = 1 << 20

func (s *remoteRead) reportDone() {
	if s.done > 0 {
		s.root.Send(s.pid, remoteConsumed{bytes: s.done})
		s.done = 0
	}
}

// errSourceClosed is what Next returns after Close.
var errSourceClosed = errors.New("remote source closed")

// Next returns the next item in offset order, a *RemoteEndError at the end of the remote
// tier (a later Next asks the manifest again), or the error the read failed with. The
// previous item's Chunk is invalid from here on: Next tells the reader the consumer is done
// with it, and the buffer it was cut from may be reused for another range.
func (s *remoteRead) Next(ctx context.Context) (Item, error) {
	s.done += s.held
	s.held = 0
	for {
		s.mu.Lock()
		switch {
		case s.closed:
			s.mu.Unlock()
			return Item{}, errSourceClosed
		case len(s.items) > 0:
			it := s.items[0]
			s.items[0] = Item{}
			s.items = s.items[1:]
			s.mu.Unlock()
			s.held = int64(len(it.Chunk))
			if s.done >= consumedBatch {
				s.reportDone()
			}
			return it, nil
		case s.err != nil:
			err := s.err
			s.mu.Unlock()
			return Item{}, err
		case s.endAt != nil:
			at := *s.endAt
			s.endAt, s.ended = nil, true
			s.mu.Unlock()
			s.reportDone()
			return Item{}, &RemoteEndError{At: at}
		case s.ended:
			s.ended = false
			s.mu.Unlock()
			s.root.Send(s.pid, remoteResume{})
			continue
		}
		s.mu.Unlock()
		s.reportDone() // about to wait: the reader must know all the room there is
		select {
		case <-s.signal:
		case <-ctx.Done():
			return Item{}, ctx.Err()
		}
	}
}

// Close stops the reader's actor, which cancels its goroutines (GETs, index fetches, walks),
// and waits for them (at most closeWait); the budget share goes back to the other readers.
func (s *remoteRead) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed, s.items = true, nil
		s.mu.Unlock()
		s.budget.leave(s.pid)
		if err := s.root.StopFuture(s.pid).Wait(); err != nil {
			s.finish(err)
		}
		s.awaitRunning()
		s.stats.Open.Add(-1)
		if s.system != nil {
			s.system.Shutdown()
		}
	})
	return nil
}

// awaitRunning waits for the reader's goroutines once the actor stopped (its Stopping
// cancelled their context, and it starts no more): at most closeWait, then it logs and
// lets them end on their own deadlines.
func (s *remoteRead) awaitRunning() {
	done := make(chan struct{})
	go func() {
		s.running.Wait()
		close(done)
	}()
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.log.Error().Dur("waited", closeWait).Msg("remote reader closed with GET, index or walk goroutines still running past their cancellation")
	}
}
