package replicacore

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/streamtier/streamtier/manifest"
)

// TestScenarios runs every file under testdata/: one interleaving per file, events in,
// effects out. After every step the harness checks invariant 14: what the replica holds is
// the writer's persisted manifest of that revision. The command language is in
// docs/cluster.md.
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if strings.Contains(path, "rapid") {
			return // failure files of the property test, not scenarios
		}
		h := newHarness()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return h.run(t, d)
		})
	})
}

// harness drives one core and plays the writer: the persisted roots by (seq, uid), each
// with the root it was built on and the edits of its persist, and the head (the root etcd's
// record names now).
type harness struct {
	c      *Core
	hist   map[Root]manifest.Manifest
	parent map[Root]Root
	edits  map[Root][]manifest.Edit
	head   Root
	uid    uint64
}

func newHarness() *harness {
	return &harness{hist: map[Root]manifest.Manifest{{}: manifest.Empty()}, parent: map[Root]Root{}, edits: map[Root][]manifest.Edit{}}
}

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	if h.c == nil && d.Cmd != "new" {
		h.newCore(t, "r1", 0)
	}
	now := int64(argU(t, d, "now", 0))
	var ev Event
	switch d.Cmd {
	case "new":
		retry, err := time.ParseDuration(argS(d, "retry", "0s"))
		if err != nil {
			t.Fatalf("%s: retry: %v", d.Pos, err)
		}
		if err := h.newCore(t, argS(d, "node", "r1"), retry); err != nil {
			return "error: " + err.Error() + "\n"
		}
		return "ok\n"
	case "persist", "legacy":
		return h.persist(t, d)
	case "reset":
		parent := h.root(t, d, "on", h.head)
		r := h.newRoot(t, d, parent)
		h.hist[r], h.parent[r], h.head = manifest.EmptyAt(argU(t, d, "at", 0)), parent, r
		return fmt.Sprintf("root=%s parent=%s %s\n", r, parent, FormatManifest(h.hist[r]))
	case "placement":
		ev = WriterChanged{Writer: argS(d, "writer", ""), Epoch: argU(t, d, "epoch", 1), Now: now}
	case "rejoined":
		ev = WriterRejoined{Node: argS(d, "node", ""), Now: now}
	case "edits":
		r := h.root(t, d, "root", h.head)
		eds, ok := h.edits[r]
		if !ok {
			t.Fatalf("%s: no persist with edits made root %s", d.Pos, r)
		}
		if d.HasArg("corrupt") {
			eds = append([]manifest.Edit(nil), eds...)
			eds[0].At += 1000
		}
		e := Edits{From: argS(d, "from", "n1"), Root: r, Parent: h.parent[r], Epoch: argU(t, d, "epoch", 1), Edits: eds, Now: now}
		// as= and parent-as= label the message otherwise (a writer's bug, an older format)
		e.Root, e.Parent = h.label(t, d, "as", e.Root), h.label(t, d, "parent-as", e.Parent)
		ev = e
	case "sync":
		r := h.root(t, d, "root", h.head)
		m := h.hist[r]
		if d.HasArg("corrupt") {
			m = m.Clone()
			m.TotalSize++
		}
		ev = Sync{From: argS(d, "from", "n1"), Root: h.label(t, d, "as", r), Epoch: argU(t, d, "epoch", 1), Manifest: m, Now: now}
	case "tick":
		ev = Tick{Now: now}
	case "status":
		return formatStatus(h.c.Status())
	default:
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	}
	effects, err := h.c.Step(ev)
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	h.checkHeld(t, d)
	var b strings.Builder
	for _, e := range effects {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	if b.Len() == 0 {
		return "(nothing)\n"
	}
	return b.String()
}

func (h *harness) newCore(t *testing.T, node string, retry time.Duration) error {
	c, err := New(Config{Stream: "s1", Node: node, ResyncRetry: retry})
	if err != nil {
		return err
	}
	h.c = c
	return nil
}

// parseRoot reads "seq" or "seq/uid".
func parseRoot(t *testing.T, d *datadriven.TestData, key, v string) (r Root, uid bool) {
	seq, u, found := strings.Cut(v, "/")
	var err error
	if r.Seq, err = strconv.ParseUint(seq, 10, 64); err == nil && found {
		r.UID, err = strconv.ParseUint(u, 10, 64)
	}
	if err != nil {
		t.Fatalf("%s: %s=%q: %v", d.Pos, key, v, err)
	}
	return r, found
}

