package fetchcore

import (
	"fmt"
	"time"

	"github.com/streamtier/streamtier/chunk"
	"github.com/streamtier/streamtier/fragment"
)

// Outcome classifies how a request the core asked for ended.
type Outcome uint8

// Outcomes of a request.
const (
	// OK: the request was answered (a range may still be short: Data says how much came).
	OK Outcome = iota
	// Retriable: a fault retrying can fix (5xx, throttling, reset, timeout, truncated body).
	Retriable
	// NotFound: the object is gone (404, or no key names the entry): remote retention raced
	// the read, or the manifest is stale.
	NotFound
	// Fatal: retrying cannot fix it (403, a corrupt object, a manifest that does not decode).
	Fatal
)

// String names the outcome as scenarios print it.
func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Retriable:
		return "retriable"
	case NotFound:
		return "not-found"
	case Fatal:
		return "fatal"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Leaf is one live leaf of the manifest as the shell found it: a fragment object whose key
// it located, or a declared gap. [First, End) is the offsets it covers.
type Leaf struct {
	First, End uint64
	Gap        bool
	Key        string // "" for a gap, or for a fragment no key names (treated as a 404)
	Size       uint64 // the fragment's chunk-region bytes S (0 for a gap)
}

// Event is something that happened, fed to Step.
type Event interface{ isEvent() }

// LeavesFetched answers NeedLeaves ID: leaves in order from the one holding From (or, after
// a refresh, the first live one when From is below the manifest's first offset), Done when
// the manifest holds none after them, and the manifest's first and next offset.
type LeavesFetched struct {
	ID          uint64
	Leaves      []Leaf
	Done        bool
	First, Next uint64
	Outcome     Outcome
	Err         error
}

// RangeDone answers Get ID: Data is what arrived, from Off on, possibly less than asked
// (a short read, or a body cut mid-way: then Outcome says why). At is the shell's monotonic
// time of the completion: the concurrency search measures the rate with it. Data's buffer is
// lent to the core: the core hands it back with Release ID (chunks delivered from it are
// sub-slices of it until then).
type RangeDone struct {
	ID      uint64
	Data    []byte
	Outcome Outcome
	Err     error
	At      time.Duration
}

// IndexFetched answers FetchIndex ID with the object's index records.
type IndexFetched struct {
	ID      uint64
	Records []fragment.IndexRecord
	Outcome Outcome
	Err     error
}

// TimerFired says the timer ArmTimer ID armed has fired.
type TimerFired struct{ ID uint64 }

// Consumed says the consumer is done with Bytes of delivered chunks, in delivery order:
// room in the budget again, and the buffers those chunks were cut from may be reused.
type Consumed struct{ Bytes int64 }

// SetBudget changes the budget (the node's read budget was divided anew).
type SetBudget struct{ Bytes int64 }

// Resume asks the core to go on after it reported End: it refreshes the manifest and either
// delivers what the remote tier gained meanwhile or reports End again.
type Resume struct{}

func (LeavesFetched) isEvent() {}
func (RangeDone) isEvent()     {}
func (IndexFetched) isEvent()  {}
func (TimerFired) isEvent()    {}
func (Consumed) isEvent()      {}
func (SetBudget) isEvent()     {}
func (Resume) isEvent()        {}

// ItemKind says what a delivered Item is.
type ItemKind uint8

// Kinds of items, delivered in offset order.
const (
	ItemChunk ItemKind = iota + 1
	ItemGap
	ItemSkipped
)

// Item is one thing delivered: a whole verified chunk, a declared gap, or a range retention
// removed while the read was on its way. [Offset, End) of consecutive items tile the
// offsets read (the first chunk of a read may start below the offset asked for: it is the
// chunk holding it).
type Item struct {
	Kind   ItemKind
	Offset uint64
	End    uint64
	Header chunk.Header // ItemChunk only
	// Chunk is the chunk's bytes as written (ItemChunk only), a sub-slice of one response's
	// buffer; nil when the chunk spans several responses: then Parts holds it.
	Chunk []byte
	// Parts is a chunk across responses (ItemChunk only): its bytes in order, sub-slices of
	// the buffers of the responses it spans. They are valid only while the shell executes
	// this Deliver (a Release after it in the same step may free those buffers): the shell
	// copies them into a buffer of its own and lends it to the consumer as the chunk, until
	// the core says Release{ID: Copy, Copy: true}.
	Parts [][]byte
	// Copy names the shell's copy of Parts (ids of their own, from 1).
	Copy uint64
}

// Size is a chunk's length in bytes (of Chunk or of Parts together); 0 for other items.
func (it Item) Size() int {
	if it.Parts == nil {
		return len(it.Chunk)
	}
	n := 0
	for _, p := range it.Parts {
		n += len(p)
	}
	return n
}

// Assemble returns the chunk's bytes: Chunk, or Parts copied in order into dst (grown when
// it is too short).
func (it Item) Assemble(dst []byte) []byte {
	if it.Parts == nil {
		return it.Chunk
	}
	dst = dst[:0]
	for _, p := range it.Parts {
		dst = append(dst, p...)
	}
	return dst
}

// String is the scenario form: kind and offsets, and a chunk's size.
func (it Item) String() string {
	switch it.Kind {
	case ItemChunk:
		return fmt.Sprintf("chunk [%d,%d) bytes=%d", it.Offset, it.End, it.Size())
	case ItemGap:
		return fmt.Sprintf("gap [%d,%d)", it.Offset, it.End)
	case ItemSkipped:
		return fmt.Sprintf("skipped [%d,%d)", it.Offset, it.End)
	}
	return fmt.Sprintf("item(%d) [%d,%d)", it.Kind, it.Offset, it.End)
}
