package readercore

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/streamtier/streamtier/actors/divergence"
	"github.com/streamtier/streamtier/chunk"
	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/manifest"
)

// TestScenarios runs every file under testdata/: one interleaving per file, events in,
// effects out. The command language is described in docs/replica-reader-core.md.
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if strings.Contains(path, "rapid") {
			return // failure files of the property tests, not scenarios
		}
		h := &harness{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return h.run(t, d)
		})
	})
}

// harness drives one core through a scenario and remembers what the scripts refer to by
// name: the n-th cut fragment, the last persist, timer, group upload and retention fetch.
type harness struct {
	c         *Core
	cfg       Config
	frags     []Ref // transfer refs in cut order: frag=N is frags[N-1]
	descs     map[Ref]*fragment.Description
	attempts  map[Ref]int // latest attempt seen per ref
	persist   Ref
	expected  int64
	timer     Ref
	cutTimer  Ref
	group     Ref
	fetch     Ref
	lookup    Ref
	nextID    uint64 // where the next drained chunk starts
	seg       string
	pos       int64
	uidSeq    uint64
	groupUIDs uint64
	// where each drained chunk sat, so that a drain reopened mid-segment (a reposition, a
	// resume) reads on from there
	placed map[uint64]placement
	// the clock results carry (TransferResult.At), and the armed retry timers
	now        time.Duration
	retry      Ref
	retryDue   time.Duration
	drainRetry Ref
	maxChunk   uint64 // the largest chunk drained, for the bound check
}

