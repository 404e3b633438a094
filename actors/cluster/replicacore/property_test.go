package replicacore

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/streamtier/streamtier/manifest"
)

// The model of the cluster around one replica: writers of growing epochs sharing one
// stream lineage of persisted roots (etcd's record names one of them, the head), and a
// network that drops, duplicates and reorders. Seqs skip (a fenced writer took one), and
// etcd can be restored from a snapshot: the head goes back to an older root and the next
// persist builds beside the roots above it, at a seq above them or at the top seq itself
// (another root of a seq the replica may hold).

type modelWriter struct {
	name  string
	epoch uint64
	base  int // the root this writer last persisted or resolved (index into model.roots)
}

type modelRoot struct {
	root   Root
	parent Root
	up     int // index of the parent root, -1 for the empty manifest
	m      manifest.Manifest
}

type modelMsg struct {
	edits *Edits
	sync  *Sync
}

type model struct {
	t        *rapid.T
	c        *Core
	roots    []modelRoot    // every persisted root; roots[0] is the empty manifest, 0/0
	byRoot   map[Root]int   // index into roots
	head     int            // the root etcd's record names
	maxSeq   uint64         // the highest seq any root took
	beside   bool           // etcd was restored: the next root takes the top seq again
	stored   uint64         // highest epoch that persisted (etcd's epoch key)
	writers  []*modelWriter // the last one is the placement's writer
	net      []modelMsg     // writer -> replica, in flight
	requests []string       // replica -> writer registrations, by writer name
	now      int64
	uid      uint64
	held     Root
	heldEp   uint64
	has      bool
	retry    time.Duration
}

func (m *model) writer(name string) *modelWriter {
	for _, w := range m.writers {
		if w.name == name {
			return w
		}
	}
	return nil
}

// step feeds the replica one event, checks invariant 14 and routes its requests.
func (m *model) step(ev Event) {
	effects, err := m.c.Step(ev)
	if err != nil {
		m.t.Fatalf("step %T: %v", ev, err)
	}
	for _, e := range effects {
		switch e := e.(type) {
		case Register:
			m.requests = append(m.requests, e.To)
		case Publish:
			i, ok := m.byRoot[e.Root]
			if !ok || !e.Manifest.Equal(m.roots[i].m) {
				m.t.Fatalf("published %s as root %s, which is not that persisted root", FormatManifest(e.Manifest), e.Root)
			}
			if m.has && (e.Epoch < m.heldEp || e.Epoch == m.heldEp && e.Root.Seq < m.held.Seq) {
				m.t.Fatalf("published (epoch %d, root %s) after holding (epoch %d, root %s): older than held", e.Epoch, e.Root, m.heldEp, m.held)
			}
			m.has, m.heldEp, m.held = true, e.Epoch, e.Root
		case EvaluateLocalRetention:
			if next := m.roots[m.byRoot[m.held]].m.NextOffset; e.PersistedNext != next {
				m.t.Fatalf("local retention at %d, the held manifest's next offset is %d", e.PersistedNext, next)
			}
		}
	}
	// Invariant 14: what the replica holds is the writer's persisted manifest of its root.
	if held, root, _, ok := m.c.Manifest(); ok {
		if i, known := m.byRoot[root]; !known || !held.Equal(m.roots[i].m) {
			m.t.Fatalf("replica holds %s as root %s, not a persisted root", FormatManifest(held), root)
		}
	}
}

// edits draws one persist's worth of edits on top of base: appends, then maybe a
// rebalance, then maybe retention.
func (m *model) edits(base manifest.Manifest) ([]manifest.Edit, manifest.Manifest) {
	var eds []manifest.Edit
	apply := func(e manifest.Edit) {
		next, err := base.Apply(e)
		if err != nil {
			m.t.Fatalf("model edit does not apply: %v", err)
		}
		eds, base = append(eds, e), next
	}
	for range rapid.IntRange(0, 3).Draw(m.t, "appends") {
		n := rapid.Uint64Range(1, 50).Draw(m.t, "len")
		m.uid++
		first := base.NextOffset
		e, err := manifest.AppendEdit(base, manifest.Entry{FirstOffset: first, FirstTimestamp: int64(first), LastTimestamp: int64(first + n - 1), Size: n, UID: m.uid}, first+n)
		if err != nil {
			m.t.Fatalf("append: %v", err)
		}
		apply(e)
	}
	if r, ok := manifest.FindRebalance(base, 4); ok && rapid.Bool().Draw(m.t, "rebalance") {
		m.uid++
		apply(r.Edit(base, m.uid))
	}
	if rapid.IntRange(0, 3).Draw(m.t, "retention") == 0 {
		r := manifest.EvaluateRetention(base, manifest.Policy{MaxBytes: rapid.Uint64Range(1, 200).Draw(m.t, "max-bytes")}, 0)
		if r.Changed {
			apply(r.Edit)
		}
	}
	return eds, base
}

