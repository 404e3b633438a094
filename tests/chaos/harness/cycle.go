package harness

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/tests/chaos/check"
	"github.com/streamtier/streamtier/tests/chaos/faults"
)

// nodeStartTimeout bounds a node start (retries included).
const nodeStartTimeout = 90 * time.Second

// countFault records a fault in the history and the counts.
func (w *world) countFault(kind, stream, format string, args ...any) {
	w.mu.Lock()
	w.counts[kind]++
	w.mu.Unlock()
	w.hist.Add(w.cycle, kind, stream, true, format, args...)
}

func (w *world) skip(kind, stream, format string, args ...any) {
	w.skipped[kind]++
	w.hist.Add(w.cycle, kind+"-skipped", stream, false, format, args...)
}

func (w *world) note(kind, stream, format string, args ...any) {
	w.hist.Add(w.cycle, kind, stream, false, format, args...)
}

// appendLogs grows each stream's log by the planned bytes (the node is down).
func (w *world) appendLogs(appends []int64) error {
	for i, n := range appends {
		if n <= 0 {
			continue
		}
		next, err := w.logs[i].appendBytes(n)
		if err != nil {
			return err
		}
		w.note("append", w.streams[i], "%d bytes; log ends at %d", n, next)
	}
	return nil
}

// persisted reads stream's persisted [first, next) from etcd (linearizable), with retries
// while etcd recovers.
func (w *world) persisted(ctx context.Context, stream string) (first, next uint64, found bool, err error) {
	for attempt := 0; attempt < 10; attempt++ {
		gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		resp, gerr := w.cli.Get(gctx, etcdPrefix+"/streams/"+stream+"/manifest")
		cancel()
		if gerr == nil {
			if len(resp.Kvs) == 0 {
				return 0, 0, false, nil
			}
			r, _, derr := check.DecodeRecord(resp.Kvs[0].Value)
			if derr != nil {
				return 0, 0, false, derr
			}
			w.chk.Observe(stream, resp.Kvs[0])
			return r.FirstOffset, r.NextOffset, true, nil
		}
		err = gerr
		select {
		case <-ctx.Done():
			return 0, 0, false, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return 0, 0, false, fmt.Errorf("read the manifest record of %s: %w", stream, err)
}

// lostTail cuts a stream's log back at a chunk boundary where the remote tier is ahead of
// it: above the local and remote first offsets and the latest fork, below the persisted
// next offset when it can (else anywhere above the first chunk). A fork then writes another
// timeline from the cut on at once (when no earlier fork of the stream is still pending).
// The cut stays above the latest fork so that the log's last epoch, which the node takes as
// its writer epoch, never falls.
func (w *world) lostTail(ctx context.Context, f faults.Fault) error {
	l, id := w.logs[f.Stream], w.streams[f.Stream]
	first, next, _, err := l.bounds()
	if err != nil {
		return err
	}
	pFirst, pNext, found, err := w.persisted(ctx, id)
	if err != nil {
		return err
	}
	lo := max(first, l.lin.Latest().Base()) + 1
	if found {
		lo = max(lo, pFirst+1)
	}
	hi := next
	if found && pNext > lo {
		hi = min(hi, pNext)
	}
	cands, err := l.boundaries(lo, hi)
	if err != nil {
		return err
	}
	if w.cfg.AvoidKnownBugs {
		// Known bug: a divergence point inside a fragment whose first chunk the log still
		// holds makes the node drop the whole fragment (docs/soak.md). Cut only where one starts.
		starts := map[uint64]bool{}
		for _, o := range w.chk.FragmentStarts(id) {
			starts[o] = true
		}
		var at []uint64
		for _, o := range cands {
			if starts[o] {
				at = append(at, o)
			}
		}
		cands = at
	}
	if len(cands) == 0 {
		w.skip(string(faults.LostTail), id, "no chunk boundary in (%d,%d): local [%d,%d), persisted [%d,%d)", lo, hi, first, next, pFirst, pNext)
		return nil
	}
	cut := cands[int(f.Fraction*float64(len(cands)))%len(cands)]
	if f.Fork && w.chk.ForkPending(id) {
		w.skip(string(faults.LostTail)+"/fork", id, "the fork at %d is still pending: the log refills with the same chunks", l.lin.Latest().Base())
		f.Fork = false
	}
	if !f.Fork {
		w.chk.Truncated(id, cut)
		if err := l.truncateTail(cut); err != nil {
			return err
		}
		w.countFault(string(faults.LostTail), id, "local log cut back from %d to %d (persisted [%d,%d)): the remote tier is ahead", next, cut, pFirst, pNext)
		return nil
	}
	cfg := w.forkLoad(id, l.lin.Created(), l.lin.ChunkCovering(cut).TS)
	if err := w.chk.Forked(id, cut, cfg); err != nil {
		return err
	}
	if err := l.truncateTail(cut); err != nil {
		return err
	}
	if err := l.lin.Fork(cut, cfg); err != nil {
		return err
	}
	end, err := l.appendBytes(f.ForkBytes)
	if err != nil {
		return err
	}
	w.countFault(string(faults.LostTail)+"/fork", id, "local log cut back from %d to %d (persisted [%d,%d)), then another timeline (epoch %d) written to %d: the node must cut the remote tier back to %d",
		next, cut, pFirst, pNext, cfg.Epoch, end, cut)
	return nil
}

// stormRules are the injector rules of an S3 storm.
func (w *world) stormRules(f faults.Fault) []s3test.Rule {
	key := "^" + keyPrefix + "/"
	if f.Stream >= 0 {
		key = "^" + strings.TrimSuffix(check.StreamPrefix(keyPrefix, w.streams[f.Stream]), "/") + "/"
	} else {
		key += "[0-9a-f]{4}/[^/]+/"
	}
	if f.Target != "" {
		key += f.Target + "/"
	}
	r := s3test.Rule{Method: f.Method, KeyRegexp: key, Count: f.Count}
	switch f.Storm {
	case faults.Storm503:
		r.Fault = s3test.FaultSlowDown
	case faults.Storm500:
		r.Fault = s3test.FaultInternalError
	case faults.StormResetRequest:
		r.Fault, r.Method = s3test.FaultResetRequest, "PUT"
	case faults.StormResetReply:
		r.Fault, r.Method = s3test.FaultResetResponse, "GET"
	case faults.StormDrop:
		r.Fault = s3test.FaultDropResponse
	case faults.Storm403:
		r.Fault = s3test.FaultForbidden
	case faults.StormSlow:
		r.Fault, r.Delay = s3test.FaultDelay, f.Delay
	case faults.StormCorrupt:
		r.Fault, r.Method = s3test.FaultCorruptBody, "PUT"
	}
	return []s3test.Rule{r}
}

// setRules replaces the injector's rules by those of the storms in force.
func (w *world) setRules() {
	w.inj.Clear()
	ids := make([]int, 0, len(w.rules))
	for id := range w.rules {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		for _, r := range w.rules[id] {
			if err := w.inj.AddRule(r); err != nil {
				panic(err) // the harness's own patterns
			}
		}
	}
}

func (w *world) addRules(rs []s3test.Rule) int {
	w.nextRule++
	w.rules[w.nextRule] = rs
	w.setRules()
	return w.nextRule
}

func (w *world) dropRules(id int) {
	delete(w.rules, id)
	w.setRules()
}

// action is something the cycle does at a moment of its run.
type action struct {
	at   time.Duration
	name string
	do   func(ctx context.Context) error
}

// runCycle runs one cycle's plan: log changes while the node is down, the node's run with
// its faults, the stop, then the check.
func (w *world) runCycle(ctx context.Context, plan faults.Cycle) error {
	w.setCycle(plan.Index)
	w.note("cycle", "", "%s", plan)
	if plan.LostTail != nil {
		if err := w.lostTail(ctx, *plan.LostTail); err != nil {
			return err
		}
	}
	budgets := append([]int64(nil), plan.Appends...)
	w.rewrite = nil
	for _, f := range plan.Faults {
		if faults.IsBrokerRewrite(f.Kind) {
			if err := w.prepareRewrite(ctx, f, budgets); err != nil {
				return fmt.Errorf("cycle %d: %s before the start: %w", plan.Index, f.Kind, err)
			}
		}
	}
	acts := w.awaitActions(plan.Duration) // before the appends: it notes where the logs end
	// The broker writes the cycle's bytes while the node runs (the node follows the logs).
	// A local-ahead stream's bytes are all due well before the fault, so that its log is
	// several segments ahead of the refused uploads by then.
	paces := defaultPaces(len(w.logs), plan.Duration)
	for _, f := range plan.Faults {
		if f.Kind == faults.LocalAhead {
			paces[f.Stream] = min(paces[f.Stream], time.Duration(writerPaceShare*float64(f.At)))
		}
		if f.Kind == faults.DeposedTail {
			// The deposed leader's bytes are due by half the fault's moment, so that the
			// node has tiered some of them when its suffix is cut away.
			paces[f.Stream] = min(paces[f.Stream], f.At/2)
		}
	}
	if err := w.openWriters(budgets, paces); err != nil {
		return err
	}
	for _, f := range plan.Faults {
		acts = append(acts, w.actions(f, plan)...)
	}
	// A local-ahead blocks its stream's fragment uploads from the start.
	for _, f := range plan.Faults {
		if f.Kind == faults.LocalAhead {
			key := "^" + check.StreamPrefix(keyPrefix, w.streams[f.Stream]) + "data/"
			id := w.addRules([]s3test.Rule{{Method: "PUT", KeyRegexp: key, Fault: s3test.FaultForbidden}})
			w.localAheadRule = id
			w.note("s3-block", w.streams[f.Stream], "fragment PUTs refused (403) until the local-ahead")
		}
	}
	sort.SliceStable(acts, func(i, j int) bool { return acts[i].at < acts[j].at })
	var err error
	if w.node, err = w.startNode(ctx, nodeStartTimeout); err != nil {
		return err
	}
	w.nodeUp.Store(true)
	w.startWriters()
	w.note("node-start", "", "run %d pid %d", w.runs, w.node.cmd.Process.Pid)
	begin := time.Now()
	for _, a := range acts {
		if err := waitUntil(ctx, begin.Add(a.at)); err != nil {
			return err
		}
		if err := a.do(ctx); err != nil {
			return fmt.Errorf("cycle %d: %s: %w", plan.Index, a.name, err)
		}
	}
	if err := waitUntil(ctx, begin.Add(plan.Duration)); err != nil {
		return err
	}
	// The end: every window closes, etcd is whole again, the node stops.
	if err := w.healAll(ctx); err != nil {
		return err
	}
	if plan.CleanStop {
		code := w.node.term(40 * time.Second)
		w.note("node-stop", "", "SIGTERM: exit %d", code)
		if code != 0 {
			w.chk.Report("", "node-unclean-stop", "the node did not stop cleanly after SIGTERM (exit %d): %s", code, tail(w.node.logPath, 5))
		}
	} else {
		w.node.kill()
		w.countFault(string(faults.NodeKill), "", "SIGKILL at the end of the cycle (run %d)", w.runs)
	}
	w.nodeUp.Store(false)
	w.checkCrash(w.node)
	w.node = nil
	// The node was stopped mid-append; the writers now write what is left of the plan.
	if _, err := w.closeWriters(); err != nil {
		return err
	}
	return w.chk.Check(ctx, false)
}

// checkCrash reports a node process that panicked or raced.
func (w *world) checkCrash(p *nodeProc) {
	if s := p.crashed(); s != "" {
		w.chk.Report("", "node-crashed", "run %s: %s", p.logPath, s)
	}
}

// waitUntil waits until t (the schedule's moment) or ctx's end.
func waitUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// healAll closes every open window: S3 rules cleared, every etcd member running.
func (w *world) healAll(ctx context.Context) error {
	if len(w.rules) > 0 {
		w.rules = map[int][]s3test.Rule{}
		w.setRules()
		w.note("heal", "", "S3 rules cleared")
	}
	w.localAheadRule = 0
	down := false
	for _, r := range w.etcd.Running() {
		down = down || !r
	}
	if down {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := w.etcd.StartAll(sctx); err != nil {
			return err
		}
		w.note("heal", "", "every etcd member running")
	}
	return nil
}