type placement struct {
	seg string
	pos int64
}

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	if d.Cmd != "init" && h.c == nil {
		h.init(t, &datadriven.TestData{})
	}
	var evs []Event
	switch d.Cmd {
	case "init":
		if err := h.init(t, d); err != nil {
			return "error: " + err.Error() + "\n"
		}
		return "ok\n"
	case "start":
		evs = append(evs, Resolved{Manifest: manifest.Empty()}, LogOpened{First: argU(t, d, "log-first", 0), Next: argU(t, d, "log-next", 0)})
	case "resolved":
		evs = append(evs, h.resolved(t, d))
	case "resolve-compare":
		evs = append(evs, h.resolveCompare(t, d)...)
	case "operator-truncate":
		evs = append(evs, OperatorTruncate{})
	case "log":
		evs = append(evs, LogOpened{First: argU(t, d, "first", 0), Next: argU(t, d, "next", 0), Epoch: argU(t, d, "epoch", 0)})
	case "chunk", "chunks":
		n := int(argU(t, d, "n", 1))
		for i := 0; i < n; i++ {
			evs = append(evs, h.chunk(t, d))
		}
	case "roll":
		h.seg, h.pos = fmt.Sprintf("s%d", h.nextID), 8
		return "ok\n"
	case "drain-gone":
		evs = append(evs, DrainSegmentGone{LocalFirst: argU(t, d, "local-first", 0)})
	case "describe":
		ref := h.fragRef(t, d)
		desc, ok := h.descs[ref]
		if !ok {
			t.Fatalf("%s: no fragment submitted under ref %d", d.Pos, ref)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%s object=%d\n", formatFragment(desc), desc.ObjectSize())
		for _, c := range desc.Chunks {
			fmt.Fprintf(&b, "  chunk %d records=%d ts=%d at %s:%d size=%d -> object position %d\n",
				c.Header.ChunkID, c.Header.Records, c.Header.Timestamp, c.Location.Segment, c.Location.Position, c.Location.Size, c.Position)
		}
		return b.String()
	case "eos":
		evs = append(evs, EndOfStream{Next: argU(t, d, "next", h.nextID), Refused: argS(d, "refused", strings.TrimSpace(d.Input))})
	case "batch":
		evs = append(evs, BatchDrained{Next: argU(t, d, "next", h.nextID), Refused: argS(d, "refused", strings.TrimSpace(d.Input))})
	case "advance":
		h.now += argD(t, d, "by")
		return fmt.Sprintf("now %s\n", h.now)
	case "force-cut":
		evs = append(evs, ForceCut{})
	case "result":
		ref := h.fragRef(t, d)
		e := TransferResult{Ref: ref, Attempt: int(argU(t, d, "attempt", uint64(h.attempts[ref]))), Reason: argS(d, "reason", strings.TrimSpace(d.Input)), At: h.now}
		switch {
		case d.HasArg("ok"):
			h.uidSeq++
			e.Outcome, e.UID = OK, argU(t, d, "uid", 100+h.uidSeq)
		case d.HasArg("retriable"):
			e.Outcome = Retriable
			e.Jitter = argF(t, d, "jitter")
		case d.HasArg("non-transient"):
			e.Outcome = NonTransient
		case d.HasArg("segment-gone"):
			e.Outcome, e.LocalFirst = SegmentGone, argU(t, d, "local-first", 0)
		default:
			t.Fatalf("%s: result needs ok, retriable, non-transient or segment-gone", d.Pos)
		}
		evs = append(evs, e)
	case "deadline":
		ref := h.fragRef(t, d)
		evs = append(evs, TransferDeadline{Ref: ref, Attempt: int(argU(t, d, "attempt", uint64(h.attempts[ref])))})
	case "retry":
		switch {
		case d.HasArg("group"):
			evs = append(evs, RetryTimer{Ref: h.group, Attempt: int(argU(t, d, "attempt", uint64(h.attempts[h.group]))), At: h.now})
		case d.HasArg("drain"):
			evs = append(evs, RetryTimer{Ref: h.drainRetry, At: h.now})
		default:
			// the stream's retry timer (the last one armed, even if cancelled since) fires
			// when it is due, or at=<duration>; the clock moves there
			at := h.retryDue
			if d.HasArg("at") {
				at = argD(t, d, "at")
			}
			h.now = max(h.now, at)
			evs = append(evs, RetryTimer{Ref: Ref(argU(t, d, "ref", uint64(h.retry))), At: at})
		}
	case "persist-timer":
		evs = append(evs, PersistTimer{Ref: Ref(argU(t, d, "ref", uint64(h.timer)))})
	case "cut-timer":
		// the idle cut timer last armed (even if cancelled since) fires, or ref=<r>
		evs = append(evs, CutTimer{Ref: Ref(argU(t, d, "ref", uint64(h.cutTimer)))})
	case "persist-result":
		e := PersistResult{Ref: Ref(argU(t, d, "ref", uint64(h.persist))), Reason: argS(d, "reason", ""), Now: int64(argU(t, d, "now", 0))}
		switch {
		case d.HasArg("ok"):
			rev := int64(argU(t, d, "rev", uint64(h.expected+1)))
			e.Outcome, e.Revision, e.RootUID = PersistOK, rev, argU(t, d, "root", uint64(900+rev))
		case d.HasArg("conflict"):
			e.Outcome = PersistConflict
		case d.HasArg("not-found"):
			e.Outcome = PersistNotFound
		case d.HasArg("error"):
			e.Outcome = PersistFailed
		case d.HasArg("fenced"):
			e.Outcome, e.StoredEpoch = PersistFenced, argU(t, d, "stored-epoch", 0)
		default:
			t.Fatalf("%s: persist-result needs ok, conflict, not-found, error or fenced", d.Pos)
		}
		evs = append(evs, e)
	case "deleted":
		evs = append(evs, StreamDeleted{Reason: argS(d, "reason", strings.TrimSpace(d.Input))})
	case "group-result":
		ref := Ref(argU(t, d, "ref", uint64(h.group)))
		e := GroupUploadResult{Ref: ref, Attempt: int(argU(t, d, "attempt", uint64(h.attempts[ref]))), Reason: argS(d, "reason", "")}
		switch {
		case d.HasArg("ok"):
			h.groupUIDs++
			e.Outcome, e.UID = OK, argU(t, d, "uid", 500+h.groupUIDs)
		case d.HasArg("retriable"):
			e.Outcome, e.Jitter = Retriable, argF(t, d, "jitter")
		case d.HasArg("non-transient"):
			e.Outcome = NonTransient
		default:
			t.Fatalf("%s: group-result needs ok, retriable or non-transient", d.Pos)
		}
		evs = append(evs, e)
	case "fetched":
		evs = append(evs, RetentionGroupFetched{Ref: Ref(argU(t, d, "ref", uint64(h.fetch))), Children: parseEntries(t, d), Now: int64(argU(t, d, "now", 0))})
	case "leaves":
		// one leaf a line: "gap FROM TO" or "frag FROM TO"
		e := LeavesLookedUp{Ref: Ref(argU(t, d, "ref", uint64(h.lookup))), Reason: argS(d, "failed", "")}
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			if line = strings.TrimSpace(line); line == "" {
				continue
			}
			var kind string
			var l Leaf
			if _, err := fmt.Sscanf(line, "%s %d %d", &kind, &l.From, &l.To); err != nil || (kind != "gap" && kind != "frag") {
				t.Fatalf("%s: leaf %q: want gap|frag FROM TO", d.Pos, line)
			}
			l.Gap = kind == "gap"
			e.Leaves = append(e.Leaves, l)
		}
		evs = append(evs, e)
	case "fetch-failed":
		evs = append(evs, RetentionGroupFailed{Ref: Ref(argU(t, d, "ref", uint64(h.fetch))), Reason: argS(d, "reason", "")})
	case "retention-timeout":
		evs = append(evs, RetentionTimeout{Ref: Ref(argU(t, d, "ref", uint64(h.fetch)))})
	case "await":
		evs = append(evs, AwaitOffset{Offset: argU(t, d, "offset", 0), Waiter: WaiterID(argU(t, d, "waiter", 0)), Flush: d.HasArg("flush")})
	case "cancel-await":
		evs = append(evs, CancelAwait{Waiter: WaiterID(argU(t, d, "waiter", 0))})
	case "policy":
		evs = append(evs, RetentionPolicyChanged{Policy: manifest.Policy{MaxBytes: argU(t, d, "max-bytes", 0), MaxAgeMillis: int64(argU(t, d, "max-age", 0))}, Now: int64(argU(t, d, "now", 0))})
	case "evaluate-retention":
		evs = append(evs, EvaluateRetention{Now: int64(argU(t, d, "now", 0))})
	case "replica":
		evs = append(evs, ReplicaRegistered{Replica: argS(d, "name", "")})
	case "resync":
		evs = append(evs, ResyncRequested{Replica: argS(d, "name", "")})
	case "restart":
		// a crash: the reader's memory is gone; a new core starts with refs above the old
		// one's, so results still addressed to the old core match nothing
		cfg := h.cfg
		cfg.RefBase = uint64(h.c.ref) + 1000
		c, err := New(cfg)
		if err != nil {
			t.Fatalf("%s: restart: %v", d.Pos, err)
		}
		h.c = c
		return fmt.Sprintf("new core, refs from %d\n", cfg.RefBase+1)
	case "status":
		return h.c.Status().String() + "\n"
	case "dormant":
		if why := h.c.Dormant(); why != "" {
			return "awake: " + why + "\n"
		}
		if at, ok := h.c.RetentionDue(); ok {
			return fmt.Sprintf("dormant, woken for retention at %d\n", at)
		}
		return "dormant\n"
	case "manifest":
		p, rev := h.c.Persisted()
		return fmt.Sprintf("mem: %s\npersisted rev=%d: %s\n", FormatManifest(h.c.Manifest()), rev, FormatManifest(p))
	default:
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	}
	var b strings.Builder
	for _, ev := range evs {
		effs, err := h.c.Step(ev)
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
			continue
		}
		for _, e := range effs {
			h.observe(e)
			b.WriteString(e.String())
			b.WriteByte('\n')
		}
		if ch, ok := ev.(ChunkDrained); ok {
			h.maxChunk = max(h.maxChunk, uint64(ch.Location.Size))
		}
		h.checkHeld(t, d)
	}
	if b.Len() == 0 {
		return "(no effects)\n"
	}
	return b.String()
}

