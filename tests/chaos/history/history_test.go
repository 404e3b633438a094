package history

import (
	"testing"
	"time"
)

// TestSlice checks that a violation's slice holds the recent events of its stream and of
// the whole system, and every fault of its cycle and the one before, in order.
func TestSlice(t *testing.T) {
	h := New(time.Now(), nil)
	h.Add(0, "node-kill", "", true, "old fault")     // 0: two cycles back: left out
	h.Add(1, "s3-storm", "s1", true, "other stream") // 1: a fault of the cycle before: kept
	h.Add(2, "append", "s1", false, "other stream")  // 2: another stream's note: left out
	h.Add(2, "append", "s0", false, "mine")          // 3
	h.Add(2, "node-start", "", false, "system")      // 4
	v := h.Add(2, "VIOLATION", "s0", false, "bad")   // 5
	got := h.Slice(v.Seq, "s0", 3)
	var seqs []int
	for _, e := range got {
		seqs = append(seqs, e.Seq)
	}
	if want := []int{1, 3, 4, 5}; len(seqs) != len(want) || seqs[0] != 1 || seqs[1] != 3 || seqs[2] != 4 || seqs[3] != 5 {
		t.Fatalf("slice %v, want %v", seqs, want)
	}
	if c := h.FaultCounts(); c["node-kill"] != 1 || c["s3-storm"] != 1 || len(c) != 2 {
		t.Fatalf("fault counts %v", c)
	}
}
