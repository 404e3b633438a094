package harness

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// writerTick is how often a live writer appends what its pace says is due.
const writerTick = 50 * time.Millisecond

// writerPaceShare is the share of a cycle's run over which a live writer spreads the
// cycle's planned bytes: the node still sees the log grow late in the run, and most of the
// volume is in before the cycle ends.
const writerPaceShare = 0.75

// AppendStats counts the chunks the broker (the harness) appended to the logs.
type AppendStats struct {
	// LiveChunks and LiveBytes were appended while a node process was running and
	// following the log.
	LiveChunks int64 `json:"live_chunks"`
	LiveBytes  int64 `json:"live_bytes"`
	// DownChunks and DownBytes were appended while no node ran: the node-kill window of a
	// live writer, the rest a writer flushed at its stop, forks and the lost tails' cuts
	// aside (those are not appends).
	DownChunks int64 `json:"down_chunks"`
	DownBytes  int64 `json:"down_bytes"`
	// Writers is how many live writers were opened (one per stream per node run span).
	Writers int `json:"writers"`
}

// liveWriter is the broker writing one stream's log while the node follows it: a
// goroutine appending the deterministic load at a pace, with the log open for appending
// in this (the harness's) process, so that a node killed mid-append leaves the writer
// unharmed. While it is open it owns the streamLog (nobody else opens that directory).
// The node's local retention may delete the log's old segments under it: an open Log
// only writes its active segment, which the node never deletes (it keeps the last segment
// it sees, and the writer's active one is never older).
type liveWriter struct {
	sl     *streamLog
	lg     *segments.Log
	g      *loadgen.Generator
	nodeUp *atomic.Bool // the world's: whether a node process runs now

	mu       sync.Mutex
	tranches []tranche
	budget   int64         // record bytes to write in all: the tranches' sum
	met      chan struct{} // closed while the written bytes reach the budget
	next     uint64        // the log's next offset after the last append

	// Owned by the goroutine until done is closed.
	written int64
	stats   AppendStats
	err     error

	stop    chan struct{}
	done    chan struct{}
	started bool
}

// tranche is bytes the writer must write, falling due evenly over pace from begin (the
// zero time until the writer starts).
type tranche struct {
	bytes int64
	begin time.Time
	pace  time.Duration
}

// due is how much of the tranche is due at now.
func (t tranche) due(now time.Time) int64 {
	if t.begin.IsZero() {
		return 0
	}
	return int64(min(1, float64(now.Sub(t.begin))/float64(t.pace)) * float64(t.bytes))
}

// openWriter opens a stream's log for appending (the node must be down: opening recovers
// the directory) with budget record bytes to write over pace once started.
func openWriter(sl *streamLog, budget int64, pace time.Duration, nodeUp *atomic.Bool) (*liveWriter, error) {
	lg, g, err := sl.openAtLoad()
	if err != nil {
		return nil, err
	}
	lw := &liveWriter{sl: sl, lg: lg, g: g, nodeUp: nodeUp,
		met: make(chan struct{}), next: lg.NextOffset(), stop: make(chan struct{}), done: make(chan struct{})}
	lw.stats.Writers = 1
	close(lw.met)
	lw.addBudget(budget, pace)
	return lw, nil
}

// start starts the writer's goroutine (once); its pace counts from now.
func (lw *liveWriter) start() {
	if lw.started {
		return
	}
	if lw.lg == nil { // released: open it again (the node is down)
		lg, g, err := lw.sl.openAtLoad()
		if err != nil {
			lw.err = err
			return
		}
		lw.lg, lw.g = lg, g
	}
	lw.started = true
	now := time.Now()
	lw.mu.Lock()
	for i := range lw.tranches {
		if lw.tranches[i].begin.IsZero() {
			lw.tranches[i].begin = now
		}
	}
	lw.mu.Unlock()
	go lw.run() // owned by lw: close ends it
}