// checkHeld checks, after every event of every scenario, that the bytes the core holds are
// what its pipeline stages hold, and never more than the bound plus one chunk.
func (h *harness) checkHeld(t *testing.T, d *datadriven.TestData) {
	st := h.c.Status()
	if sum := st.AssemblyBytes + st.InFlightBytes + st.UnpersistedBytes; st.HeldBytes != sum {
		t.Fatalf("%s: held %d bytes, the assembly, transfers and unpersisted appends hold %d", d.Pos, st.HeldBytes, sum)
	}
	if st.HeldBytes > st.HeldBound+h.maxChunk {
		t.Fatalf("%s: held %d bytes, above the bound %d plus one chunk (%d)", d.Pos, st.HeldBytes, st.HeldBound, h.maxChunk)
	}
}

// observe remembers the references effects hand out and where draining goes on.
func (h *harness) observe(e Effect) {
	switch e := e.(type) {
	case StartDrain:
		h.nextID, h.seg, h.pos = e.From, fmt.Sprintf("s%d", e.From), 8
		if p, ok := h.placed[e.From]; ok && e.Reason != "" {
			h.seg, h.pos = p.seg, p.pos
		}
	case ResumeDrain:
		h.nextID, h.seg, h.pos = e.From, fmt.Sprintf("s%d", e.From), 8
		if p, ok := h.placed[e.From]; ok {
			h.seg, h.pos = p.seg, p.pos
		}
	case ArmRetryTimer:
		h.retry, h.retryDue = e.Ref, h.now+e.After
	case RetryDrainAfter:
		h.drainRetry = e.Ref
	case SubmitTransfer:
		h.frags = append(h.frags, e.Ref)
		h.attempts[e.Ref] = e.Attempt
		h.descs[e.Ref] = e.Fragment
	case ResubmitTransfer:
		h.attempts[e.Ref] = e.Attempt
	case StartPersist:
		h.persist, h.expected = e.Ref, e.ExpectedRevision
	case ArmPersistTimer:
		h.timer = e.Ref
	case ArmCutTimer:
		h.cutTimer = e.Ref
	case UploadGroup:
		h.group = e.Ref
		h.attempts[e.Ref] = e.Attempt
	case FetchGroupForRetention:
		h.fetch = e.Ref
	case LookUpLeaves:
		h.lookup = e.Ref
	}
}

