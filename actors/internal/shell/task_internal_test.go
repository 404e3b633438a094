package shell

import "testing"

// TestTaskSetDropsItsMapWhenEmpty: once no operation is waited for, the set holds no map
// (an idle reader kept the buckets of its resolution's map for its whole life).
func TestTaskSetDropsItsMapWhenEmpty(t *testing.T) {
	var tm Timers
	s := TaskSet{live: map[uint64]liveTask{
		1: {name: "resolve"},
		2: {name: "retention", failed: func(reason string) any { return reason }},
	}}
	if !s.Settle(&tm, 1) {
		t.Fatal("operation 1 not waited for")
	}
	if s.live == nil {
		t.Fatal("map dropped while operation 2 is waited for")
	}
	if _, _, ok := s.Overdue(TaskOverdue{ID: 2}); !ok {
		t.Fatal("operation 2 not waited for")
	}
	if s.live != nil {
		t.Fatalf("empty set keeps its map (%d entries)", len(s.live))
	}
	if s.Settle(&tm, 2) {
		t.Fatal("operation 2 settled twice")
	}
}
