package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/tests/chaos/check"
	"github.com/streamtier/streamtier/tests/chaos/faults"
)

// commandTimeout bounds one operator command.
const commandTimeout = 30 * time.Second

// gcGraceDuringTiering is the grace period of `node gc --delete` while a node tiers: above
// the persist timeout (10 s), as docs/operations.md asks (a root uploaded by a persist in
// flight is younger than that).
const gcGraceDuringTiering = "25s"

// direct are the flags that make a command talk to the S3 server itself, not through the
// injector: the operator's tools are not under the storm.
func (w *world) direct() []string {
	return []string{"--config", w.nodeConfig, "--s3-endpoint", w.s3.Endpoint}
}

// restartNode kills the node, runs between (the node is down) and starts it again.
func (w *world) restartNode(ctx context.Context, between func() error) error {
	w.nodeUp.Store(false)
	w.node.kill()
	w.checkCrash(w.node)
	if err := w.ensureEtcd(ctx); err != nil {
		return err
	}
	if err := between(); err != nil {
		return err
	}
	var err error
	if w.node, err = w.startNode(ctx, nodeStartTimeout); err != nil {
		return err
	}
	w.nodeUp.Store(true)
	w.startWriters()
	w.note("node-start", "", "run %d pid %d", w.runs, w.node.cmd.Process.Pid)
	return nil
}

