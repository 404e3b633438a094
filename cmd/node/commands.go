package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/admin"
	"github.com/streamtier/streamtier/backends"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/nodeconfig"
)

// commandTimeout bounds a whole operator command.
const commandTimeout = 30 * time.Minute

// commandContext is canceled by Ctrl-C, SIGTERM or the command timeout.
func commandContext() (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	return ctx, func() { cancel(); stop() }
}

// errNoNode says that no node answers for the data dir s names, and how to start or find one.
func errNoNode(s nodeconfig.Settings) error {
	return fmt.Errorf("no node is running on data dir %s (nothing answers at the admin address in %s); start one with `node` or `node run`, or pass --data-dir or --admin-addr",
		s.DataDir, backends.RunFile(s.DataDir))
}

// runningNode finds the node running on the settings' data directory (its run file) or
// listening on a fixed admin_addr, and returns a client of its admin server.
func runningNode(ctx context.Context, s nodeconfig.Settings) (admin.Client, bool) {
	var candidates []string
	if info, found, err := backends.ReadRunInfo(s.DataDir); err == nil && found {
		candidates = append(candidates, info.AdminURL)
	}
	if _, port, err := net.SplitHostPort(s.AdminAddr); err == nil && port != "0" {
		candidates = append(candidates, "http://"+s.AdminAddr)
	}
	for _, u := range candidates {
		c := admin.Client{Base: u}
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := c.Healthy(hctx)
		cancel()
		if err == nil {
			return c, true
		}
	}
	return admin.Client{}, false
}

func fail(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "node %s: %v\n", cmd, err)
	return exitFailed
}

// badUsage reports a usage error: the problem, the command's synopsis and where to look
// further (not the whole usage text, nor the flag package's hundred-line dump).
func badUsage(stderr io.Writer, cmd, msg string) int {
	who := "node " + cmd
	if cmd == demoName {
		who = "node"
	}
	fmt.Fprintf(stderr, "%s: %s\nusage: %s\nsee `node help` for the commands, `node settings` for every setting and its flag\n", who, msg, usageLine(cmd))
	return exitBadInput
}

// streamArg checks a stream id given on the command line before any I/O.
func streamArg(stderr io.Writer, cmd, id string) bool {
	if err := manifest.ValidateStreamID(id); err != nil {
		fmt.Fprintf(stderr, "node %s: %v\n", cmd, err)
		return false
	}
	return true
}

// statusCmd prints a running node's status, or the persisted state of the streams when
// no node runs.
func statusCmd(args []string, stdout, stderr io.Writer) int {
	var asJSON, fromBucket bool
	s, pos, code, ok := parseFlags("status", nodeconfig.ModeRun, args, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print JSON")
		fs.BoolVar(&fromBucket, "from-bucket", false, "what the bucket alone says of the streams (the roots `node recover` would choose), no etcd")
	})
	if !ok {
		return code
	}
	stream, code, ok := optionalStream(stderr, "status", pos)
	if !ok {
		return code
	}
	ctx, cancel := commandContext()
	defer cancel()
	if fromBucket {
		return bucketStatus(ctx, s, stream, asJSON, stdout, stderr)
	}
	if c, ok := runningNode(ctx, s); ok {
		rep, err := c.Status(ctx)
		if err != nil {
			return fail(stderr, "status", err)
		}
		if stream != "" {
			var keep []admin.StreamReport
			for _, st := range rep.Streams {
				if st.Stream == stream {
					keep = append(keep, st)
				}
			}
			if len(keep) == 0 {
				return fail(stderr, "status", fmt.Errorf("stream %q: unknown stream (the node at %s runs %s)", stream, c.Base, streamList(rep.Streams)))
			}
			rep.Streams = keep
		}
		if asJSON {
			writeJSON(stdout, struct {
				Running bool `json:"running"`
				admin.Report
			}{true, rep})
			return exitOK
		}
		printStatus(stdout, c.Base, rep)
		return exitOK
	}
	return offlineStatus(ctx, s, stream, asJSON, stdout, stderr)
}

func streamList(ss []admin.StreamReport) string {
	if len(ss) == 0 {
		return "no stream"
	}
	var ids []string
	for _, s := range ss {
		ids = append(ids, s.Stream)
	}
	return strings.Join(ids, ", ")
}

