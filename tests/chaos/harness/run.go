package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/tests/chaos/check"
	"github.com/streamtier/streamtier/tests/chaos/faults"
	"github.com/streamtier/streamtier/tests/chaos/history"
)

// Report is the outcome of a soak.
type Report struct {
	Seed           uint64            `json:"seed"`
	Duration       time.Duration     `json:"duration_ns"` // asked for
	Elapsed        time.Duration     `json:"elapsed_ns"`
	Streams        int               `json:"streams"`
	Cycles         int               `json:"cycles"`
	NodeRuns       int               `json:"node_runs"`
	Faults         map[string]int    `json:"faults"`  // by kind (storms by kind/storm)
	Skipped        map[string]int    `json:"skipped"` // faults that found no room to act
	Appends        AppendStats       `json:"appends"` // what the broker's writers appended, live or not
	Awaits         map[string]int    `json:"awaits"`  // await_offset answers by outcome (persisted, in_gap, timeout, ...)
	ScheduleDigest string            `json:"schedule_digest"`
	Check          check.Stats       `json:"check"`
	Recovery       time.Duration     `json:"recovery_ns"` // from the last fault to zero lag
	Verify         []string          `json:"verify"`      // one line per stream
	GC             string            `json:"gc"`
	Violations     []check.Violation `json:"violations"`
	WorkDir        string            `json:"work_dir,omitempty"`
	Events         int               `json:"events"`
}

// newWorld is a world for cfg, not set up yet.
func newWorld(cfg Config) *world {
	cfg.defaults()
	w := &world{cfg: cfg, start: time.Now(), counts: map[string]int{}, skipped: map[string]int{}, awaits: map[string]int{}, rules: map[int][]s3test.Rule{}}
	w.hist = history.New(w.start, cfg.Live, "persisted", "append")
	return w
}

