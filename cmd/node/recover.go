package main

import (
	"flag"
	"fmt"
	"io"
	"path"
	"time"

	"github.com/streamtier/streamtier/backends"
	"github.com/streamtier/streamtier/manifest/resolve"
	"github.com/streamtier/streamtier/nodeconfig"
	"github.com/streamtier/streamtier/recovery"
)

// recoverRow is one stream of `node recover --json`.
type recoverRow struct {
	Stream    string `json:"stream"`
	Outcome   string `json:"outcome"`
	Root      string `json:"root,omitempty"`
	Seq       uint64 `json:"seq,omitempty"`
	Epoch     uint64 `json:"epoch,omitempty"`
	First     uint64 `json:"first_offset"`
	Next      uint64 `json:"next_offset"`
	Size      uint64 `json:"total_size"`
	Etcd      string `json:"etcd"`
	Action    string `json:"action"`
	Reason    string `json:"reason,omitempty"`
	Written   bool   `json:"written"`
	Error     string `json:"error,omitempty"`
	Requests  int    `json:"s3_requests"`
	NewestAge string `json:"newest_root_age,omitempty"`
}

// recoverOutput is `node recover --json`.
type recoverOutput struct {
	Claim   recovery.ClaimPlan `json:"claim"`
	Refused string             `json:"claim_refused,omitempty"`
	Yes     bool               `json:"yes"`
	Streams []recoverRow       `json:"streams"`
}

// recoverCmd rebuilds etcd's records from the bucket (remote-format.md, "Recovering the
// metadata from the bucket"): a dry run by default, the records and the claim with --yes.
func recoverCmd(args []string, stdout, stderr io.Writer) int {
	var yes, verify, takeover, afterRestore, create, asJSON bool
	s, pos, code, ok := parseFlags("recover", nodeconfig.ModeRun, args, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&yes, "yes", false, "write the records and the claim (default: a dry run that only reports)")
		fs.BoolVar(&verify, "verify", false, "also check that every live fragment of the chosen roots is stored")
		fs.BoolVar(&takeover, "takeover", false, "take the key prefix over: the claim's generation + 1, every node of the old one stops (also lifts the 10-minute refusal)")
		fs.BoolVar(&afterRestore, "after-restore", false, "etcd was restored from a snapshot: bump the claim's generation before the nodes reconnect")
		fs.BoolVar(&create, "claim", false, "write a claim for a key prefix that has none (a version 1 or 2 bucket whose metadata was lost)")
		fs.BoolVar(&asJSON, "json", false, "print JSON")
	})
	if !ok {
		return code
	}
	for _, id := range pos {
		if !streamArg(stderr, "recover", id) {
			return exitBadInput
		}
	}
	ctx, cancel := commandContext()
	defer cancel()
	b, err := backends.ForCommand(ctx, s)
	if err != nil {
		return fail(stderr, "recover", err)
	}
	defer b.Close()
	opts := recovery.Options{Store: b.Store, Meta: b.Meta, KeyPrefix: b.KeyPrefix, Verify: verify}
	reps, errs, err := recovery.All(ctx, opts, pos)
	if err != nil {
		return fail(stderr, "recover", err)
	}
	var newest time.Time
	for _, r := range reps {
		if r.Newest.After(newest) {
			newest = r.Newest
		}
	}
	cp, claimErr := recovery.Claim(ctx, recovery.ClaimOptions{Store: b.Store, Meta: b.Meta, KeyPrefix: b.KeyPrefix,
		Takeover: takeover, AfterRestore: afterRestore, Create: create, Write: yes, NewestRoot: newest})
	if yes && claimErr == nil {
		var applied map[string]error
		reps, applied = recovery.ApplyAll(ctx, b.Meta, reps, errs, 0)
		for id, e := range applied {
			errs[id] = e
		}
	}
	out := recoverOutput{Claim: cp, Yes: yes, Streams: []recoverRow{}}
	if claimErr != nil {
		out.Refused = claimErr.Error()
	}
	failed := claimErr != nil
	for _, r := range reps {
		row := rowOf(r)
		if e := errs[r.Stream]; e != nil {
			row.Error, failed = e.Error(), true
		}
		if r.Plan.Action == resolve.RecoverRefuse {
			failed = true
		}
		out.Streams = append(out.Streams, row)
	}
	if asJSON {
		writeJSON(stdout, out)
	} else {
		printRecover(stdout, b, out)
	}
	if behind := recordsBehind(reps); behind > 0 && !afterRestore {
		fmt.Fprintf(stderr, "node recover: the etcd records of %d streams are behind the bucket's roots (etcd went back in time): if it was restored from a snapshot, "+
			"stop every node of the cluster and run with --after-restore, so that writers of before the restore cannot persist over the rolled-back records (docs/operations.md, \"etcd restored from a snapshot\")\n", behind)
	}
	if claimErr != nil {
		fmt.Fprintf(stderr, "node recover: %v\n", claimErr)
	}
	for _, row := range out.Streams {
		switch {
		case row.Error != "":
			fmt.Fprintf(stderr, "node recover: stream %s: %s\n", row.Stream, row.Error)
		case row.Action == resolve.RecoverRefuse.String():
			fmt.Fprintf(stderr, "node recover: stream %s refused: %s\n", row.Stream, row.Reason)
		}
	}
	if failed {
		return exitFailed
	}
	return exitOK
}