func printStatus(out io.Writer, base string, rep admin.Report) {
	n := rep.Node
	gov := "unlimited"
	if n.Governor.RateBytesPerSec > 0 {
		gov = human(n.Governor.RateBytesPerSec) + "/s"
	}
	s3req, s3err := sumReq(n.S3)
	etcdReq, etcdErr := sumReq(n.Etcd)
	fmt.Fprintf(out, "node %s at %s, up %s\n", n.ID, base, dur(time.Duration(n.UptimeSeconds*float64(time.Second))))
	share := "shared fairly"
	if n.Governor.PerStream > 0 {
		share = fmt.Sprintf("at most %d per stream", n.Governor.PerStream)
	}
	fmt.Fprintf(out, "  governor %s, %d queued (%s), %d transfers running (bound %d, %s) · reaper %d queued, %d deleted, %d failed\n",
		gov, n.Governor.Queued, human(n.Governor.QueuedBytes), n.Governor.Running, n.Governor.MaxConcurrent, share,
		n.Reaper.Queued, n.Reaper.Deleted, n.Reaper.Failed)
	if g := n.Governor; g.AbandonedRunning > 0 {
		fmt.Fprintf(out, "  %d uploads HUNG: abandoned after their transfer deadline (%d abandoned in all), their tasks have not ended\n",
			g.AbandonedRunning, g.Abandoned)
	}
	for _, f := range n.Faults {
		fmt.Fprintf(out, "  FAULT: %s failed (%s): %s\n", f.Server, orOther(f.Exhausted), f.Error)
	}
	if n.StreamsStalled > 0 {
		fmt.Fprintf(out, "  %d streams running, %d STALLED by local resources (%s)\n", n.StreamsRunning, n.StreamsStalled, causes(n.StalledBy))
	}
	if n.StreamsDormant > 0 {
		fmt.Fprintf(out, "  %d of %d running streams dormant (no actor until data, an await or a command wakes them)\n", n.StreamsDormant, n.StreamsRunning)
	}
	fmt.Fprintf(out, "  uploaded %s in %d fragments · %d persists (p50 %s, p99 %s) · S3 %d requests, %d errors · etcd %d requests, %d errors\n",
		human(n.Uploads.Bytes), n.Uploads.Fragments, n.Persists.OK, dur(secs(n.Persists.LatencyP50Secs)), dur(secs(n.Persists.LatencyP99Secs)),
		s3req, s3err, etcdReq, etcdErr)
	fmt.Fprintf(out, "  pipeline bytes: assembly %s, transfer %s, persist %s\n",
		human(n.Stages.AssemblyBytes), human(n.Stages.TransferBytes), human(n.Stages.PersistBytes))
	if b := n.Bucket; b != nil {
		switch {
		case b.Outcome == "":
			fmt.Fprintf(out, "  bucket %s: not probed yet\n", b.Bucket)
		case b.Reachable:
			fmt.Fprintf(out, "  bucket %s: reachable (probed %s ago, every %s)\n", b.Bucket, ago(msAge(b.CheckedAtMillis)), dur(secs(b.IntervalSeconds)))
		default:
			fmt.Fprintf(out, "  bucket %s: %s for %s: %s\n", b.Bucket, strings.ToUpper(strings.ReplaceAll(b.Outcome, "_", " ")), ago(msAge(b.SinceMillis)), b.Error)
		}
	}
	if c := n.Cost; c != nil {
		fmt.Fprintf(out, "  S3 cost at this rate: %s a month (requests %s, storage %s for %s)\n",
			usd(c.TotalPerMonthUSD), usd(c.RequestsPerMonthUSD), usd(c.StoragePerMonthUSD), human(c.StoredBytes))
	}
	if g := n.GC; g != nil {
		line := fmt.Sprintf("  gc %s every %s (grace %s): %d sweeps here, %d rounds swept by another node, %d deleted", g.Mode,
			dur(secs(g.IntervalSeconds)), dur(secs(g.GraceSeconds)), g.Sweeps, g.SkippedLocked, g.ObjectsDeleted)
		if l := g.Last; l != nil {
			line += fmt.Sprintf("; last sweep %s ago: %d orphans (%s), %d young, %d pending, %d deleted", ago(msAge(l.StartedMs)), l.Orphans, human(l.OrphanBytes), l.Young, l.Pending, l.Deleted)
			if l.Error != "" {
				line += "; FAILED: " + l.Error
			}
		}
		fmt.Fprintln(out, line)
	}
	fmt.Fprintln(out)
	t := newTable(out)
	t.row("STREAM", "PHASE", "COMMITTED", "UPLOADED", "PERSISTED", "LAG", "LAG AGE", "REMOTE", "FRAGMENTS", "IN FLIGHT", "ASSEMBLING", "PERSIST", "LAST PERSIST", "LOCAL")
	for _, s := range rep.Streams {
		persist := s.Pipeline.PersistState
		if s.Pipeline.Stalled {
			persist += fmt.Sprintf(" STALLED@%d", s.Pipeline.StalledOffset)
		}
		if s.Pipeline.Paused {
			persist += " PAUSED"
		}
		lastAge := "-"
		if s.Pipeline.LastPersistAgeSeconds >= 0 {
			lastAge = ago(s.Pipeline.LastPersistAgeSeconds) + " ago"
		}
		phase := s.Phase
		if s.Dormant {
			phase += " (dormant)"
		}
		t.row(s.Stream, phase, fmt.Sprint(s.Local.Committed), fmt.Sprint(s.Remote.Next), fmt.Sprint(s.Remote.PersistedNext),
			human(s.Lag.Bytes), ago(s.Lag.Seconds), human(s.Remote.TotalSize), fmt.Sprint(s.Remote.Fragments),
			fmt.Sprintf("%d (%s)", s.Pipeline.InFlight+s.Pipeline.WaitingRetry+s.Pipeline.Buffered, human(s.Pipeline.InFlightBytes)),
			human(s.Fragment.Bytes), persist, lastAge, fmt.Sprintf("%d seg, %s", s.Local.Segments, human(s.Local.Bytes)))
	}
	t.flush()
	if c := rep.Cluster; c != nil {
		printCluster(out, *c)
	}
	for _, s := range rep.Streams {
		if s.Pipeline.LastPersistError != "" {
			fmt.Fprintf(out, "\n%s: last persist error: %s\n", s.Stream, s.Pipeline.LastPersistError)
		}
		if s.Pipeline.Paused {
			fmt.Fprintf(out, "\n%s: paused: %d bytes awaiting upload (max_unpersisted_bytes %d); the local log grows on, the drain resumes after a persist\n",
				s.Stream, s.Pipeline.HeldBytes, s.Pipeline.HeldBound)
		}
		if s.Pipeline.DrainStall != "" {
			fmt.Fprintf(out, "\n%s: drain stalled at %d: %s (retried)\n", s.Stream, s.Pipeline.DrainStalledOffset, s.Pipeline.DrainStall)
		}
		if s.Waiting != "" && s.Pipeline.LastPersistError == "" && !s.Pipeline.Paused && s.Pipeline.DrainStall == "" {
			fmt.Fprintf(out, "\n%s: waiting: %s\n", s.Stream, s.Waiting) // (the others are printed above)
		}
		if s.Error != "" {
			fmt.Fprintf(out, "\n%s: %s\n", s.Stream, s.Error)
		}
		if s.LocalError != "" {
			fmt.Fprintf(out, "\n%s: STALLED (%s): cannot read the local log: %s (retried every second)\n", s.Stream, orOther(s.Exhausted), s.LocalError)
		}
		if s.LogWriteError != "" {
			fmt.Fprintf(out, "\n%s: the local log refuses appends (%s): %s\n", s.Stream, orOther(s.Exhausted), s.LogWriteError)
		}
		if f := s.Follow; f != nil {
			line := fmt.Sprintf("\n%s: followed: the local log is read-only, another process writes it; complete chunks count as committed", s.Stream)
			if f.PendingBytes > 0 {
				line += fmt.Sprintf("; %s past the last complete chunk (not tiered until complete)", human(f.PendingBytes))
			}
			if f.Error != "" {
				line += "; last look FAILED: " + f.Error
			}
			fmt.Fprintln(out, line)
		}
		if s.StopReason != "" {
			fmt.Fprintf(out, "\n%s: stopped for good: %s\n", s.Stream, s.StopReason)
		}
		if c := s.Cost; c != nil {
			fmt.Fprintf(out, "\n%s: S3 requests put %d, get %d, head %d, list %d, delete %d; at this rate %s a month (requests %s, storage %s)\n",
				s.Stream, c.Requests["put"], c.Requests["get"], c.Requests["head"], c.Requests["list"], c.Requests["delete"],
				usd(c.TotalPerMonthUSD), usd(c.RequestsPerMonthUSD), usd(c.StoragePerMonthUSD))
		}
		if p := s.Parked; p != nil {
			fmt.Fprintf(out, "\n%s: PARKED for %s: its reader keeps failing (%d failures in a minute; last: %s); retried automatically in %s\n",
				s.Stream, ago(msAge(p.SinceMillis)), p.Failures, p.Reason, dur(time.Until(time.UnixMilli(p.RetryAtMillis)).Round(time.Second)))
		}
		if d := s.Remote.Diverged; d != nil && d.Behind {
			fmt.Fprintf(out, "\n%s: BEHIND: the local log [%d, %d) is a prefix of the remote tier [%d, %d); nothing is uploaded or deleted until it reaches %d (a match) or writes chunks of its own (a fork: the remote tier is then cut back to where they part).\n",
				s.Stream, d.LocalFirst, d.LocalNext, d.RemoteFirst, d.RemoteNext, d.RemoteNext)
		} else if d != nil {
			fmt.Fprintf(out, "\n%s: DIVERGED: the local log [%d, %d) shares no chunk with the remote tier [%d, %d); nothing is uploaded or deleted.\n"+
				"  Restore the local log from S3, or run `node truncate %s --yes` to cut the remote tier back below the local log and tier from there.\n",
				s.Stream, d.LocalFirst, d.LocalNext, d.RemoteFirst, d.RemoteNext, s.Stream)
		}
		if s.Remote.GapEntries > 0 {
			fmt.Fprintf(out, "\n%s: %d declared gaps (%d offsets lost from the local log before upload)\n", s.Stream, s.Remote.GapEntries, s.Remote.GapOffsets)
		}
	}
}

