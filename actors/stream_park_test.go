package actors

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// TestParkedStreamComesBack: a reader that fails every time it starts (an injected fault)
// is restarted with the doubling delay until the delay reaches its ceiling; then the
// stream is parked: status says so with the failure and the next retry, commands are
// refused with the reason, and no restart happens before the retry interval. A retry that
// fails parks it again at once. Once the fault is gone, the next periodic retry brings the
// reader back and everything committed meanwhile is persisted, without an operator.
func TestParkedStreamComesBack(t *testing.T) {
	w := newWorld(t, worldOptions{})
	log, logs := testLogger(t)
	clock := newManualClock()
	var broken atomic.Bool
	const retry = 5 * time.Minute
	n := startNode(w, Config{Logger: log, clock: clock, ParkRetryInterval: retry, faults: &faultHooks{reader: func(msg any) {
		if _, ok := msg.(*actor.Started); ok && broken.Load() {
			panic("injected: the reader cannot start")
		}
	}}, Stream: StreamOptions{FragmentTargetSize: 16 << 10, PersistThreshold: 1, PersistInterval: 50 * time.Millisecond}})
	lg := openLog(t, segments.Options{})
	writeLog(t, lg, 4, loadgen.Limit{Bytes: 40 << 10})
	broken.Store(true)
	if err := n.AddStream(StreamSpec{ID: "pk", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	h, _ := n.handle("pk")
	// Restart after restart on the clock, until the stream is parked.
	var delays []time.Duration
	for {
		if _, ok := h.parkedState(); ok {
			break
		}
		d := clock.AwaitTimer(t, retry, "a restart or the park retry")
		if _, ok := h.parkedState(); ok {
			break
		}
		if d >= retry {
			t.Fatalf("a timer of %v armed and the stream is not parked", d)
		}
		delays = append(delays, d)
		clock.Advance(d)
		if len(delays) > 20 {
			t.Fatalf("never parked after restarts at %v", delays)
		}
	}
	if len(delays) < 5 || delays[len(delays)-1] >= restartCeiling {
		t.Fatalf("parked after restarts at %v: want the doubling delays below the %v ceiling first", delays, restartCeiling)
	}
	st, err := n.Status(context.Background(), "pk")
	if err != nil || st.Phase != "parked" || st.Parked == nil || !strings.Contains(st.Parked.Reason, "the reader cannot start") ||
		!st.Parked.RetryAt.Equal(st.Parked.Since.Add(retry)) || st.Parked.Failures < 5 {
		t.Fatalf("status of the parked stream: %+v %+v, %v", st, st.Parked, err)
	}
	if err := n.ForceCut("pk"); err == nil || !strings.Contains(err.Error(), "parked") {
		t.Fatalf("cut of a parked stream: %v", err)
	}
	// The supervisor counts and logs the park right after it publishes the parked state.
	until(t, 5*time.Second, "the park counted and logged once", func() (bool, string) {
		p, l := n.Metrics().Parks.Load(), logs.Count("stream parked")
		return p == 1 && l == 1, fmt.Sprintf("parks %d, log lines %d", p, l)
	})
	since := st.Parked.Since
	failures := h.restarts.Load()
	if d := clock.AwaitTimer(t, retry, "park retry"); d != retry {
		t.Fatalf("the next timer is in %v, want the retry in %v", d, retry)
	}
	clock.Advance(retry - time.Second)
	if h.restarts.Load() != failures {
		t.Fatal("the parked reader was restarted before the retry interval")
	}

	// A retry while the fault persists: parked again at once, from the first park's time.
	clock.Advance(time.Second)
	until(t, 10*time.Second, "parked again after a failed retry", func() (bool, string) {
		p, ok := h.parkedState()
		return ok && h.restarts.Load() == failures+1 && p.since.Equal(since), fmt.Sprintf("parked %v, %d failures", ok, h.restarts.Load())
	})
	if n.Metrics().Parks.Load() != 1 || n.Metrics().ParkRetries.Load() != 1 {
		t.Fatalf("parks %d retries %d", n.Metrics().Parks.Load(), n.Metrics().ParkRetries.Load())
	}

	// The cause goes away; data keeps coming; the next retry resumes the stream.
	broken.Store(false)
	writeLog(t, lg, 5, loadgen.Limit{Bytes: 40 << 10})
	clock.AwaitTimer(t, retry, "park retry")
	clock.Advance(retry)
	until(t, 10*time.Second, "reader running after the retry", func() (bool, string) { return running(n, "pk") })
	if _, ok := h.parkedState(); ok || h.retrying() {
		t.Fatal("still parked after the reader resolved")
	}
	persisted(t, n, "pk", lg.NextOffset(), 20*time.Second)
}
