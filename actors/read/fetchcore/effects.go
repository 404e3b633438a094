package fetchcore

import (
	"fmt"
	"time"
)

// Effect is one thing the shell must do, as a value. String is stable: scenarios print it.
type Effect interface {
	fmt.Stringer
	isEffect()
}

// NeedLeaves asks the shell for the leaves from the one holding From on (a few: the shell
// chooses how many). Fresh asks it to re-read the freshest manifest first (at the end of the
// known leaves, after a 404); otherwise it goes on walking the manifest it walks.
type NeedLeaves struct {
	ID    uint64
	From  uint64
	Fresh bool
}

// Get asks for Len bytes of object Key at object position Off; the answer is RangeDone ID.
type Get struct {
	ID  uint64
	Key string
	Off int64
	Len int64
}

// Cancel abandons Get ID (its object was dropped from the read): its answer is ignored.
type Cancel struct{ ID uint64 }

// FetchIndex asks for the index records of object Key, whose chunk region holds Size bytes:
// the read starts inside it. The answer is IndexFetched ID.
type FetchIndex struct {
	ID   uint64
	Key  string
	Size uint64
}

// ArmTimer asks for TimerFired ID after After: a backoff before a retry.
type ArmTimer struct {
	ID    uint64
	After time.Duration
}

// Release says the buffer of RangeDone ID is free: neither the core nor a delivered chunk
// the consumer may still hold refers to its bytes (the consumer said, by Consumed, that it
// is done with every chunk cut from it). The shell may reuse it for another range. Each
// RangeDone the core received is released at most once; one held when the read fails or
// is cancelled is never released (it is left to the garbage collector). With Copy, ID
// names the shell's copy of a chunk across responses (Item.Copy), released the same way
// once the consumer is done with that chunk.
type Release struct {
	ID   uint64
	Copy bool
}

// Deliver hands Item to the consumer. A chunk across responses comes as Item.Parts: the
// shell copies them before it executes the next effect.
type Deliver struct{ Item Item }

// End says everything below At, the freshest manifest's next offset, is delivered.
type End struct{ At uint64 }

// Fail says the read cannot go on without losing data; the core does nothing more.
type Fail struct{ Err error }

func (NeedLeaves) isEffect() {}
func (Get) isEffect()        {}
func (Cancel) isEffect()     {}
func (FetchIndex) isEffect() {}
func (ArmTimer) isEffect()   {}
func (Release) isEffect()    {}
func (Deliver) isEffect()    {}
func (End) isEffect()        {}
func (Fail) isEffect()       {}

func (e NeedLeaves) String() string {
	return fmt.Sprintf("need-leaves id=%d from=%d fresh=%t", e.ID, e.From, e.Fresh)
}
func (e Get) String() string {
	return fmt.Sprintf("get id=%d key=%s off=%d len=%d", e.ID, e.Key, e.Off, e.Len)
}
func (e Cancel) String() string { return fmt.Sprintf("cancel id=%d", e.ID) }
func (e FetchIndex) String() string {
	return fmt.Sprintf("fetch-index id=%d key=%s size=%d", e.ID, e.Key, e.Size)
}
func (e ArmTimer) String() string { return fmt.Sprintf("arm-timer id=%d after=%s", e.ID, e.After) }
func (e Deliver) String() string  { return "deliver " + e.Item.String() }
func (e Release) String() string {
	if e.Copy {
		return fmt.Sprintf("release copy=%d", e.ID)
	}
	return fmt.Sprintf("release id=%d", e.ID)
}
func (e End) String() string  { return fmt.Sprintf("end at=%d", e.At) }
func (e Fail) String() string { return "fail: " + e.Err.Error() }
