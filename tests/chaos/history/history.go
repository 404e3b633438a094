// Package history records what happened during a chaos soak: every fault the harness
// injected, every node start and stop, every persist observed in etcd and every check, each
// with its time, so that a violation can be shown with the events that led to it.
package history

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
)

// Event is one entry of the history.
type Event struct {
	Seq    int           `json:"seq"`
	At     time.Duration `json:"at_ns"` // since the history started
	Cycle  int           `json:"cycle"`
	Kind   string        `json:"kind"`
	Stream string        `json:"stream,omitempty"` // empty: the whole system
	Fault  bool          `json:"fault,omitempty"`  // an injected fault (counted by kind)
	Detail string        `json:"detail"`
}

// String formats the event on one line.
func (e Event) String() string {
	s := e.Stream
	if s == "" {
		s = "-"
	}
	mark := " "
	if e.Fault {
		mark = "!"
	}
	return fmt.Sprintf("#%-6d %9.3fs c%-4d %s %-22s %-4s %s", e.Seq, e.At.Seconds(), e.Cycle, mark, e.Kind, s, e.Detail)
}

// History is an append-only, concurrency-safe list of events.
type History struct {
	mu     sync.Mutex
	start  time.Time
	events []Event
	live   io.Writer // every event is also written here as it happens (nil: none)
	quiet  map[string]bool
}

// New starts a history at start. live, when not nil, receives each event as a line, except
// those of the kinds in quiet (frequent observations).
func New(start time.Time, live io.Writer, quiet ...string) *History {
	h := &History{start: start, live: live, quiet: map[string]bool{}}
	for _, k := range quiet {
		h.quiet[k] = true
	}
	return h
}

// Start is when the history began.
func (h *History) Start() time.Time { return h.start }

// Add records an event and returns it.
func (h *History) Add(cycle int, kind, stream string, fault bool, format string, args ...any) Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := Event{Seq: len(h.events), At: time.Since(h.start), Cycle: cycle, Kind: kind, Stream: stream, Fault: fault, Detail: fmt.Sprintf(format, args...)}
	h.events = append(h.events, e)
	if h.live != nil && !h.quiet[kind] {
		fmt.Fprintln(h.live, e.String())
	}
	return e
}

// Events is a copy of every event so far.
func (h *History) Events() []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Event(nil), h.events...)
}

// Len is the number of events so far.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.events)
}

// Slice is what led to event seq: the last n events before it (and it) that concern stream
// or the whole system, plus every fault of the cycle it happened in and the one before.
func (h *History) Slice(seq int, stream string, n int) []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	if seq >= len(h.events) {
		seq = len(h.events) - 1
	}
	if seq < 0 {
		return nil
	}
	cycle := h.events[seq].Cycle
	picked := map[int]bool{}
	var out []Event
	for i := seq; i >= 0; i-- {
		e := h.events[i]
		recent := len(out) < n && (e.Stream == "" || stream == "" || e.Stream == stream)
		faultNear := e.Fault && e.Cycle >= cycle-1
		if (recent || faultNear) && !picked[i] {
			picked[i] = true
			out = append(out, e)
		}
		if len(out) >= n && e.Cycle < cycle-1 {
			break
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out
}

// FaultCounts counts the injected faults by kind.
func (h *History) FaultCounts() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for _, e := range h.events {
		if e.Fault {
			out[e.Kind]++
		}
	}
	return out
}

// Format writes events one per line, indented.
func Format(w io.Writer, events []Event, indent string) {
	var b strings.Builder
	for _, e := range events {
		b.WriteString(indent)
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	io.WriteString(w, b.String())
}
