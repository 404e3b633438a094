package fetchcore

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestScenarios runs every file under testdata/: one interleaving per file, events in,
// effects out. The command language is described in docs/remote-read.md.
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if strings.Contains(path, "rapid") {
			return
		}
		h := &scenario{objects: map[string]*testObject{}, gets: map[uint64]Get{}, indexes: map[uint64]string{}}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return h.run(t, d)
		})
	})
}

type scenario struct {
	c       *Core
	objects map[string]*testObject
	gaps    map[string]Leaf
	gets    map[uint64]Get
	indexes map[uint64]string
	now     time.Duration
	held    int64 // bytes delivered and not consumed, as the consumer sees them
	// manualIndex: the scenario answers index fetches itself (init index=manual); else
	// the harness answers each at once, with the object's records, and says so.
	manualIndex bool
}

// indexAnswered is the harness's line for an index fetch it answered itself.
type indexAnswered struct{ id uint64 }

func (indexAnswered) isEffect()        {}
func (a indexAnswered) String() string { return fmt.Sprintf("(index id=%d answered)", a.id) }

func (h *scenario) run(t *testing.T, d *datadriven.TestData) string {
	var effs []Effect
	switch d.Cmd {
	case "object":
		var sizes []int
		for _, s := range strings.Split(arg(t, d, "sizes", ""), ",") {
			n, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("sizes: %v", err)
			}
			sizes = append(sizes, n)
		}
		o := buildObject(arg(t, d, "key", ""), argU(t, d, "first", 0), sizes, argU(t, d, "seed", 1))
		h.objects[o.key] = o
		var b strings.Builder
		fmt.Fprintf(&b, "%s [%d,%d) size=%d object=%d\n", o.key, o.first, o.end, o.size, len(o.bytes))
		for i, r := range o.records {
			fmt.Fprintf(&b, "  chunk %d at %d bytes=%d\n", r.ChunkID, r.Position, len(o.chunks[i]))
		}
		return b.String()
	case "gap":
		if h.gaps == nil {
			h.gaps = map[string]Leaf{}
		}
		name := arg(t, d, "name", "")
		h.gaps[name] = Leaf{First: argU(t, d, "first", 0), End: argU(t, d, "end", 0), Gap: true}
		return "ok\n"
	case "corrupt":
		o, i := h.objects[arg(t, d, "key", "")], int(argU(t, d, "chunk", 0))
		switch arg(t, d, "field", "data") {
		case "data":
			o.corrupt(i)
		case "timestamp":
			o.corruptTimestamp(i)
		case "index":
			o.corruptIndex(i)
		case "records":
			o.corruptHeader(i, 7)
		case "trailer":
			o.corruptHeader(i, 43)
		default:
			t.Fatalf("corrupt: unknown field")
		}
		return "ok\n"
	case "init":
		cfg := Config{
			RangeSize: int64(argU(t, d, "range", 0)), MaxConcurrency: int(argU(t, d, "ceiling", 0)),
			Budget: int64(argU(t, d, "budget", 0)), LeavesAhead: int(argU(t, d, "ahead", 0)),
			MaxNotFound: int(argU(t, d, "max-not-found", 0)), StartConcurrency: int(argU(t, d, "start", 0)),
		}
		c, err := New(cfg, argU(t, d, "from", 0))
		if err != nil {
			return "error: " + err.Error() + "\n"
		}
		h.c = c
		h.manualIndex = arg(t, d, "index", "") == "manual"
		if d.HasArg("c") { // start the search elsewhere than one, to show several GETs in flight
			c.srch.c = int(argU(t, d, "c", 1))
			c.srch.probing = false
		}
		effs = c.Start()
	case "leaves":
		ev := LeavesFetched{ID: argU(t, d, "id", 0), Done: d.HasArg("done"), First: argU(t, d, "first", 0), Next: argU(t, d, "next", 0), Outcome: outcome(t, d)}
		if ev.Outcome != OK {
			ev.Err = errors.New("injected " + ev.Outcome.String())
		}
		if l := arg(t, d, "list", ""); l != "" {
			for _, name := range strings.Split(l, ",") {
				if g, ok := h.gaps[name]; ok {
					ev.Leaves = append(ev.Leaves, g)
				} else if o, ok := h.objects[name]; ok {
					ev.Leaves = append(ev.Leaves, o.leaf())
				} else {
					t.Fatalf("leaves: unknown %q", name)
				}
			}
		}
		effs = h.c.Step(ev)
	case "get":
		ids, err := h.pick(d)
		if err != nil {
			return "error: " + err.Error() + "\n"
		}
		step := argDur(t, d, "step", 10*time.Millisecond)
		for _, id := range ids {
			g := h.gets[id]
			delete(h.gets, id)
			o := h.objects[g.Key]
			data := o.bytes[g.Off : g.Off+g.Len]
			if outcome(t, d) != OK {
				data = nil // a failure brings nothing, unless bytes= says what came first
			}
			if d.HasArg("bytes") {
				data = o.bytes[g.Off : g.Off+g.Len]
				data = data[:argU(t, d, "bytes", 0)]
			}
			ev := RangeDone{ID: id, Data: append([]byte(nil), data...), Outcome: outcome(t, d)}
			if ev.Outcome != OK {
				ev.Err = errors.New("injected " + ev.Outcome.String())
			}
			if d.HasArg("at") {
				h.now = argDur(t, d, "at", 0)
			} else {
				h.now += step
			}
			ev.At = h.now
			effs = append(effs, h.c.Step(ev)...)
			h.track(effs)
		}
	case "index":
		id := argU(t, d, "id", 0)
		if _, ok := h.indexes[id]; !ok {
			return fmt.Sprintf("error: index id=%d: not outstanding\n", id)
		}
		ev := IndexFetched{ID: id, Records: h.objects[h.indexes[id]].records, Outcome: outcome(t, d)}
		if ev.Outcome != OK {
			ev.Records, ev.Err = nil, errors.New("injected "+ev.Outcome.String())
		}
		delete(h.indexes, id)
		effs = h.c.Step(ev)
	case "timer":
		effs = h.c.Step(TimerFired{ID: argU(t, d, "id", 0)})
	case "consume":
		n := h.held
		if d.HasArg("bytes") {
			n = int64(argU(t, d, "bytes", 0))
		}
		h.held -= n
		effs = h.c.Step(Consumed{Bytes: n})
	case "budget":
		effs = h.c.Step(SetBudget{Bytes: int64(argU(t, d, "bytes", 0))})
	case "resume":
		effs = h.c.Step(Resume{})
	case "status":
		return h.c.Status().String() + "\n"
	default:
		t.Fatalf("unknown command %q", d.Cmd)
	}
	h.track(effs)
	if !h.manualIndex {
		effs = h.answerIndexes(effs)
	}
	return render(effs)
}

