package replicacore

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/streamtier/streamtier/manifest"
)

// The model of the cluster around one replica: writers of growing epochs sharing one etcd
// history of persisted manifests, and a network that drops, duplicates and reorders.

type modelWriter struct {
	name  string
	epoch uint64
	base  int64 // the revision this writer last persisted or resolved
}

type modelMsg struct {
	edits *Edits
	sync  *Sync
}

type model struct {
	t        *rapid.T
	c        *Core
	hist     []manifest.Manifest // by revision; hist[0] is the empty manifest
	stored   uint64              // highest epoch that persisted (etcd's epoch key)
	writers  []*modelWriter      // the last one is the placement's writer
	net      []modelMsg          // writer -> replica, in flight
	requests []string            // replica -> writer registrations, by writer name
	now      int64
	uid      uint64
	heldSeq  int64
	heldEp   uint64
	held     bool
	retry    time.Duration
}

func (m *model) latest() int64 { return int64(len(m.hist) - 1) }

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
			if e.Seq < 0 || e.Seq > m.latest() || !e.Manifest.Equal(m.hist[e.Seq]) {
				m.t.Fatalf("published %s at seq %d, which is not the persisted manifest of that revision", FormatManifest(e.Manifest), e.Seq)
			}
			if m.held && (e.Epoch < m.heldEp || e.Epoch == m.heldEp && e.Seq < m.heldSeq) {
				m.t.Fatalf("published (epoch %d, seq %d) after holding (epoch %d, seq %d): older than held", e.Epoch, e.Seq, m.heldEp, m.heldSeq)
			}
			m.held, m.heldEp, m.heldSeq = true, e.Epoch, e.Seq
		case EvaluateLocalRetention:
			if e.PersistedNext != m.hist[m.heldSeq].NextOffset {
				m.t.Fatalf("local retention at %d, the held manifest's next offset is %d", e.PersistedNext, m.hist[m.heldSeq].NextOffset)
			}
		}
	}
	// Invariant 14: what the replica holds is the writer's persisted manifest of its seq.
	if held, seq, _, ok := m.c.Manifest(); ok && (seq > m.latest() || !held.Equal(m.hist[seq])) {
		m.t.Fatalf("replica holds %s at seq %d; persisted there: %v", FormatManifest(held), seq, m.hist)
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

// persist lets writer w persist: it succeeds when w's epoch is not below the stored one
// and w is at the latest revision (etcd's conditional write); otherwise w reinitializes
// (resolves the latest revision) and syncs the replica.
func (m *model) persist(w *modelWriter) {
	if w.epoch < m.stored || w.base != m.latest() {
		w.base = m.latest()
		m.net = append(m.net, modelMsg{sync: &Sync{From: w.name, Revision: w.base, Epoch: w.epoch, Manifest: m.hist[w.base]}})
		return
	}
	if rapid.IntRange(0, 9).Draw(m.t, "reset") == 0 {
		reset := manifest.EmptyAt(m.hist[w.base].NextOffset + rapid.Uint64Range(0, 30).Draw(m.t, "skip"))
		m.hist = append(m.hist, reset)
		m.stored, w.base = w.epoch, m.latest()
		m.net = append(m.net, modelMsg{sync: &Sync{From: w.name, Revision: w.base, Epoch: w.epoch, Manifest: reset}})
		return
	}
	eds, next := m.edits(m.hist[w.base])
	m.hist = append(m.hist, next)
	m.stored, w.base = w.epoch, m.latest()
	m.net = append(m.net, modelMsg{edits: &Edits{From: w.name, Seq: w.base, Epoch: w.epoch, Edits: eds}})
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
		m.net = append(m.net, modelMsg{sync: &Sync{From: w.name, Revision: w.base, Epoch: w.epoch, Manifest: m.hist[w.base]}})
	}
}

func (m *model) newWriter() {
	top := m.writers[len(m.writers)-1]
	w := &modelWriter{name: fmt.Sprintf("n%d", len(m.writers)+1), epoch: top.epoch + 1}
	// It resolved the manifest some time ago: the latest revision or one before it.
	w.base = max(m.latest()-int64(rapid.IntRange(0, 1).Draw(m.t, "lag")), 0)
	m.writers = append(m.writers, w)
	m.step(WriterChanged{Writer: w.name, Epoch: w.epoch, Now: m.now})
	m.net = append(m.net, modelMsg{sync: &Sync{From: w.name, Revision: w.base, Epoch: w.epoch, Manifest: m.hist[w.base]}})
}

// TestReplicaHoldsPersistedManifests is invariant 14 under any interleaving: writers
// persisting, being deposed and fenced, messages dropped, duplicated and reordered,
// registrations lost. After every step the replica holds a persisted manifest of the
// writer's history at its seq and never goes back (epoch, then seq); once the network
// delivers everything, it converges on the placement writer's latest persisted manifest.
func TestReplicaHoldsPersistedManifests(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		retry := time.Duration(rapid.IntRange(1, 50).Draw(t, "retry-ms")) * time.Millisecond
		c, err := New(Config{Stream: "s1", Node: "r1", ResyncRetry: retry})
		if err != nil {
			t.Fatal(err)
		}
		m := &model{t: t, c: c, hist: []manifest.Manifest{manifest.Empty()}, retry: retry,
			writers: []*modelWriter{{name: "n1", epoch: 1}}}
		m.step(WriterChanged{Writer: "n1", Epoch: 1})
		for range rapid.IntRange(1, 120).Draw(t, "steps") {
			switch rapid.IntRange(0, 9).Draw(t, "action") {
			case 0, 1:
				m.persist(m.writers[len(m.writers)-1])
			case 2:
				m.persist(m.writers[rapid.IntRange(0, len(m.writers)-1).Draw(t, "writer")])
			case 3:
				if rapid.IntRange(0, 3).Draw(t, "move") == 0 {
					m.newWriter()
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
		for w.base != m.latest() || w.epoch < m.stored {
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
		held, seq, epoch, ok := m.c.Manifest()
		if !ok || seq != m.latest() || epoch != w.epoch || !held.Equal(m.hist[seq]) {
			t.Fatalf("after healing the replica holds seq %d epoch %d (synced %t), want the latest %d at epoch %d", seq, epoch, ok, m.latest(), w.epoch)
		}
	})
}