// recordsBehind counts the streams whose etcd record names an older root than the one
// recovery chose: the mark of an etcd restored from a snapshot.
func recordsBehind(reps []recovery.Report) int {
	n := 0
	for _, r := range reps {
		if rec := r.Etcd.Record; rec != nil && rec.Seq != 0 && r.Root.Seq > rec.Seq {
			n++
		}
	}
	return n
}

func rowOf(r recovery.Report) recoverRow {
	row := recoverRow{Stream: r.Stream, Action: r.Plan.Action.String(), Reason: r.Plan.Reason, Written: r.Written, Requests: r.Requests}
	if r.Outcome != 0 {
		row.Outcome = r.Outcome.String()
	}
	if r.Plan.Action == 0 {
		row.Action = "-"
	}
	if r.Root.Key != "" {
		row.Root, row.Seq, row.Epoch = r.Root.Key, r.Root.Seq, r.Root.Epoch
		row.First, row.Next, row.Size = r.First, r.Next, r.Size
	}
	switch e := r.Etcd; {
	case e.Tombstone:
		row.Etcd = "tombstone"
	case e.Record != nil:
		row.Etcd = fmt.Sprintf("seq %d epoch %d uid %016x", e.Record.Seq, e.Record.Epoch, e.Record.UID)
		if e.Record.Seq == 0 {
			row.Etcd = fmt.Sprintf("version 1 record, epoch %d uid %016x", e.Record.Epoch, e.Record.UID)
		}
	case e.Anchor:
		row.Etcd = "anchor, no record"
	default:
		row.Etcd = "nothing"
	}
	return row
}

func printRecover(out io.Writer, b *backends.Backends, o recoverOutput) {
	mode := "dry run (nothing written; --yes writes)"
	if o.Yes {
		mode = "--yes"
	}
	fmt.Fprintf(out, "recover %s/ from bucket %s (%s): %s\n\n", b.KeyPrefix, b.Store.Bucket(), b.Describe(), mode)
	t := newTable(out)
	t.row("STREAM", "ROOT", "RANGE", "SIZE", "ETCD NOW", "ACTION", "WRITTEN")
	for _, r := range o.Streams {
		root, rng, size := "-", "-", "-"
		if r.Root != "" {
			root = path.Base(r.Root)
			rng, size = fmt.Sprintf("[%d, %d)", r.First, r.Next), human(r.Size)
		} else if r.Outcome != "" {
			root = "(" + r.Outcome + ")"
		}
		written := "no"
		if r.Written {
			written = "yes"
		}
		t.row(r.Stream, root, rng, size, r.Etcd, r.Action, written)
	}
	t.flush()
	if len(o.Streams) == 0 {
		fmt.Fprintln(out, "(the bucket holds no stream under this key prefix)")
	}
	for _, r := range o.Streams {
		if r.Reason != "" && r.Action != resolve.RecoverWrite.String() {
			fmt.Fprintf(out, "  %s: %s\n", r.Stream, r.Reason)
		}
	}
	c := o.Claim
	switch {
	case o.Refused != "":
		fmt.Fprintf(out, "\nclaim: REFUSED: %s\n", c.Reason)
	case c.Target != nil && c.Action == "none":
		fmt.Fprintf(out, "\nclaim: cluster %s generation %d (the bucket and etcd agree)\n", c.Target.ClusterID, c.Target.Generation)
	case c.Target != nil:
		verb := "would"
		if c.Written {
			verb = "did"
		}
		fmt.Fprintf(out, "\nclaim: %s %s: cluster %s generation %d (%s)\n", verb, c.Action, c.Target.ClusterID, c.Target.Generation, c.Reason)
	}
}