// ensureEtcd ends an etcd outage early when the harness needs etcd: to read the persisted
// next offset, and because a node does not start without etcd. The actions of a cycle run
// one after the other, so the outage's own end would otherwise come only after them.
func (w *world) ensureEtcd(ctx context.Context) error {
	running := 0
	for _, r := range w.etcd.Running() {
		if r {
			running++
		}
	}
	if 2*running > w.etcd.Members() {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := w.etcd.StartAll(sctx); err != nil {
		return err
	}
	w.note("etcd-outage-ended", "", "every member started early: the node is about to start")
	return nil
}

func streamName(w *world, i int) string {
	if i < 0 {
		return ""
	}
	return w.streams[i]
}

// actions turns a fault into what the cycle does, and when.
func (w *world) actions(f faults.Fault, plan faults.Cycle) []action {
	id := streamName(w, f.Stream)
	end := min(f.At+f.For, plan.Duration)
	switch f.Kind {
	case faults.NodeKill:
		return []action{{f.At, "node kill", func(ctx context.Context) error {
			w.countFault(string(f.Kind), "", "SIGKILL mid-cycle (run %d), the broker's writers going on; they append %v more, and the node starts again", w.runs, f.Appends)
			// The bytes fall due over the rest of the run.
			rest := time.Duration(writerPaceShare * float64(max(plan.Duration-f.At, time.Second)))
			return w.restartNode(ctx, func() error { return w.addBudgets(f.Appends, rest) })
		}}}
	case faults.S3Storm:
		var rid int
		return []action{
			{f.At, "s3 storm", func(context.Context) error {
				rid = w.addRules(w.stormRules(f))
				w.countFault(string(f.Kind)+"/"+string(f.Storm), id, "%s", f)
				return nil
			}},
			{end, "s3 storm end", func(context.Context) error {
				w.dropRules(rid)
				w.note("s3-storm-end", id, "%s over", f.Storm)
				return nil
			}},
		}
	case faults.EtcdMemberKill:
		return []action{
			{f.At, "etcd member kill", func(context.Context) error {
				w.etcd.KillMember(f.Member)
				w.countFault(string(f.Kind), "", "member m%d killed for %v", f.Member, f.For)
				return nil
			}},
			{end, "etcd member restart", func(ctx context.Context) error {
				sctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				if err := w.etcd.StartMember(sctx, f.Member); err != nil {
					return err
				}
				w.note("etcd-member-start", "", "member m%d running again", f.Member)
				return nil
			}},
		}
	case faults.EtcdClusterRestart:
		return []action{
			{f.At, "etcd cluster stop", func(context.Context) error {
				w.etcd.StopAll()
				w.countFault(string(f.Kind), "", "every member stopped for %v", f.For)
				return nil
			}},
			{end, "etcd cluster start", func(ctx context.Context) error {
				sctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				if err := w.etcd.StartAll(sctx); err != nil {
					return err
				}
				w.note("etcd-cluster-start", "", "every member running again")
				return nil
			}},
		}
	case faults.GCDelete:
		return []action{{f.At, "gc --delete", func(ctx context.Context) error {
			args := append([]string{"gc", "--delete", "--json", "--grace", gcGraceDuringTiering}, w.direct()...)
			if id != "" {
				args = append(args, id)
			}
			code, out, errOut, err := w.command(ctx, commandTimeout, args...)
			if err != nil {
				return err
			}
			var res gcResult
			deleted := -1
			if json.Unmarshal([]byte(out), &res) == nil && res.Delete != nil {
				deleted = len(res.Delete.Deleted)
			} else if json.Unmarshal([]byte(out), &res) == nil {
				deleted = 0
			}
			w.countFault(string(f.Kind), id, "node gc --delete --grace %s: exit %d, %d orphans deleted, %d pending kept %s", gcGraceDuringTiering, code, deleted, len(res.Plan.Pending), oneLine(errOut))
			return nil
		}}}
	case faults.Retention:
		return []action{{f.At, "retention", func(ctx context.Context) error {
			w.chk.PolicySet(id, check.Policy{MaxBytes: f.Policy.MaxBytes, MaxAge: f.Policy.MaxAge})
			args := append([]string{"retention", id, "--max-bytes", strconv.FormatUint(f.Policy.MaxBytes, 10), "--max-age", f.Policy.MaxAge.String()}, w.direct()...)
			code, _, errOut, err := w.command(ctx, commandTimeout, args...)
			if err != nil {
				return err
			}
			w.countFault(string(f.Kind), id, "node retention --max-bytes %d --max-age %v: exit %d %s", f.Policy.MaxBytes, f.Policy.MaxAge, code, oneLine(errOut))
			return nil
		}}}
	case faults.Cut:
		return []action{{f.At, "cut", func(ctx context.Context) error {
			code, _, errOut, err := w.command(ctx, commandTimeout, append([]string{"cut", id}, w.direct()...)...)
			if err != nil {
				return err
			}
			w.countFault(string(f.Kind), id, "node cut: exit %d %s", code, oneLine(errOut))
			return nil
		}}}
	case faults.EtcdWipe:
		return []action{{f.At, "etcd wipe", func(ctx context.Context) error {
			return w.restartNode(ctx, func() error { return w.rewindEtcd(ctx, f.Kind, nil, 0) })
		}}}
	case faults.EtcdSnapshotRestore:
		var snap []*mvccpb.KeyValue
		var snapRev int64
		return []action{
			{f.At, "etcd snapshot", func(ctx context.Context) error {
				var err error
				if snap, snapRev, err = w.etcdSnapshot(ctx); err != nil {
					snap = nil
					w.skip(string(f.Kind), "", "no snapshot: %v", err)
					return nil
				}
				w.note("etcd-snapshot", "", "%d keys under %s/ copied at revision %d", len(snap), etcdPrefix, snapRev)
				return nil
			}},
			{end, "etcd restore", func(ctx context.Context) error {
				if snap == nil {
					return nil
				}
				return w.restartNode(ctx, func() error { return w.rewindEtcd(ctx, f.Kind, snap, snapRev) })
			}},
		}
	case faults.DeposedTail, faults.BehindRetention:
		return []action{{f.At, string(f.Kind), func(ctx context.Context) error {
			if f.Kind == faults.DeposedTail {
				if err := w.awaitDeposedTiered(ctx, f); err != nil {
					return err
				}
			}
			return w.restartNode(ctx, func() error { return w.applyRewrite(ctx, f, plan) })
		}}}
	case faults.LocalAhead:
		return []action{{f.At, "local ahead", func(ctx context.Context) error {
			return w.restartNode(ctx, func() error {
				// The broker's retention acts on a stopped log: the writers close first
				// (writing the rest of their budgets) and open again after it.
				if _, err := w.closeWriters(); err != nil {
					return err
				}
				_, pNext, _, err := w.persisted(ctx, id)
				if err != nil {
					return err
				}
				pNext = max(pNext, w.chk.AckedNext(id))
				from, to, err := w.logs[f.Stream].dropHead(pNext)
				if err != nil {
					return err
				}
				if to > from && to > pNext {
					w.chk.Lost(id, pNext, to)
					w.countFault(string(f.Kind), id, "node killed with uploads refused; the broker's retention deleted the local log's [%d,%d), persisted next %d: a gap [%d,%d) is due", from, to, pNext, pNext, to)
				} else {
					w.skip(string(f.Kind), id, "no segment to delete past persisted next %d (local first %d)", pNext, from)
				}
				if w.localAheadRule != 0 {
					w.dropRules(w.localAheadRule)
					w.localAheadRule = 0
				}
				return w.openWriters(f.Appends, defaultPaces(len(w.logs), max(plan.Duration-f.At, time.Second)))
			})
		}}}
	}
	panic(fmt.Sprintf("harness: fault kind %q has no action", f.Kind))
}

// gcResult is what the harness reads of `node gc --json`.
type gcResult struct {
	Plan struct {
		Scanned    int        `json:"scanned"`
		Referenced int        `json:"referenced"`
		Orphans    []gcOrphan `json:"orphans"`
		Young      []gcOrphan `json:"young"`
		Pending    []gcOrphan `json:"pending"`
		Undecided  []gcOrphan `json:"undecided"`
		Foreign    []string   `json:"foreign"`
	} `json:"plan"`
	Delete *struct {
		Deleted []string          `json:"deleted"`
		Failed  map[string]string `json:"failed"`
	} `json:"delete"`
}

type gcOrphan struct {
	Key    string `json:"key"`
	Stream string `json:"stream"`
	Reason string `json:"reason"`
}

func oneLine(s string) string {
	if s == "" {
		return ""
	}
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	b := []byte(s)
	for i, c := range b {
		if c == '\n' {
			b[i] = ' '
		}
	}
	return "(" + string(b) + ")"
}

// etcdSnapshot copies every key under the etcd prefix at one revision (one range read is
// consistent): what a snapshot of the cluster holds of this cluster's metadata.
func (w *world) etcdSnapshot(ctx context.Context) ([]*mvccpb.KeyValue, int64, error) {
	gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := w.cli.Get(gctx, etcdPrefix+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("read %s/: %w", etcdPrefix, err)
	}
	return resp.Kvs, resp.Header.Revision, nil
}

// readRecords reads every stream's manifest record (linearizable, retried while etcd
// recovers) and the revision it read at.
func (w *world) readRecords(ctx context.Context) (map[string]*mvccpb.KeyValue, int64, error) {
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		resp, gerr := w.cli.Get(gctx, etcdPrefix+"/streams/", clientv3.WithPrefix())
		cancel()
		if gerr == nil {
			out := map[string]*mvccpb.KeyValue{}
			for _, kv := range resp.Kvs {
				stream, key, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), etcdPrefix+"/streams/"), "/")
				if ok && key == "manifest" {
					out[stream] = kv
				}
			}
			return out, resp.Header.Revision, nil
		}
		err = gerr
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return nil, 0, fmt.Errorf("read the manifest records: %w", err)
}