func secs(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

// usd renders dollars: cents, or four decimals below a cent.
func usd(v float64) string {
	if v != 0 && v < 0.01 {
		return fmt.Sprintf("$%.4f", v)
	}
	return fmt.Sprintf("$%.2f", v)
}

// msAge is the age in seconds of a Unix time in milliseconds.
func msAge(ms int64) float64 { return max(time.Since(time.UnixMilli(ms)).Seconds(), 0) }

func sumReq(r admin.RequestReport) (req, errs uint64) {
	for _, v := range r.Requests {
		req += v
	}
	for _, v := range r.ErrorsByClass {
		errs += v
	}
	return req, errs
}

// offlineStream is a stream's persisted state as `node status` shows it without a node.
type offlineStream struct {
	Stream         string `json:"stream"`
	Anchored       bool   `json:"anchored"`
	Persisted      bool   `json:"persisted"`
	Epoch          uint64 `json:"epoch"`
	Revision       int64  `json:"revision"`
	FirstOffset    uint64 `json:"first_offset"`
	NextOffset     uint64 `json:"next_offset"`
	TotalSize      uint64 `json:"total_size"`
	FirstTimestamp int64  `json:"first_timestamp"`
	RootKey        string `json:"root_key,omitempty"`
}

func offlineStatus(ctx context.Context, s nodeconfig.Settings, stream string, asJSON bool, stdout, stderr io.Writer) int {
	b, err := backends.ForCommand(ctx, s)
	if err != nil {
		return fail(stderr, "status", err)
	}
	defer b.Close()
	ids, err := etcdStreams(ctx, b)
	if err != nil {
		return fail(stderr, "status", err)
	}
	if stream != "" {
		if !ids[stream] {
			if ts, found, err := b.Meta.ReadTombstone(ctx, stream); err == nil && found {
				return fail(stderr, "status", &metadata.DeletedError{Tombstone: ts})
			}
			return fail(stderr, "status", fmt.Errorf("stream %q: unknown stream (no records under %s in etcd)", stream, b.Meta.Prefix()))
		}
		ids = map[string]bool{stream: true}
	}
	var out []offlineStream
	for _, id := range sortedIDs(ids) {
		o := offlineStream{Stream: id}
		rec, rev, found, err := b.Meta.ReadManifest(ctx, id)
		if err != nil {
			return fail(stderr, "status", err)
		}
		if o.Anchored, err = b.Meta.HasAnchor(ctx, id, false); err != nil {
			return fail(stderr, "status", err)
		}
		if found {
			o.Persisted, o.Epoch, o.Revision = true, rec.Epoch, rev
			o.FirstOffset, o.NextOffset, o.TotalSize, o.FirstTimestamp = rec.FirstOffset, rec.NextOffset, rec.TotalSize, rec.FirstTimestamp
			o.RootKey = rec.RootKey(b.KeyPrefix, id)
		}
		out = append(out, o)
	}
	if asJSON {
		if out == nil {
			out = []offlineStream{}
		}
		writeJSON(stdout, struct {
			Running bool            `json:"running"`
			Streams []offlineStream `json:"streams"`
		}{false, out})
		return exitOK
	}
	fmt.Fprintf(stdout, "no node is running on %s: the persisted state in %s\n\n", s.DataDir, b.Describe())
	t := newTable(stdout)
	t.row("STREAM", "EPOCH", "REVISION", "FIRST", "NEXT", "REMOTE", "ROOT")
	for _, o := range out {
		if !o.Persisted {
			t.row(o.Stream, "-", "-", "-", "-", "-", "(anchored, never persisted)")
			continue
		}
		t.row(o.Stream, fmt.Sprint(o.Epoch), fmt.Sprint(o.Revision), fmt.Sprint(o.FirstOffset), fmt.Sprint(o.NextOffset), human(o.TotalSize), o.RootKey)
	}
	t.flush()
	if len(out) == 0 {
		fmt.Fprintln(stdout, "(no streams)")
	}
	return exitOK
}

// etcdStreams lists the ids of the streams that have records in etcd.
func etcdStreams(ctx context.Context, b *backends.Backends) (map[string]bool, error) {
	prefix := b.Meta.Prefix() + "/streams/"
	resp, err := b.EtcdClient.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("list streams in etcd: %w", err)
	}
	ids := map[string]bool{}
	for _, kv := range resp.Kvs {
		id, _, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), prefix), "/")
		if ok && manifest.ValidateStreamID(id) == nil {
			ids[id] = true
		}
	}
	return ids, nil
}

