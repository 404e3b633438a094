package readercore

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/streamtier/streamtier/actors/divergence"
	"github.com/streamtier/streamtier/manifest"
)

// chunkModel is the in-memory remote tier and local log a resolve-compare scenario compares:
// chunks of `records` offsets each at ids that are multiples of it, every remote chunk at
// epoch 1, local chunks at epoch 1 below divergeAt and at localEpoch from it; foreign makes
// every local chunk differ.
type chunkModel struct {
	records    uint64
	divergeAt  uint64
	localEpoch uint64
	foreign    bool
	lf, ln     uint64
	children   map[uint64][]manifest.Entry // group uid -> entries
	ends       map[uint64]uint64           // fragment uid -> end offset
}

func (m *chunkModel) chunk(id, next, epoch uint64, foreign bool) divergence.Chunk {
	crc := uint32(id*2654435761) ^ uint32(epoch)
	if foreign {
		crc ^= 0xdeadbeef
	}
	return divergence.Chunk{ID: id, Next: next, Epoch: epoch, CRC: crc, Size: 100}
}

func (m *chunkModel) Children(g manifest.Entry) ([]manifest.Entry, error) {
	c, ok := m.children[g.UID]
	if !ok {
		return nil, fmt.Errorf("no group object with uid %d", g.UID)
	}
	return c, nil
}

// bounds lists a fragment's chunk ids and their end.
func (m *chunkModel) bounds(f manifest.Entry) ([]uint64, uint64) {
	end := m.ends[f.UID]
	var ids []uint64
	for id := f.FirstOffset; id < end; id = (id/m.records + 1) * m.records {
		ids = append(ids, id)
	}
	return ids, end
}

func (m *chunkModel) Index(f manifest.Entry) ([]divergence.IndexEntry, error) {
	ids, _ := m.bounds(f)
	if len(ids) == 0 {
		return nil, fmt.Errorf("fragment %d has no chunks", f.FirstOffset)
	}
	per := f.Size / uint64(len(ids))
	out := make([]divergence.IndexEntry, len(ids))
	for i, id := range ids {
		out[i] = divergence.IndexEntry{ID: id, Timestamp: int64(id), Position: uint32(8 + uint64(i)*per)}
	}
	return out, nil
}

func (m *chunkModel) Chunk(f manifest.Entry, pos uint32) (divergence.Chunk, error) {
	idx, _ := m.Index(f)
	ids, end := m.bounds(f)
	for i, r := range idx {
		if r.Position == pos {
			next := end
			if i+1 < len(ids) {
				next = ids[i+1]
			}
			return m.chunk(r.ID, next, 1, false), nil
		}
	}
	return divergence.Chunk{}, fmt.Errorf("fragment %d: no chunk at position %d", f.FirstOffset, pos)
}

// localChunk answers for the local log: chunk boundaries at multiples of records.
type localModel struct{ m *chunkModel }

func (l localModel) Chunk(id uint64) (divergence.Chunk, bool, error) {
	m := l.m
	if id < m.lf {
		return divergence.Chunk{}, false, fmt.Errorf("chunk %d below the local first offset %d", id, m.lf)
	}
	if id >= m.ln || id%m.records != 0 {
		return divergence.Chunk{}, false, nil
	}
	epoch := uint64(1)
	if id >= m.divergeAt {
		epoch = m.localEpoch
	}
	return m.chunk(id, min(id+m.records, m.ln), epoch, m.foreign), true, nil
}

// resolveCompare is the resolution of a shell that compares: it resolves the manifest the
// entry lines give (a line indented under a group is one of its children), compares it with
// the local log [log-first, log-next) over the chunk model, copies a straddling prefix when
// the log no longer holds it (uid copy-uid), and delivers Resolved then LogOpened.
func (h *harness) resolveCompare(t *testing.T, d *datadriven.TestData) []Event {
	roots, children := parseTree(t, d)
	r := h.resolvedFrom(t, d, roots)
	m := &chunkModel{
		records:    argU(t, d, "records", 10),
		divergeAt:  argU(t, d, "diverge-at", ^uint64(0)),
		localEpoch: argU(t, d, "local-epoch", 2),
		foreign:    d.HasArg("foreign"),
		lf:         argU(t, d, "log-first", 0),
		ln:         argU(t, d, "log-next", 0),
		children:   children,
		ends:       map[uint64]uint64{},
	}
	var ends func(es []manifest.Entry, end uint64)
	ends = func(es []manifest.Entry, end uint64) {
		for i, e := range es {
			eEnd := end
			if i+1 < len(es) {
				eEnd = es[i+1].FirstOffset
			}
			if e.Kind == manifest.KindFragment {
				m.ends[e.UID] = eEnd
			} else if !e.IsGap() {
				ends(children[e.UID], eEnd)
			}
		}
	}
	ends(r.Manifest.Entries, r.Manifest.NextOffset)
	res, err := divergence.Find(r.Manifest, m.lf, m.ln, m, localModel{m})
	if err != nil {
		t.Fatalf("%s: compare: %v", d.Pos, err)
	}
	if tr := res.Truncation; res.Kind == divergence.Diverged && tr.NeedsCopy(m.lf) {
		tr.Replacement = &manifest.Entry{FirstOffset: tr.Straddle.FirstOffset, FirstTimestamp: tr.Prefix[0].Timestamp,
			LastTimestamp: tr.PrefixLastTimestamp, Size: tr.PrefixBytes, UID: argU(t, d, "copy-uid", 777), Kind: manifest.KindFragment}
	}
	r.Comparison = res
	opened := LogOpened{First: m.lf, Next: m.ln}
	if d.HasArg("rewritten-below") {
		opened.Rewritten = &divergence.Rewritten{SeenNext: argU(t, d, "rewritten-below", 0), Detail: argS(d, "rewrite", "the segment shrank")}
	}
	return []Event{r, opened}
}

// parseTree reads entry lines like parseEntries; lines indented deeper than the group line
// above them are that group's children (recursively).
func parseTree(t *testing.T, d *datadriven.TestData) ([]manifest.Entry, map[uint64][]manifest.Entry) {
	children := map[uint64][]manifest.Entry{}
	type frame struct {
		indent int
		uid    uint64
	}
	var roots []manifest.Entry
	var stack []frame
	for _, line := range strings.Split(d.Input, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		indent := len(line) - len(strings.TrimLeft(line, " "))
		es := parseEntries(t, &datadriven.TestData{Pos: d.Pos, Input: line})
		e := es[0]
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		if len(stack) == 0 {
			roots = append(roots, e)
		} else {
			p := stack[len(stack)-1].uid
			children[p] = append(children[p], e)
		}
		if e.Kind != manifest.KindFragment && !e.IsGap() {
			stack = append(stack, frame{indent, e.UID})
		}
	}
	return roots, children
}
