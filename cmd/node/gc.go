package main

import (
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/streamtier/streamtier/backends"
	"github.com/streamtier/streamtier/claim"
	"github.com/streamtier/streamtier/gc"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/nodeconfig"
)

// gcOutput is `node gc --json`.
type gcOutput struct {
	Plan    gc.Plan          `json:"plan"`
	Deleted *gc.DeleteResult `json:"delete,omitempty"`
}

func gcCmd(args []string, stdout, stderr io.Writer) int {
	var del, asJSON bool
	s, pos, code, ok := parseFlags("gc", nodeconfig.ModeRun, args, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&del, "delete", false, "delete the orphans (default: only list them)")
		fs.BoolVar(&asJSON, "json", false, "print JSON")
		fs.String("grace", "", "same as --gc-grace-period")
	})
	if !ok {
		return code
	}
	stream, code, ok := optionalStream(stderr, "gc", pos)
	if !ok {
		return code
	}
	if del && s.GCGracePeriod < gc.MinDeleteGrace {
		// Refused before anything is read: delete mode never runs below the minimum, even
		// when nothing would be old enough to delete.
		return fail(stderr, "gc", fmt.Errorf("--delete with grace period %v: below %v a root could be collected between its PUT and the etcd write that names it; refused, nothing deleted (give --grace 5m or more, or run without --delete)", s.GCGracePeriod, gc.MinDeleteGrace))
	}
	ctx, cancel := commandContext()
	defer cancel()
	b, err := backends.ForCommand(ctx, s)
	if err != nil {
		return fail(stderr, "gc", err)
	}
	defer b.Close()
	if del {
		// A command that deletes opens the key prefix as a node does: the store's
		// conditional creates, then the claim (created on a version 2 prefix whose streams
		// are anchored here; refused by name on a mismatch).
		if _, err := claim.Open(ctx, claim.Options{Store: b.Store, Meta: b.Meta, KeyPrefix: b.KeyPrefix}); err != nil {
			return fail(stderr, "gc", fmt.Errorf("--delete: nothing deleted: %w", err))
		}
	}
	opts := gc.Options{Store: b.Store, Meta: b.Meta, KeyPrefix: b.KeyPrefix, Stream: stream, Grace: s.GCGracePeriod}
	plan, err := gc.Scan(ctx, opts)
	if err != nil {
		return fail(stderr, "gc", err)
	}
	var res *gc.DeleteResult
	if del && len(plan.Orphans) > 0 {
		r, err := gc.Delete(ctx, opts, plan)
		if err != nil {
			return fail(stderr, "gc", err)
		}
		res = &r
	}
	if asJSON {
		normalizePlan(&plan)
		writeJSON(stdout, gcOutput{Plan: plan, Deleted: res})
	} else {
		printGC(stdout, b, s, stream, plan, res, del)
	}
	code = exitOK
	if len(plan.Undecided) > 0 {
		reasons := map[string]string{}
		for _, u := range plan.Undecided {
			reasons[u.Stream] = u.Reason
		}
		for _, id := range sortedStrings(reasons) {
			fmt.Fprintf(stderr, "node gc: stream %s: nothing collected: %s\n", id, reasons[id])
		}
		code = exitFailed
	}
	if res != nil && (len(res.Failed) > 0 || len(res.Skipped) > 0) {
		code = exitFailed
	}
	return code
}

func normalizePlan(p *gc.Plan) {
	if p.Orphans == nil {
		p.Orphans = []gc.Orphan{}
	}
	if p.Young == nil {
		p.Young = []gc.Orphan{}
	}
	if p.Pending == nil {
		p.Pending = []gc.Orphan{}
	}
	if p.Undecided == nil {
		p.Undecided = []gc.Orphan{}
	}
	if p.Foreign == nil {
		p.Foreign = []string{}
	}
}

func printGC(out io.Writer, b *backends.Backends, s nodeconfig.Settings, stream string, p gc.Plan, res *gc.DeleteResult, del bool) {
	where := b.KeyPrefix + "/"
	if stream != "" {
		where = manifest.StreamPrefix(b.KeyPrefix, stream)
	}
	var orphanBytes int64
	for _, o := range p.Orphans {
		orphanBytes += o.Size
	}
	fmt.Fprintf(out, "gc: %d objects (%s) under %s in bucket %s (%s): %d referenced, %d orphans (%s), %d garbage younger than the grace period %s (kept), %d pending (kept: a live writer may still persist them)\n",
		p.Scanned, human(p.Bytes), where, b.Store.Bucket(), b.Describe(), p.Referenced, len(p.Orphans), human(orphanBytes), len(p.Young), s.GCGracePeriod, len(p.Pending))
	now := time.Now()
	listing := func(title string, os []gc.Orphan) {
		if len(os) == 0 {
			return
		}
		fmt.Fprintf(out, "\n%s\n", title)
		t := newTable(out)
		t.row("KEY", "SIZE", "AGE", "REASON")
		for _, o := range os {
			t.row(o.Key, human(o.Size), dur(now.Sub(o.LastModified).Truncate(time.Second)), o.Reason)
		}
		t.flush()
	}
	listing("orphans (garbage older than the grace period):", p.Orphans)
	listing("pending (never deleted while a writer may still persist them):", p.Pending)
	if len(p.Foreign) > 0 {
		fmt.Fprintf(out, "\n%d keys under the prefix are not streamtier objects and are left alone (first: %s)\n", len(p.Foreign), p.Foreign[0])
	}
	switch {
	case res != nil:
		fmt.Fprintf(out, "\ndeleted %d objects\n", len(res.Deleted))
		for _, k := range sortedStrings(res.Failed) {
			fmt.Fprintf(out, "  not deleted %s: %s\n", k, res.Failed[k])
		}
		if len(res.Skipped) > 0 {
			fmt.Fprintf(out, "  %d orphans skipped: their stream persisted since the scan; run gc again\n", len(res.Skipped))
		}
	case len(p.Orphans) > 0 && !del:
		fmt.Fprintf(out, "\ndry run: nothing deleted; run with --delete to delete these %d objects\n", len(p.Orphans))
	}
}