func sortedIDs(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// optionalStream takes a command's one optional stream argument, checked before any I/O;
// ok is false (with the exit code) for more than one or an invalid id.
func optionalStream(stderr io.Writer, name string, pos []string) (string, int, bool) {
	switch {
	case len(pos) > 1:
		return "", badUsage(stderr, name, "at most one stream"), false
	case len(pos) == 1 && !streamArg(stderr, name, pos[0]):
		return "", exitBadInput, false
	case len(pos) == 1:
		return pos[0], 0, true
	}
	return "", 0, true
}

// nodeAction runs an action on a running node's stream (cut, retention).
func nodeAction(name string, args []string, stdout, stderr io.Writer, extra func(*flag.FlagSet), act func(context.Context, admin.Client, string) (admin.ActionResult, error)) int {
	s, pos, code, ok := parseFlags(name, nodeconfig.ModeRun, args, stderr, extra)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return badUsage(stderr, name, "give exactly one stream")
	}
	if !streamArg(stderr, name, pos[0]) {
		return exitBadInput
	}
	ctx, cancel := commandContext()
	defer cancel()
	c, ok := runningNode(ctx, s)
	if !ok {
		return fail(stderr, name, errNoNode(s))
	}
	res, err := act(ctx, c, pos[0])
	if err != nil {
		return fail(stderr, name, err)
	}
	fmt.Fprintf(stdout, "%s: %s done\n", res.Stream, res.Action)
	return exitOK
}