func (h *harness) init(t *testing.T, d *datadriven.TestData) error {
	cfg := Config{
		StreamID:           argS(d, "stream", "s1"),
		Epoch:              argU(t, d, "epoch", 1),
		FragmentTargetSize: argU(t, d, "target", 1000),
		PersistThreshold:   int(argU(t, d, "threshold", 0)),
		PersistInterval:    argD(t, d, "interval"),
		RebalanceThreshold: int(argU(t, d, "rebalance", 4)),
		UploadRetryDelay:   argD(t, d, "retry-delay"),
		TransferDeadline:   argD(t, d, "deadline"),
		Retention:          manifest.Policy{MaxBytes: argU(t, d, "max-bytes", 0), MaxAgeMillis: int64(argU(t, d, "max-age", 0))},
		RefBase:            argU(t, d, "ref-base", 0),
		// bound=<bytes>; the scenarios written before the bound existed never reach 1 GiB
		MaxUnpersistedBytes: argU(t, d, "bound", 1<<30),
		// fragment-max-age=<duration>; the scenarios written before the idle cut existed
		// run without it (a negative age disables it)
		FragmentMaxAge: -1,
	}
	if d.HasArg("fragment-max-age") {
		cfg.FragmentMaxAge = argD(t, d, "fragment-max-age")
	}
	if cfg.TransferDeadline == 0 {
		cfg.TransferDeadline = 3 * time.Minute // the scenarios were written with this deadline
	}
	if d.HasArg("persist-threshold") {
		var v int
		d.ScanArgs(t, "persist-threshold", &v)
		cfg.PersistThreshold = v
	}
	c, err := New(cfg)
	if err != nil {
		return err
	}
	*h = harness{c: c, cfg: cfg, attempts: map[Ref]int{}, descs: map[Ref]*fragment.Description{}, placed: map[uint64]placement{}}
	return nil
}

// resolved builds a Resolved event from arguments and entry lines (see parseEntries).
func (h *harness) resolved(t *testing.T, d *datadriven.TestData) Event {
	return h.resolvedFrom(t, d, parseEntries(t, d))
}

func (h *harness) resolvedFrom(t *testing.T, d *datadriven.TestData, es []manifest.Entry) Resolved {
	m := manifest.Empty()
	m.Entries = es
	var sum uint64
	for _, e := range es {
		sum += e.Size
	}
	m.NextOffset = argU(t, d, "next", 0)
	if len(es) > 0 {
		m.FirstOffset = es[0].FirstOffset
		m.FirstTimestamp, m.FirstLastTimestamp = es[0].FirstTimestamp, es[0].LastTimestamp
	} else {
		m.FirstOffset = m.NextOffset
	}
	m.FirstOffset = argU(t, d, "first", m.FirstOffset)
	m.TotalSize = argU(t, d, "size", sum)
	if d.HasArg("first-ts") {
		m.FirstTimestamp = int64(argU(t, d, "first-ts", 0))
	}
	if d.HasArg("first-last-ts") {
		m.FirstLastTimestamp = int64(argU(t, d, "first-last-ts", 0))
	}
	rev := int64(argU(t, d, "rev", 0))
	r := Resolved{Manifest: m, Revision: rev, Root: RootRef{Epoch: argU(t, d, "root-epoch", 1), UID: argU(t, d, "root", 0)}}
	if d.HasArg("replaced") { // a root the resolution's own persist replaced (an adoption, an upgrade)
		r.Replaced = []RootRef{{Epoch: argU(t, d, "root-epoch", 1), UID: argU(t, d, "replaced", 0)}}
	}
	if len(es) > 0 && !d.HasArg("not-compared") && d.Cmd == "resolved" {
		// a shell that compared and found the remote tier's last chunk in the local log
		r.Comparison = divergence.Result{Kind: divergence.Match, RemoteFirst: m.FirstOffset, RemoteNext: m.NextOffset}
	}
	return r
}