// recoverResult is what the harness reads of `node recover --json`.
type recoverResult struct {
	Claim struct {
		Action string `json:"Action"`
		Target *struct {
			Generation uint64 `json:"generation"`
		} `json:"Target"`
	} `json:"claim"`
	Refused string `json:"claim_refused"`
	Streams []struct {
		Stream  string `json:"stream"`
		Seq     uint64 `json:"seq"`
		Next    uint64 `json:"next_offset"`
		Action  string `json:"action"`
		Written bool   `json:"written"`
		Error   string `json:"error"`
	} `json:"streams"`
}

// rewindEtcd takes etcd's records back while the node is down: with snap nil it wipes every
// key under the prefix (etcd lost), else it puts the prefix back to the snapshot snap
// (taken at revision snapRev; keys held by a lease are left out, as their leases would have
// expired). The checker is told first (records fall back in time until the recovery), then
// `node recover --yes` runs with --takeover (a wipe: the roots are younger than 10 minutes)
// or --after-restore, and the checker judges the records it left against everything
// acknowledged before.
func (w *world) rewindEtcd(ctx context.Context, kind faults.Kind, snap []*mvccpb.KeyValue, snapRev int64) error {
	before, from, err := w.readRecords(ctx)
	if err != nil {
		return err
	}
	for stream, kv := range before {
		w.chk.Observe(stream, kv)
	}
	if err := w.chk.EtcdRewound(string(kind), from); err != nil {
		return err
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := w.cli.Delete(octx, etcdPrefix+"/", clientv3.WithPrefix()); err != nil {
		return fmt.Errorf("%s: delete %s/: %w", kind, etcdPrefix, err)
	}
	flag, what := "--takeover", fmt.Sprintf("every key under %s/ deleted at revision %d", etcdPrefix, from)
	if snap != nil {
		flag = "--after-restore"
		var ops []clientv3.Op
		for _, kv := range snap {
			if kv.Lease == 0 {
				ops = append(ops, clientv3.OpPut(string(kv.Key), string(kv.Value)))
			}
		}
		for len(ops) > 0 {
			n := min(len(ops), 64)
			if _, err := w.cli.Txn(octx).Then(ops[:n]...).Commit(); err != nil {
				return fmt.Errorf("%s: put the snapshot back: %w", kind, err)
			}
			ops = ops[n:]
		}
		var back []string
		for _, kv := range snap {
			if strings.HasSuffix(string(kv.Key), "/manifest") {
				if r, _, err := check.DecodeRecord(kv.Value); err == nil {
					back = append(back, fmt.Sprintf("%s seq %d next %d (now seq %d)", strings.TrimSuffix(strings.TrimPrefix(string(kv.Key), etcdPrefix+"/streams/"), "/manifest"), r.Seq, r.NextOffset, seqOf(before, kv)))
				}
			}
		}
		what = fmt.Sprintf("etcd put back to the snapshot of revision %d (records at revision %d: %s)", snapRev, from, strings.Join(back, ", "))
	}
	code, out, errOut, err := w.command(ctx, 2*commandTimeout, append([]string{"recover", "--yes", flag, "--json"}, w.direct()...)...)
	if err != nil {
		return err
	}
	var res recoverResult
	jerr := json.Unmarshal([]byte(out), &res)
	if code != 0 || jerr != nil {
		w.chk.Report("", "recover-failed", "after the %s, node recover --yes %s: exit %d %s %s", kind, flag, code, oneLine(out), oneLine(errOut))
	}
	var rows []string
	for _, r := range res.Streams {
		rows = append(rows, fmt.Sprintf("%s %s seq %d next %d written %t%s", r.Stream, r.Action, r.Seq, r.Next, r.Written, oneLine(r.Error)))
	}
	after, rev, err := w.readRecords(ctx)
	if err != nil {
		return err
	}
	if err := w.chk.EtcdRecovered(rev, after); err != nil {
		return err
	}
	gen := uint64(0)
	if res.Claim.Target != nil {
		gen = res.Claim.Target.Generation
	}
	w.countFault(string(kind), "", "node stopped; %s; node recover --yes %s: exit %d, claim %s generation %d, %s",
		what, flag, code, res.Claim.Action, gen, strings.Join(rows, "; "))
	return nil
}

// seqOf is the seq of the record before holds for the key of kv (0: none).
func seqOf(before map[string]*mvccpb.KeyValue, kv *mvccpb.KeyValue) uint64 {
	for _, b := range before {
		if string(b.Key) == string(kv.Key) {
			if r, _, err := check.DecodeRecord(b.Value); err == nil {
				return r.Seq
			}
		}
	}
	return 0
}