func cutCmd(args []string, stdout, stderr io.Writer) int {
	return nodeAction("cut", args, stdout, stderr, nil, func(ctx context.Context, c admin.Client, id string) (admin.ActionResult, error) {
		return c.Cut(ctx, id)
	})
}

// truncateCmd runs the operator's truncate of a diverged stream's remote tier. It deletes
// durable data, so it needs --yes.
func truncateCmd(args []string, stdout, stderr io.Writer) int {
	var yes bool
	extra := func(fs *flag.FlagSet) {
		fs.BoolVar(&yes, "yes", false, "confirm: delete the remote tier above the cut (only for a stream whose status is 'diverged')")
	}
	return nodeAction("truncate", args, stdout, stderr, extra, func(ctx context.Context, c admin.Client, id string) (admin.ActionResult, error) {
		if !yes {
			return admin.ActionResult{}, fmt.Errorf("truncate deletes remote data of %s that the local log does not hold: check `node status %s`, then run again with --yes", id, id)
		}
		return c.Truncate(ctx, id)
	})
}

func retentionCmd(args []string, stdout, stderr io.Writer) int {
	var maxBytes, maxAge string
	extra := func(fs *flag.FlagSet) {
		fs.StringVar(&maxBytes, "max-bytes", "", "set the stream's remote max_bytes first (e.g. 10GiB; 0 for no limit)")
		fs.StringVar(&maxAge, "max-age", "", "set the stream's remote max_age first (e.g. 168h; 0 for no limit)")
	}
	return nodeAction("retention", args, stdout, stderr, extra, func(ctx context.Context, c admin.Client, id string) (admin.ActionResult, error) {
		if maxBytes == "" && maxAge == "" {
			return c.Retention(ctx, id, nil)
		}
		var p manifest.Policy
		if maxBytes != "" {
			n, err := nodeconfig.ParseSize(maxBytes)
			if err != nil {
				return admin.ActionResult{}, fmt.Errorf("--max-bytes: %w", err)
			}
			p.MaxBytes = n
		}
		if maxAge != "" {
			d, err := nodeconfig.ParseDuration(maxAge)
			if err != nil || d < 0 {
				return admin.ActionResult{}, fmt.Errorf("--max-age: %q: want a duration such as 168h", maxAge)
			}
			p.MaxAgeMillis = d.Milliseconds()
		}
		return c.Retention(ctx, id, &p)
	})
}