// chunk builds the next drained chunk: it follows the previous one unless id/seg/pos say
// otherwise; size is the chunk's whole size on disk.
func (h *harness) chunk(t *testing.T, d *datadriven.TestData) Event {
	id := argU(t, d, "id", h.nextID)
	size := int64(argU(t, d, "size", 100))
	if size < chunk.HeaderSize {
		t.Fatalf("%s: chunk size %d below the 48-byte header", d.Pos, size)
	}
	if h.seg == "" {
		h.seg, h.pos = fmt.Sprintf("s%d", id), 8
	}
	seg := argS(d, "seg", h.seg)
	pos := int64(argU(t, d, "pos", uint64(h.pos)))
	ts := int64(id)
	if d.HasArg("ts") {
		ts = int64(argU(t, d, "ts", 0))
	}
	hd := chunk.Header{Records: uint32(argU(t, d, "records", 1)), Timestamp: ts, Epoch: 1, ChunkID: id, DataLen: uint32(size - chunk.HeaderSize)}
	h.placed[id] = placement{seg, pos}
	h.nextID, h.seg, h.pos = hd.NextID(), seg, pos+size
	return ChunkDrained{Header: hd, Location: chunk.Location{Segment: seg, Position: pos, Size: size}}
}

// fragRef resolves frag=N (the N-th cut fragment) or ref=R.
func (h *harness) fragRef(t *testing.T, d *datadriven.TestData) Ref {
	if d.HasArg("frag") {
		n := int(argU(t, d, "frag", 0))
		if n < 1 || n > len(h.frags) {
			t.Fatalf("%s: frag=%d but %d fragments were cut", d.Pos, n, len(h.frags))
		}
		return h.frags[n-1]
	}
	return Ref(argU(t, d, "ref", 0))
}

// parseEntries reads entry lines: "<kind> <first> size=<n> uid=<u> [ts=<a>..<b>]", kind one
// of frag, group, kgroup, mgroup; timestamps default to the first offset.
func parseEntries(t *testing.T, d *datadriven.TestData) []manifest.Entry {
	var es []manifest.Entry
	for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 2 {
			t.Fatalf("%s: entry line %q: want <kind> <first> ...", d.Pos, line)
		}
		var e manifest.Entry
		switch f[0] {
		case "frag":
			e.Kind = manifest.KindFragment
		case "group":
			e.Kind = manifest.KindGroup
		case "kgroup":
			e.Kind = manifest.KindKiloGroup
		case "mgroup":
			e.Kind = manifest.KindMegaGroup
		case "gap":
			e.Kind = manifest.KindGap
		default:
			t.Fatalf("%s: entry kind %q", d.Pos, f[0])
		}
		first, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			t.Fatalf("%s: entry first offset %q: %v", d.Pos, f[1], err)
		}
		e.FirstOffset, e.FirstTimestamp, e.LastTimestamp = first, int64(first), int64(first)
		if e.Kind == manifest.KindGap {
			e.FirstTimestamp, e.LastTimestamp = -1, -1
		}
		for _, kv := range f[2:] {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "size":
				e.Size, err = strconv.ParseUint(v, 10, 64)
			case "uid":
				e.UID, err = strconv.ParseUint(v, 10, 64)
			case "ts":
				a, b, _ := strings.Cut(v, "..")
				e.FirstTimestamp, err = strconv.ParseInt(a, 10, 64)
				if err == nil {
					e.LastTimestamp, err = strconv.ParseInt(b, 10, 64)
				}
			default:
				t.Fatalf("%s: entry attribute %q", d.Pos, kv)
			}
			if err != nil {
				t.Fatalf("%s: entry attribute %q: %v", d.Pos, kv, err)
			}
		}
		es = append(es, e)
	}
	return es
}

func argS(d *datadriven.TestData, key, def string) string {
	for _, a := range d.CmdArgs {
		if a.Key == key && len(a.Vals) > 0 {
			return strings.Join(a.Vals, ",")
		}
	}
	return def
}

func argU(t *testing.T, d *datadriven.TestData, key string, def uint64) uint64 {
	s := argS(d, key, "")
	if s == "" {
		return def
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("%s: %s=%q: %v", d.Pos, key, s, err)
	}
	return v
}

func argF(t *testing.T, d *datadriven.TestData, key string) float64 {
	s := argS(d, key, "")
	if s == "" {
		return 0
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("%s: %s=%q: %v", d.Pos, key, s, err)
	}
	return v
}

func argD(t *testing.T, d *datadriven.TestData, key string) time.Duration {
	s := argS(d, key, "")
	if s == "" {
		return 0
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s: %s=%q: %v", d.Pos, key, s, err)
	}
	return v
}