// add records a new persisted root of manifest man on top of roots[up] and makes it the
// head: its seq is above every seq taken (sometimes skipping one a fenced writer took), or,
// right after an etcd restore, sometimes the top seq again.
func (m *model) add(up int, man manifest.Manifest) modelRoot {
	seq := m.maxSeq + 1
	if rapid.IntRange(0, 3).Draw(m.t, "skip") == 0 {
		seq += rapid.Uint64Range(1, 2).Draw(m.t, "skipped")
	}
	if m.beside && m.maxSeq > m.roots[up].root.Seq && rapid.Bool().Draw(m.t, "same-seq") {
		seq = m.maxSeq
	}
	m.beside = false
	m.uid++
	r := modelRoot{root: Root{Seq: seq, UID: m.uid}, parent: m.roots[up].root, up: up, m: man}
	m.maxSeq = max(m.maxSeq, seq)
	m.roots = append(m.roots, r)
	m.head = len(m.roots) - 1
	m.byRoot[r.root] = m.head
	return r
}

func (m *model) syncMsg(w *modelWriter) modelMsg {
	return modelMsg{sync: &Sync{From: w.name, Root: m.roots[w.base].root, Epoch: w.epoch, Manifest: m.roots[w.base].m}}
}

// persist lets writer w persist: it succeeds when w's epoch is not below the stored one
// and w is at the head (etcd's conditional write); otherwise w reinitializes (resolves the
// head) and syncs the replica.
func (m *model) persist(w *modelWriter) {
	if w.epoch < m.stored || w.base != m.head {
		w.base = m.head
		m.net = append(m.net, m.syncMsg(w))
		return
	}
	if rapid.IntRange(0, 9).Draw(m.t, "reset") == 0 {
		m.add(w.base, manifest.EmptyAt(m.roots[w.base].m.NextOffset+rapid.Uint64Range(0, 30).Draw(m.t, "skip")))
		m.stored, w.base = w.epoch, m.head
		m.net = append(m.net, m.syncMsg(w))
		return
	}
	eds, next := m.edits(m.roots[w.base].m)
	r := m.add(w.base, next)
	m.stored, w.base = w.epoch, m.head
	m.net = append(m.net, modelMsg{edits: &Edits{From: w.name, Root: r.root, Parent: r.parent, Epoch: w.epoch, Edits: eds}})
}

// restore is etcd restored from a snapshot: its record names an older root of the lineage.
func (m *model) restore() {
	if m.head == 0 {
		return
	}
	back := rapid.IntRange(1, 3).Draw(m.t, "back")
	for ; back > 0 && m.roots[m.head].up > 0; back-- {
		m.head = m.roots[m.head].up
	}
	m.beside = true
}

func (m *model) deliver(i int, keep bool) {
	msg := m.net[i]
	if !keep {
		m.net = append(m.net[:i], m.net[i+1:]...)
	}
	if msg.edits != nil {
		e := *msg.edits
		e.Now = m.now
		m.step(e)
	} else {
		s := *msg.sync
		s.Now = m.now
		m.step(s)
	}
}

// answer delivers one registration to its writer, which syncs what it persisted last.
func (m *model) answer(i int) {
	to := m.requests[i]
	m.requests = append(m.requests[:i], m.requests[i+1:]...)
	if w := m.writer(to); w != nil {
		m.net = append(m.net, m.syncMsg(w))
	}
}