func sortedStrings(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// printCluster prints the cluster part of a member's status: members, placements and the
// replica manifests held.
func printCluster(out io.Writer, c admin.ClusterReport) {
	var members []string
	for _, id := range sortedStrings(c.Members) {
		members = append(members, id+"@"+c.Members[id])
	}
	tr := c.Transport
	fmt.Fprintf(out, "\ncluster member %s at %s · members %s\n", c.Node, c.Address, strings.Join(members, ", "))
	fmt.Fprintf(out, "  transport: %d sent, %d received, %d dropped (queue full %d, no route %d), %d rejected, %d bad messages\n",
		tr.Sent, tr.Received, tr.QueueFull+tr.NoRoute+tr.FaultDropped+tr.PausedDropped, tr.QueueFull, tr.NoRoute, tr.Rejected, tr.BadMessages)
	if len(c.Placements) > 0 {
		fmt.Fprintln(out)
		t := newTable(out)
		t.row("STREAM", "WRITER", "EPOCH", "REPLICAS", "HERE")
		for _, p := range c.Placements {
			here := "-"
			if e, ok := c.Writers[p.Stream]; ok {
				here = fmt.Sprintf("writer (epoch %d)", e)
			} else if r, ok := c.Replicas[p.Stream]; ok {
				here = fmt.Sprintf("replica: root seq %d uid %s epoch %d, offsets [%d, %d)", r.Seq, r.UID, r.Epoch, r.FirstOffset, r.NextOffset)
				if !r.Synced {
					here = "replica: not synced yet"
				}
			}
			if e, ok := c.Fenced[p.Stream]; ok {
				here += fmt.Sprintf(" (fenced by epoch %d)", e)
			}
			t.row(p.Stream, p.Writer, fmt.Sprint(p.Epoch), orDash(strings.Join(p.Replicas, ",")), here)
		}
		t.flush()
	}
}

// causes lists counts by cause, "EMFILE 3, ENOSPC 1", in a stable order.
func causes(by map[string]int64) string {
	var out []string
	for _, c := range actors.LocalErrorCauses() {
		if by[c] > 0 {
			out = append(out, fmt.Sprintf("%s %d", c, by[c]))
		}
	}
	return strings.Join(out, ", ")
}

// orOther is the cause of a local failure, "other" when it is not a named resource.
func orOther(cause string) string {
	if cause == "" {
		return "other"
	}
	return cause
}