// Run runs a soak as cfg says. Violations are in the report; the error is for a harness
// that could not run (a server that would not start, a context that ended).
func Run(ctx context.Context, cfg Config) (Report, error) {
	w := newWorld(cfg)
	cfg = w.cfg
	rep := Report{Seed: cfg.Seed, Duration: cfg.Duration, Streams: cfg.Streams}
	defer w.teardown()
	if err := w.setup(ctx); err != nil {
		return rep, fmt.Errorf("chaos setup: %w", err)
	}
	progress := cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	fmt.Fprintf(progress, "chaos: seed %d, %v, %d streams, work dir %s\n", cfg.Seed, cfg.Duration, cfg.Streams, w.dir)
	var err error
	for i := 0; time.Since(w.start) < cfg.Duration; i++ {
		plan := faults.Plan(cfg.Seed, i, cfg.Schedule)
		w.plans = append(w.plans, plan)
		if err = w.runCycle(ctx, plan); err != nil {
			break
		}
		st := w.chk.Stats()
		fmt.Fprintf(progress, "chaos: cycle %d done at %v: %d faults so far, %d acks, %d chunks compared, %d violations\n",
			i, time.Since(w.start).Round(time.Second), sum(w.counts), st.Acks, st.ChunksCompared, len(w.chk.Violations()))
	}
	if err == nil {
		err = w.final(ctx, &rep)
	}
	rep.Elapsed = time.Since(w.start)
	rep.Cycles, rep.NodeRuns = len(w.plans), w.runs
	rep.Faults, rep.Skipped = w.counts, w.skipped
	rep.Appends = w.appends
	w.mu.Lock()
	rep.Awaits = w.awaits
	w.mu.Unlock()
	rep.ScheduleDigest = faults.Digest(w.plans)
	rep.Check = w.chk.Stats()
	rep.Violations = w.chk.Violations()
	rep.Events = w.hist.Len()
	if err != nil {
		err = fmt.Errorf("chaos cycle %d: %w", w.cycle, err)
	}
	keep := cfg.Keep || cfg.Dir != "" || len(rep.Violations) > 0 || err != nil
	if keep {
		rep.WorkDir = w.dir
		if f, ferr := os.Create(w.dir + "/history.txt"); ferr == nil {
			history.Format(f, w.hist.Events(), "")
			f.Close()
		}
	} else {
		w.closers = append([]func(){func() { os.RemoveAll(w.dir) }}, w.closers...)
	}
	return rep, err
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// final stops the faults, lets the node catch up and checks everything one last time,
// including with `node verify` and `node gc`.
func (w *world) final(ctx context.Context, rep *Report) error {
	w.setCycle(len(w.plans))
	w.note("final", "", "faults stop: the node must catch up within %v", w.cfg.LagBound)
	if err := w.healAll(ctx); err != nil {
		return err
	}
	// The broker writes on: a stream whose log lost its tail waits behind the remote tier
	// until its log writes past the loss (a fork, truncated then) or catches up. So every
	// log is written past the persisted next offset, however far a lost tail cut it back
	// (32 KiB at a time; a fixed 32 KiB left a tail cut deep below it behind for good).
	// The writers write it while the node runs, and close before the lag is judged: the
	// logs' ends must be known.
	past := make([]uint64, len(w.logs))
	for i, id := range w.streams {
		_, pnext, found, err := w.persisted(ctx, id)
		if err != nil {
			return err
		}
		if found {
			past[i] = pnext
		}
	}
	if err := w.openWriters(only32(len(w.logs)), defaultPaces(len(w.logs), time.Second)); err != nil {
		return err
	}
	// An unfollowed log is written past before the node starts: the node sees only what it
	// held then.
	for i, lw := range w.writers {
		if !w.followed(i) {
			lw.start()
		}
	}
	unfollowed := func(i int) bool { return !w.followed(i) }
	if err := w.writePast(ctx, past, unfollowed); err != nil {
		return fmt.Errorf("final appends: %w", err)
	}
	for i, lw := range w.writers {
		if !w.followed(i) {
			if err := lw.release(); err != nil { // the node opens this log as its own
				return fmt.Errorf("final appends: %w", err)
			}
		}
	}
	healed := time.Now()
	var err error
	if w.node, err = w.startNode(ctx, nodeStartTimeout); err != nil {
		return err
	}
	w.nodeUp.Store(true)
	w.startWriters()
	if err := w.writePast(ctx, past, w.followed); err != nil {
		return fmt.Errorf("final appends: %w", err)
	}
	ends, err := w.closeWriters()
	if err != nil {
		return err
	}
	caught, last := w.awaitZeroLag(ctx, ends)
	rep.Recovery = time.Since(healed)
	if !caught {
		w.chk.Report("", "lag-not-zero", "%v after the faults stopped some stream still lags: %s", w.cfg.LagBound, last)
	} else {
		w.note("lag-zero", "", "every stream persisted up to its log's end %v in %v", ends, rep.Recovery.Round(time.Millisecond))
		w.finalAwaits(ctx)
	}
	code := w.node.term(60 * time.Second)
	w.nodeUp.Store(false)
	w.note("node-stop", "", "final SIGTERM: exit %d", code)
	if code != 0 {
		w.chk.Report("", "node-unclean-stop", "final stop: exit %d: %s", code, tail(w.node.logPath, 5))
	}
	w.checkCrash(w.node)
	w.node = nil
	if err := w.chk.Check(ctx, true); err != nil {
		return err
	}
	for _, id := range w.streams {
		line, err := w.verify(ctx, id)
		if err != nil {
			return err
		}
		rep.Verify = append(rep.Verify, line)
	}
	rep.GC, err = w.gcAgrees(ctx)
	return err
}

// awaitZeroLag polls the node's status until every stream has persisted its whole log
// (cutting the last partial fragment once it is drained), or the bound passes.
func (w *world) awaitZeroLag(ctx context.Context, ends map[string]uint64) (bool, string) {
	deadline := time.Now().Add(w.cfg.LagBound)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	last := "no status yet"
	for time.Now().Before(deadline) {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		rep, err := w.node.client.Status(sctx)
		cancel()
		if err == nil {
			done := true
			var parts []string
			for _, s := range rep.Streams {
				parts = append(parts, fmt.Sprintf("%s %s persisted %d of %d (drained %d, assembling %d bytes, lag %d bytes)",
					s.Stream, s.Phase, s.Remote.PersistedNext, ends[s.Stream], s.Pipeline.DrainNext, s.Fragment.Bytes, s.Lag.Bytes))
				if s.Remote.PersistedNext != ends[s.Stream] || s.Lag.Bytes != 0 {
					done = false
				}
				if s.Phase == "running" && s.Pipeline.DrainNext >= s.Local.Committed && s.Fragment.Bytes > 0 {
					cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					w.node.client.Cut(cctx, s.Stream) // a reader restarting refuses: the next tick tries again
					cancel()
				}
			}
			sort.Strings(parts)
			last = strings.Join(parts, "; ")
			if done && len(rep.Streams) == len(w.streams) {
				for _, id := range w.streams {
					if w.chk.AckedNext(id) != ends[id] {
						done = false // etcd's watch has not shown it yet
					}
				}
				if done {
					return true, last
				}
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err().Error()
		case <-tick.C:
		}
	}
	return false, last
}

// verifyReport is what the harness reads of `node verify --json`.
type verifyReport struct {
	FirstOffset   uint64 `json:"first_offset"`
	NextOffset    uint64 `json:"next_offset"`
	Fragments     int    `json:"fragments"`
	Chunks        int    `json:"chunks"`
	Gaps          int    `json:"gaps"`
	GapOffsets    uint64 `json:"gap_offsets"`
	LocalCompared int    `json:"local_compared"`
	Findings      []struct {
		Key     string `json:"key"`
		Offset  uint64 `json:"offset"`
		Problem string `json:"problem"`
	} `json:"findings"`
}

// verify runs `node verify` on a stream and reports any finding as a disagreement with the
// checker (which found nothing to say, or said it already).
func (w *world) verify(ctx context.Context, id string) (string, error) {
	code, out, errOut, err := w.command(ctx, 2*commandTimeout, append([]string{"verify", id, "--json"}, w.direct()...)...)
	if err != nil {
		return "", err
	}
	var v verifyReport
	if jerr := json.Unmarshal([]byte(out), &v); jerr != nil {
		w.chk.Report(id, "verify-disagrees", "node verify: exit %d, output not JSON: %v %s", code, jerr, oneLine(errOut))
		return fmt.Sprintf("%s: unreadable (exit %d)", id, code), nil
	}
	if code != 0 || len(v.Findings) > 0 {
		w.chk.Report(id, "verify-disagrees", "node verify: exit %d, %d findings: %+v", code, len(v.Findings), v.Findings)
	}
	if acked := w.chk.AckedNext(id); v.NextOffset != acked {
		w.chk.Report(id, "verify-disagrees", "node verify says next offset %d, the checker saw %d acknowledged", v.NextOffset, acked)
	}
	return fmt.Sprintf("%s: [%d,%d), %d fragments, %d chunks, %d gaps (%d offsets), %d chunks compared with the local log, %d findings",
		id, v.FirstOffset, v.NextOffset, v.Fragments, v.Chunks, v.Gaps, v.GapOffsets, v.LocalCompared, len(v.Findings)), nil
}

// gcAgrees runs `node gc --json --grace 0` (a dry run, the node stopped) and checks that it
// agrees with the checker: it counts as referenced exactly the objects the checker found
// referenced, lists none of them as garbage or pending, and decides every stream.
func (w *world) gcAgrees(ctx context.Context) (string, error) {
	code, out, errOut, err := w.command(ctx, 2*commandTimeout, append([]string{"gc", "--json", "--grace", "0"}, w.direct()...)...)
	if err != nil {
		return "", err
	}
	var g gcResult
	if jerr := json.Unmarshal([]byte(out), &g); jerr != nil {
		w.chk.Report("", "gc-disagrees", "node gc: exit %d, output not JSON: %v %s", code, jerr, oneLine(errOut))
		return "unreadable", nil
	}
	refs := map[string]bool{}
	listed := 0
	for _, id := range w.streams {
		r, objs := w.chk.Referenced(id)
		for k := range r {
			refs[k] = true
		}
		listed += len(objs)
	}
	listed += w.chk.OutsideObjects() // the claim (and probe leftovers): gc lists the whole key prefix
	if code != 0 || len(g.Plan.Undecided) > 0 || len(g.Plan.Foreign) > 0 {
		w.chk.Report("", "gc-disagrees", "node gc: exit %d, %d undecided, %d foreign %s", code, len(g.Plan.Undecided), len(g.Plan.Foreign), oneLine(errOut))
	}
	if g.Plan.Referenced != len(refs) || g.Plan.Scanned != listed {
		w.chk.Report("", "gc-disagrees", "node gc counts %d referenced of %d objects, the checker %d of %d", g.Plan.Referenced, g.Plan.Scanned, len(refs), listed)
	}
	for _, list := range [][]gcOrphan{g.Plan.Orphans, g.Plan.Young, g.Plan.Pending, g.Plan.Undecided} {
		for _, o := range list {
			if refs[o.Key] {
				w.chk.Report(o.Stream, "gc-disagrees", "node gc lists %s (%s), which a persisted manifest references", o.Key, o.Reason)
			}
		}
	}
	return fmt.Sprintf("%d objects, %d referenced (the checker: %d), %d orphans, %d young, %d pending, %d undecided",
		g.Plan.Scanned, g.Plan.Referenced, len(refs), len(g.Plan.Orphans), len(g.Plan.Young), len(g.Plan.Pending), len(g.Plan.Undecided)), nil
}

// Print writes the report for a person.
func (r Report) Print(out io.Writer) {
	fmt.Fprintf(out, "chaos soak: seed %d, %v asked, %v run, %d streams\n", r.Seed, r.Duration, r.Elapsed.Round(time.Second), r.Streams)
	fmt.Fprintf(out, "  cycles %d, node runs %d, history events %d, schedule digest %s\n", r.Cycles, r.NodeRuns, r.Events, r.ScheduleDigest)
	fmt.Fprintf(out, "  faults (%d):", sum(r.Faults))
	for _, k := range sortedKeys(r.Faults) {
		fmt.Fprintf(out, " %s %d,", k, r.Faults[k])
	}
	fmt.Fprintln(out)
	if len(r.Skipped) > 0 {
		fmt.Fprintf(out, "  faults that found no room:")
		for _, k := range sortedKeys(r.Skipped) {
			fmt.Fprintf(out, " %s %d,", k, r.Skipped[k])
		}
		fmt.Fprintln(out)
	}
	c := r.Check
	fmt.Fprintf(out, "  checks %d: %d persists observed, offsets checked %d, chunks compared %d, bytes compared %d (%.1f MiB), fragments read %d, groups %d, roots %d\n",
		c.Checks, c.Acks, c.OffsetsChecked, c.ChunksCompared, c.BytesCompared, float64(c.BytesCompared)/(1<<20), c.FragmentsRead, c.GroupsRead, c.RootsRead)
	fmt.Fprintf(out, "  truncations explained %d, forks written %d (followed by the remote tier %d), offsets retained by policy %d, offsets in declared gaps at the end %d\n",
		c.Truncations, c.Forks, c.ForksFollowed, c.RetainedOffsets, c.GapOffsets)
	fmt.Fprintf(out, "  format 3: %d root lineages judged, %d record parents judged, %d etcd rewinds (%d records judged after recovery, %d seen in between, not judged)\n",
		c.RootLineages, c.ParentsJudged, c.EtcdRewinds, c.Recoveries, c.RewoundRecords)
	a := r.Appends
	fmt.Fprintf(out, "  broker appends (%d writers): %d chunks (%.1f MiB) while the node ran, %d chunks (%.1f MiB) while it was down\n",
		a.Writers, a.LiveChunks, float64(a.LiveBytes)/(1<<20), a.DownChunks, float64(a.DownBytes)/(1<<20))
	fmt.Fprintf(out, "  await_offset answers (%d):", sum(r.Awaits))
	for _, k := range sortedKeys(r.Awaits) {
		fmt.Fprintf(out, " %s %d,", k, r.Awaits[k])
	}
	fmt.Fprintf(out, " judged: %d persisted (acknowledgements), %d in a declared gap\n", c.AwaitPersisted, c.AwaitInGap)
	fmt.Fprintf(out, "  recovery: lag zero %v after the faults stopped\n", r.Recovery.Round(time.Millisecond))
	for _, v := range r.Verify {
		fmt.Fprintf(out, "  verify %s\n", v)
	}
	fmt.Fprintf(out, "  gc: %s\n", r.GC)
	fmt.Fprintf(out, "  violations: %d\n", len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(out, "\nVIOLATION (cycle %d, stream %q) %s: %s\n  history:\n", v.Cycle, v.Stream, v.Rule, v.Detail)
		history.Format(out, v.Slice, "    ")
	}
	if r.WorkDir != "" {
		fmt.Fprintf(out, "  work dir kept: %s (history.txt, node-logs/)\n", r.WorkDir)
	}
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// writePast has the live writer of each log that which selects write until the log ends
// above past[i] (the stream's persisted next offset before the final run; 0: none), 32 KiB
// more at a time.
func (w *world) writePast(ctx context.Context, past []uint64, which func(int) bool) error {
	for i, lw := range w.writers {
		if !which(i) {
			continue
		}
		for round := 0; ; round++ {
			if round == 10_000 {
				return fmt.Errorf("stream %s: log still ends below the persisted next offset %d", w.streams[i], past[i])
			}
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			err := lw.wait(wctx)
			cancel()
			if err != nil {
				return err
			}
			if lw.end() > past[i] {
				break
			}
			lw.addBudget(32<<10, writerTick)
		}
	}
	return nil
}

// only32 is 32 KiB for each of n logs.
func only32(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = 32 << 10
	}
	return out
}