func (m *model) newWriter() {
	top := m.writers[len(m.writers)-1]
	w := &modelWriter{name: fmt.Sprintf("n%d", len(m.writers)+1), epoch: top.epoch + 1}
	// It resolved the manifest some time ago: the head or the root below it.
	w.base = m.head
	if up := m.roots[m.head].up; up >= 0 && rapid.Bool().Draw(m.t, "lag") {
		w.base = up
	}
	m.writers = append(m.writers, w)
	m.step(WriterChanged{Writer: w.name, Epoch: w.epoch, Now: m.now})
	m.net = append(m.net, m.syncMsg(w))
}

// TestReplicaHoldsPersistedManifests is invariant 14 under any interleaving: writers
// persisting (seqs skipping), being deposed and fenced, etcd restored to an older root,
// messages dropped, duplicated and reordered, registrations lost. After every step the
// replica holds a persisted root's manifest and never goes back (epoch, then seq); once the
// network delivers everything, it converges on the placement writer's head.
func TestReplicaHoldsPersistedManifests(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		retry := time.Duration(rapid.IntRange(1, 50).Draw(t, "retry-ms")) * time.Millisecond
		c, err := New(Config{Stream: "s1", Node: "r1", ResyncRetry: retry})
		if err != nil {
			t.Fatal(err)
		}
		m := &model{t: t, c: c, roots: []modelRoot{{up: -1, m: manifest.Empty()}}, byRoot: map[Root]int{{}: 0}, retry: retry,
			writers: []*modelWriter{{name: "n1", epoch: 1}}}
		m.step(WriterChanged{Writer: "n1", Epoch: 1})
		for range rapid.IntRange(1, 120).Draw(t, "steps") {
			switch rapid.IntRange(0, 9).Draw(t, "action") {
			case 0, 1:
				m.persist(m.writers[len(m.writers)-1])
			case 2:
				m.persist(m.writers[rapid.IntRange(0, len(m.writers)-1).Draw(t, "writer")])
			case 3:
				switch rapid.IntRange(0, 7).Draw(t, "move") {
				case 0, 1:
					m.newWriter()
				case 2:
					m.restore()
				}
			case 4, 5:
				if len(m.net) > 0 {
					m.deliver(rapid.IntRange(0, len(m.net)-1).Draw(t, "msg"), rapid.IntRange(0, 4).Draw(t, "dup") == 0)
				}
			case 6:
				if len(m.net) > 0 {
					i := rapid.IntRange(0, len(m.net)-1).Draw(t, "drop")
					m.net = append(m.net[:i], m.net[i+1:]...)
				}
			case 7:
				if len(m.requests) > 0 {
					i := rapid.IntRange(0, len(m.requests)-1).Draw(t, "request")
					if rapid.IntRange(0, 3).Draw(t, "lose") == 0 {
						m.requests = append(m.requests[:i], m.requests[i+1:]...)
					} else {
						m.answer(i)
					}
				}
			case 8:
				m.now += int64(rapid.IntRange(0, 60).Draw(t, "advance"))
				m.step(Tick{Now: m.now})
			case 9:
				m.step(WriterRejoined{Node: m.writers[rapid.IntRange(0, len(m.writers)-1).Draw(t, "rejoined")].name, Now: m.now})
			}
		}
		// Heal: the placement writer catches up and persists once more, then everything is
		// delivered in order and every request answered until nothing moves.
		w := m.writers[len(m.writers)-1]
		for w.base != m.head || w.epoch < m.stored {
			m.persist(w)
		}
		m.persist(w)
		for round := 0; len(m.net) > 0 || len(m.requests) > 0 || m.c.Status().Pending; round++ {
			if round > 100 {
				t.Fatalf("no convergence after 100 rounds: %+v", m.c.Status())
			}
			for len(m.net) > 0 {
				m.deliver(0, false)
			}
			for len(m.requests) > 0 {
				m.answer(0)
			}
			if len(m.net) == 0 && m.c.Status().Pending {
				m.now += retry.Milliseconds()
				m.step(Tick{Now: m.now})
			}
		}
		held, root, epoch, ok := m.c.Manifest()
		if !ok || root != m.roots[m.head].root || epoch != w.epoch || !held.Equal(m.roots[m.head].m) {
			t.Fatalf("after healing the replica holds root %s epoch %d (synced %t), want the head %s at epoch %d", root, epoch, ok, m.roots[m.head].root, w.epoch)
		}
	})
}