// addBudget raises the bytes the writer must write (a node-kill's appends); they fall due
// evenly over pace from now (from the start, for a writer not started yet).
func (lw *liveWriter) addBudget(n int64, pace time.Duration) {
	if n <= 0 {
		return
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	t := tranche{bytes: n, pace: max(pace, writerTick)}
	if lw.started {
		t.begin = time.Now()
	}
	lw.tranches = append(lw.tranches, t)
	lw.budget += n
	select {
	case <-lw.met:
		lw.met = make(chan struct{})
	default:
	}
}

// end is the log's next offset after the writer's last append.
func (lw *liveWriter) end() uint64 {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.next
}

// wait returns once the whole budget is written (or the writer failed, or ctx ended).
func (lw *liveWriter) wait(ctx context.Context) error {
	lw.mu.Lock()
	met := lw.met
	lw.mu.Unlock()
	select {
	case <-met:
		return nil
	case <-lw.done:
		return lw.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (lw *liveWriter) run() {
	defer close(lw.done)
	tick := time.NewTicker(writerTick)
	defer tick.Stop()
	for {
		select {
		case <-lw.stop:
			return
		case <-tick.C:
		}
		now := time.Now()
		var due int64
		lw.mu.Lock()
		for _, t := range lw.tranches {
			due += t.due(now)
		}
		lw.mu.Unlock()
		if err := lw.appendUpTo(due); err != nil {
			lw.err = err
			return
		}
	}
}

// appendUpTo appends the load's next chunks until at least due record bytes are written.
func (lw *liveWriter) appendUpTo(due int64) error {
	for lw.written < due {
		before := lw.g.Bytes()
		live := lw.nodeUp.Load()
		if _, _, err := lw.lg.Append(lw.g.Next()); err != nil {
			return fmt.Errorf("stream %s: live append: %w", lw.sl.id, err)
		}
		n := lw.g.Bytes() - before
		lw.written += n
		if live {
			lw.stats.LiveChunks++
			lw.stats.LiveBytes += n
		} else {
			lw.stats.DownChunks++
			lw.stats.DownBytes += n
		}
		lw.mu.Lock()
		lw.next = lw.lg.NextOffset()
		if lw.written >= lw.budget {
			select {
			case <-lw.met:
			default:
				close(lw.met)
			}
		}
		lw.mu.Unlock()
	}
	return nil
}

// close stops the goroutine, appends whatever of the budget is not written yet (so that a
// cycle's volume is the plan's whatever the machine's speed), syncs and closes the log.
// It returns the counts and the log's next offset.
func (lw *liveWriter) close() (AppendStats, uint64, error) {
	if lw.started {
		close(lw.stop)
		<-lw.done
	}
	lw.mu.Lock()
	owed := lw.budget > lw.written
	lw.mu.Unlock()
	if lw.lg == nil && !owed { // released with nothing left to write: the node may hold it
		lw.sl.end = lw.end()
		return lw.stats, lw.end(), lw.err
	}
	if lw.lg == nil { // released while the node ran (an unfollowed log): the node is down now
		lg, g, err := lw.sl.openAtLoad()
		if err != nil {
			return lw.stats, lw.next, err
		}
		lw.lg, lw.g = lg, g
	}
	err := lw.err
	if err == nil {
		lw.mu.Lock()
		budget := lw.budget
		lw.mu.Unlock()
		err = lw.appendUpTo(budget)
	}
	if err == nil {
		err = lw.lg.Sync()
	}
	next := lw.end()
	lw.sl.end = next
	return lw.stats, next, errors.Join(err, lw.lg.Close())
}

// openWriters opens a live writer on every stream's log (the node is down) with the
// streams' budgets and paces; pace[i] 0 means the default pace.
func (w *world) openWriters(budgets []int64, pace []time.Duration) error {
	if w.writers != nil {
		return errors.New("live writers already open")
	}
	for i, l := range w.logs {
		var b int64
		if i < len(budgets) {
			b = budgets[i]
		}
		lw, err := openWriter(l, b, pace[i], &w.nodeUp)
		if err == nil && !w.followed(i) {
			err = lw.release() // the node opens this log as its own
		}
		if err != nil {
			_, cerr := w.closeWriters()
			return errors.Join(err, cerr)
		}
		w.writers = append(w.writers, lw)
	}
	return nil
}

// release stops the writer (if it runs) and closes its log, so that the node can open the
// directory as its own (a log is held by one opener at a time: its lock); start or close
// open it again. It returns the writer's error, if it failed.
func (lw *liveWriter) release() error {
	if lw.lg == nil {
		return nil
	}
	if lw.started {
		close(lw.stop)
		<-lw.done
		lw.started, lw.stop, lw.done = false, make(chan struct{}), make(chan struct{})
	}
	err := errors.Join(lw.err, lw.lg.Close())
	lw.lg, lw.g = nil, nil
	return err
}

// startWriters starts the open writers of the followed logs that have not started yet
// (the node now runs). An unfollowed log's writer stays idle while the node runs: the
// node sees only what that log held when it opened it, so its bytes are written when the
// writer closes, with the node down, as a broker stopped beside a stopped node would.
func (w *world) startWriters() {
	for i, lw := range w.writers {
		if w.followed(i) {
			lw.start()
		}
	}
}

// followed tells whether the node follows log i (follow: true) or opens it as its own
// (recovering it, tiering what it held at the start). The last of several streams is
// unfollowed, so that the soak runs both ways of opening a declared log.
func (w *world) followed(i int) bool {
	return len(w.logs) < 2 || i < len(w.logs)-1
}

// addBudgets raises each live writer's budget by the stream's bytes, due over pace; with
// no writer open the bytes are appended at once, as the broker did before it wrote during
// runs.
func (w *world) addBudgets(appends []int64, pace time.Duration) error {
	if w.writers == nil {
		return w.appendLogs(appends)
	}
	for i, n := range appends {
		if i < len(w.writers) {
			w.writers[i].addBudget(n, pace)
		}
	}
	w.note("append", "", "the live writers' budgets grow by %v", appends)
	return nil
}

// closeWriters closes every live writer (see liveWriter.close), records in the history how
// far each log was written, and adds the counts to the world's. It returns the logs'
// next offsets by stream.
func (w *world) closeWriters() (map[string]uint64, error) {
	var errs []error
	ends := map[string]uint64{}
	for i, lw := range w.writers {
		st, next, err := lw.close()
		errs = append(errs, err)
		ends[w.streams[i]] = next
		w.appends.LiveChunks += st.LiveChunks
		w.appends.LiveBytes += st.LiveBytes
		w.appends.DownChunks += st.DownChunks
		w.appends.DownBytes += st.DownBytes
		w.appends.Writers += st.Writers
		if st.LiveChunks+st.DownChunks > 0 {
			w.note("append", w.streams[i], "live writer: %d chunks (%d bytes) while the node ran, %d (%d bytes) while it was down; log ends at %d",
				st.LiveChunks, st.LiveBytes, st.DownChunks, st.DownBytes, next)
		}
	}
	w.writers = nil
	return ends, errors.Join(errs...)
}

// logEnd is log i's next offset as the broker has written it so far: its open writer's
// (read without opening the directory, which the node may be trimming), else the
// streamLog's.
func (w *world) logEnd(i int) uint64 {
	if w.writers != nil {
		return w.writers[i].end()
	}
	return w.logs[i].end
}

// defaultPaces is the pace of every stream for a run of d: the cycle's bytes spread over
// writerPaceShare of it.
func defaultPaces(n int, d time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(writerPaceShare * float64(d))
	}
	return out
}