// answerIndexes answers every index fetch still outstanding in effs (and in what answering
// brings), appending the answer's line and its effects.
func (h *scenario) answerIndexes(effs []Effect) []Effect {
	effs = append([]Effect(nil), effs...) // the core reuses its slice at the next Step
	for i := 0; i < len(effs); i++ {
		f, ok := effs[i].(FetchIndex)
		if _, out := h.indexes[f.ID]; !ok || !out {
			continue
		}
		delete(h.indexes, f.ID)
		more := h.c.Step(IndexFetched{ID: f.ID, Records: h.objects[f.Key].records})
		h.track(more)
		effs = append(append(effs, indexAnswered{f.ID}), more...)
	}
	return effs
}

// pick is the gets a get command answers: id=N, or all outstanding ones in id order.
func (h *scenario) pick(d *datadriven.TestData) ([]uint64, error) {
	var ids []uint64
	for id := range h.gets {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	if d.HasArg("id") {
		id, _ := strconv.ParseUint(arg(nil, d, "id", ""), 10, 64)
		if _, ok := h.gets[id]; !ok {
			return nil, fmt.Errorf("get id=%d: not outstanding (outstanding: %v)", id, ids)
		}
		return []uint64{id}, nil
	}
	return ids, nil
}

func (h *scenario) track(effs []Effect) {
	for _, e := range effs {
		switch e := e.(type) {
		case Get:
			h.gets[e.ID] = e
		case Cancel:
			delete(h.gets, e.ID)
		case FetchIndex:
			h.indexes[e.ID] = e.Key
		case Deliver:
			h.held += int64(e.Item.Size())
			if e.Item.Kind == ItemChunk {
				o := h.objectOf(e.Item.Offset)
				if o == nil || !bytesEqual(o, e.Item) {
					panic(fmt.Sprintf("delivered chunk at %d differs from the object's", e.Item.Offset))
				}
			}
		}
	}
}

func (h *scenario) objectOf(id uint64) *testObject {
	for _, o := range h.objects {
		if id >= o.first && id < o.end {
			return o
		}
	}
	return nil
}

func bytesEqual(o *testObject, it Item) bool {
	for i, r := range o.records {
		if r.ChunkID == it.Offset {
			return string(o.chunks[i]) == string(it.Assemble(nil))
		}
	}
	return false
}

func render(effs []Effect) string {
	if len(effs) == 0 {
		return "(no effects)\n"
	}
	var b strings.Builder
	for _, e := range effs {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}

func outcome(t *testing.T, d *datadriven.TestData) Outcome {
	switch arg(t, d, "outcome", "ok") {
	case "ok":
		return OK
	case "retriable":
		return Retriable
	case "not-found":
		return NotFound
	case "fatal":
		return Fatal
	}
	t.Fatalf("unknown outcome")
	return 0
}

func arg(t *testing.T, d *datadriven.TestData, key, def string) string {
	for _, a := range d.CmdArgs {
		if a.Key == key {
			return strings.Join(a.Vals, ",")
		}
	}
	return def
}

func argU(t *testing.T, d *datadriven.TestData, key string, def uint64) uint64 {
	s := arg(t, d, key, "")
	if s == "" {
		return def
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("%s=%s: %v", key, s, err)
	}
	return n
}

func argDur(t *testing.T, d *datadriven.TestData, key string, def time.Duration) time.Duration {
	s := arg(t, d, key, "")
	if s == "" {
		return def
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s=%s: %v", key, s, err)
	}
	return v
}
