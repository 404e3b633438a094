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

// harness drives one core and plays the writer: a history of persisted manifests by
// revision and the edits of each persist.
type harness struct {
	c     *Core
	hist  map[int64]manifest.Manifest
	edits map[int64][]manifest.Edit
	rev   int64
	uid   uint64
}

func newHarness() *harness {
	return &harness{hist: map[int64]manifest.Manifest{0: manifest.Empty()}, edits: map[int64][]manifest.Edit{}}
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
	case "persist":
		return h.persist(t, d)
	case "reset":
		h.rev++
		h.hist[h.rev] = manifest.EmptyAt(argU(t, d, "at", 0))
		return fmt.Sprintf("rev=%d %s\n", h.rev, FormatManifest(h.hist[h.rev]))
	case "placement":
		ev = WriterChanged{Writer: argS(d, "writer", ""), Epoch: argU(t, d, "epoch", 1), Now: now}
	case "rejoined":
		ev = WriterRejoined{Node: argS(d, "node", ""), Now: now}
	case "edits":
		rev := int64(argU(t, d, "rev", uint64(h.rev)))
		eds, ok := h.edits[rev]
		if !ok {
			t.Fatalf("%s: no persist with edits at rev %d", d.Pos, rev)
		}
		if d.HasArg("corrupt") {
			eds = append([]manifest.Edit(nil), eds...)
			eds[0].At += 1000
		}
		ev = Edits{From: argS(d, "from", "n1"), Seq: rev, Epoch: argU(t, d, "epoch", 1), Edits: eds, Now: now}
	case "sync":
		rev := int64(argU(t, d, "rev", uint64(h.rev)))
		m, ok := h.hist[rev]
		if !ok {
			t.Fatalf("%s: no persisted manifest at rev %d", d.Pos, rev)
		}
		if d.HasArg("corrupt") {
			m = m.Clone()
			m.TotalSize++
		}
		ev = Sync{From: argS(d, "from", "n1"), Revision: rev, Epoch: argU(t, d, "epoch", 1), Manifest: m, Now: now}
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

// checkHeld is invariant 14: the replica holds exactly the persisted manifest of its seq.
func (h *harness) checkHeld(t *testing.T, d *datadriven.TestData) {
	m, seq, _, ok := h.c.Manifest()
	if !ok {
		return
	}
	want, known := h.hist[seq]
	if !known || !m.Equal(want) {
		t.Fatalf("%s: replica holds %s at seq %d, the writer persisted %s", d.Pos, FormatManifest(m), seq, FormatManifest(want))
	}
}

// persist makes the writer persist one more revision: append=L1,L2 appends fragments of
// those lengths (size 10 per offset), truncate=K drops K head fragments.
func (h *harness) persist(t *testing.T, d *datadriven.TestData) string {
	m := h.hist[h.rev]
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
	h.rev++
	h.hist[h.rev] = m
	h.edits[h.rev] = eds
	return fmt.Sprintf("rev=%d %s\n", h.rev, FormatManifest(m))
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
	fmt.Fprintf(&b, "writer=%s@%d synced=%t seq=%d epoch=%d [%d,%d) size=%d entries=%d pending=%t\n",
		s.Writer, s.WriterEpoch, s.Synced, s.Seq, s.Epoch, s.FirstOffset, s.NextOffset, s.TotalSize, s.Entries, s.Pending)
	c := s.Counters
	for _, kv := range []struct {
		k string
		v uint64
	}{
		{"applied", c.Applied}, {"gaps", c.Gaps}, {"epoch-changes", c.EpochChanges}, {"stale-epoch", c.StaleEpoch},
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