// root finds the persisted root key= names: seq/uid, or a seq alone when one root has it.
func (h *harness) root(t *testing.T, d *datadriven.TestData, key string, def Root) Root {
	v := argS(d, key, "")
	if v == "" {
		return def
	}
	r, withUID := parseRoot(t, d, key, v)
	if withUID {
		if _, ok := h.hist[r]; !ok {
			t.Fatalf("%s: no root %s persisted", d.Pos, r)
		}
		return r
	}
	var found []Root
	for k := range h.hist {
		if k.Seq == r.Seq {
			found = append(found, k)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: %s=%s: %d roots have seq %d: name it seq/uid", d.Pos, key, v, len(found), r.Seq)
	}
	return found[0]
}

// label is key=seq/uid when given, else def: what a message claims, persisted or not.
func (h *harness) label(t *testing.T, d *datadriven.TestData, key string, def Root) Root {
	v := argS(d, key, "")
	if v == "" {
		return def
	}
	r, withUID := parseRoot(t, d, key, v)
	if !withUID {
		t.Fatalf("%s: %s=%s: give seq/uid", d.Pos, key, v)
	}
	return r
}

// newRoot names the next root: seq= (default one above the parent's; a writer skips a seq a
// fenced writer took) and uid= (default the seq, which must then be free).
func (h *harness) newRoot(t *testing.T, d *datadriven.TestData, parent Root) Root {
	r := Root{Seq: argU(t, d, "seq", parent.Seq+1)}
	r.UID = argU(t, d, "uid", r.Seq)
	if d.Cmd == "legacy" {
		r.Seq = 0 // a version 1 or 2 root: no seq
	}
	if _, taken := h.hist[r]; taken || r.UID == 0 || (r.Seq <= parent.Seq && d.Cmd != "legacy") {
		t.Fatalf("%s: root %s on parent %s: taken, uid 0 or not above its parent", d.Pos, r, parent)
	}
	return r
}

// checkHeld is invariant 14: the replica holds exactly the persisted manifest of its root.
func (h *harness) checkHeld(t *testing.T, d *datadriven.TestData) {
	m, root, _, ok := h.c.Manifest()
	if !ok {
		return
	}
	want, known := h.hist[root]
	if !known || !m.Equal(want) {
		t.Fatalf("%s: replica holds %s as root %s, the writer persisted %s (known %t)", d.Pos, FormatManifest(m), root, FormatManifest(want), known)
	}
}

// persist makes the writer persist one more root: append=L1,L2 appends fragments of those
// lengths (size 10 per offset), truncate=K drops K head fragments; on=seq[/uid] builds on
// that root instead of the head (a rollback), seq= and uid= name the new root. legacy makes
// a version 1 or 2 root instead (seq 0, uid= or 1): the head before the first persist of a
// stream written by an older version.
func (h *harness) persist(t *testing.T, d *datadriven.TestData) string {
	parent := h.root(t, d, "on", h.head)
	m := h.hist[parent]
	var eds []manifest.Edit
	for _, a := range d.CmdArgs {
		switch a.Key {
		case "append":
			for _, v := range strings.Split(strings.Join(a.Vals, ","), ",") {
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil || n == 0 {
					t.Fatalf("%s: append=%q", d.Pos, v)
				}
				h.uid++
				first := m.NextOffset
				e, err := manifest.AppendEdit(m, manifest.Entry{FirstOffset: first, FirstTimestamp: int64(first), LastTimestamp: int64(first + n - 1), Size: n * 10, UID: h.uid}, first+n)
				if err != nil {
					t.Fatalf("%s: %v", d.Pos, err)
				}
				eds = append(eds, e)
				if m, err = m.Apply(e); err != nil {
					t.Fatalf("%s: %v", d.Pos, err)
				}
			}
		case "truncate":
			k, err := strconv.Atoi(a.Vals[0])
			if err != nil || k > len(m.Entries) {
				t.Fatalf("%s: truncate=%v", d.Pos, a.Vals)
			}
			e := truncateEdit(m, k)
			eds = append(eds, e)
			if m, err = m.Apply(e); err != nil {
				t.Fatalf("%s: %v", d.Pos, err)
			}
		}
	}
	r := h.newRoot(t, d, parent)
	h.hist[r], h.parent[r], h.head = m, parent, r
	if d.Cmd == "legacy" {
		return fmt.Sprintf("root=%s (version 2) %s\n", r, FormatManifest(m))
	}
	h.edits[r] = eds
	return fmt.Sprintf("root=%s parent=%s %s\n", r, parent, FormatManifest(m))
}

// truncateEdit drops the first k fragment entries of m, as remote retention does.
func truncateEdit(m manifest.Manifest, k int) manifest.Edit {
	var drop int64
	for _, e := range m.Entries[:k] {
		drop += int64(e.Size)
	}
	e := manifest.Edit{At: 0, Remove: k, FirstOffset: m.NextOffset, FirstTimestamp: -1, FirstLastTimestamp: -1, SizeDelta: -drop}
	if k < len(m.Entries) {
		head := m.Entries[k]
		e.FirstOffset, e.FirstTimestamp, e.FirstLastTimestamp = head.FirstOffset, head.FirstTimestamp, head.LastTimestamp
	}
	return e
}

func formatStatus(s Status) string {
	var b strings.Builder
	fmt.Fprintf(&b, "writer=%s@%d synced=%t root=%s epoch=%d [%d,%d) size=%d entries=%d pending=%t\n",
		s.Writer, s.WriterEpoch, s.Synced, Root{s.Seq, s.UID}, s.Epoch, s.FirstOffset, s.NextOffset, s.TotalSize, s.Entries, s.Pending)
	c := s.Counters
	for _, kv := range []struct {
		k string
		v uint64
	}{
		{"applied", c.Applied}, {"gaps", c.Gaps}, {"forks", c.Forks}, {"epoch-changes", c.EpochChanges}, {"stale-epoch", c.StaleEpoch},
		{"duplicates", c.Duplicates}, {"bad-edits", c.BadEdits}, {"before-sync", c.BeforeSync},
		{"syncs-applied", c.SyncsApplied}, {"syncs-ignored", c.SyncsIgnored}, {"bad-syncs", c.BadSyncs},
		{"registrations", c.Registrations}, {"resync-requests", c.ResyncRequests}, {"retries", c.Retries},
		{"suppressed", c.Suppressed},
	} {
		if kv.v != 0 {
			fmt.Fprintf(&b, "%s=%d ", kv.k, kv.v)
		}
	}
	return strings.TrimRight(b.String(), " ") + "\n"
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
