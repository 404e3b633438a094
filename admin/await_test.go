package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/admin"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
	"github.com/streamtier/streamtier/tiertest"
)

// postAwait posts an await with the raw query and decodes the answer.
func postAwait(t *testing.T, base, stream, query string) (int, http.Header, admin.AwaitResult) {
	t.Helper()
	code, h, r, err := tryAwait(base, stream, query)
	if err != nil {
		t.Fatal(err)
	}
	return code, h, r
}

// tryAwait is postAwait for goroutines other than the test's.
func tryAwait(base, stream, query string) (int, http.Header, admin.AwaitResult, error) {
	resp, err := http.Post(base+"/streams/"+stream+"/await?"+query, "", nil)
	if err != nil {
		return 0, nil, admin.AwaitResult{}, err
	}
	defer resp.Body.Close()
	var r admin.AwaitResult
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, nil, r, fmt.Errorf("await %s %s: HTTP %d, body not JSON: %v", stream, query, resp.StatusCode, err)
	}
	return resp.StatusCode, resp.Header, r, nil
}

// waitWaiters polls the stream's status until its reader holds n await waiters (the node
// offers no event for that).
func waitWaiters(t *testing.T, node *actors.Node, stream string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := node.Status(context.Background(), stream)
		if err == nil && st.Core.Waiters == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream %s: waiters %d (%v), want %d", stream, st.Core.Waiters, err, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAwaitEndpoint runs a real node on etcd and S3 (through a fault injector) and checks
// every answer of POST /streams/{id}/await: persisted (an offset and committed, with the
// manifest in etcd covering it by then), a declared gap (local retention outran uploads
// that S3 refused), a timeout, a stream removed while waiting, the admin server closing
// while waiting, and bad parameters each named.
func TestAwaitEndpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	be := tiertest.StartBackends(ctx, t, true)
	node, err := actors.Start(ctx, actors.Config{
		Stream: actors.StreamOptions{FragmentTargetSize: 32 << 10, PersistInterval: 50 * time.Millisecond, FragmentMaxAge: 100 * time.Millisecond,
			UploadRetryDelay: 20 * time.Millisecond, UploadRetryMaxDelay: 100 * time.Millisecond},
		Logger: zerolog.Nop(),
	}, be.Store, be.Meta)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Stop(context.Background())
	lg, err := segments.Open(t.TempDir(), segments.Options{MaxSegmentBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	other, err := segments.Open(t.TempDir(), segments.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for id, l := range map[string]*segments.Log{"s": lg, "t": other} {
		if err := node.AddStream(actors.StreamSpec{ID: id, Log: l, Epoch: 1}); err != nil {
			t.Fatal(err)
		}
	}
	a, err := admin.Start("127.0.0.1:0", admin.Options{Node: node, NodeID: "n", Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	g, err := loadgen.New(loadgen.Config{Seed: 11, MinDataBytes: 2000, MaxDataBytes: 6000})
	if err != nil {
		t.Fatal(err)
	}
	write := func(bytes int64) {
		t.Helper()
		if _, err := loadgen.Write(ctx, lg, g, loadgen.Limit{Bytes: bytes}, loadgen.WriteOptions{Commit: true}); err != nil {
			t.Fatal(err)
		}
	}

	// Nothing committed yet: committed has nothing to wait for.
	if code, _, r := postAwait(t, a.URL(), "s", "offset=committed"); code != 200 || !r.Persisted || !r.NothingCommitted {
		t.Fatalf("committed on an empty log: %d %+v", code, r)
	}

	for _, c := range []struct{ stream, query, naming string }{
		{"s", "", "offset: required"},
		{"s", "offset=", "offset: required"},
		{"s", "offset=-1", `offset "-1"`},
		{"s", "offset=next", `offset "next"`},
		{"s", "offset=5&timeout=soon", `timeout "soon"`},
		{"s", "offset=5&timeout=0s", `timeout "0s": must be above zero`},
		{"s", "offset=5&timeout=11m", `timeout "11m": at most 10m0s`},
		{"s", "offset=5&flush=maybe", `flush "maybe": want true or false`},
	} {
		code, _, r := postAwait(t, a.URL(), c.stream, c.query)
		if code != 400 || r.ErrorClass != admin.AwaitBadRequest || !strings.Contains(r.Error, c.naming) || r.Persisted || r.Retry {
			t.Errorf("await %q: %d %+v, want 400 bad_request naming %q", c.query, code, r, c.naming)
		}
	}
	if code, _, r := postAwait(t, a.URL(), "nope", "offset=1"); code != 404 || r.ErrorClass != admin.AwaitUnknownStream || !strings.Contains(r.Error, "this node runs s, t") {
		t.Errorf("unknown stream: %d %+v", code, r)
	}

	// A timeout: an offset the log never reaches.
	start := time.Now()
	code, _, r := postAwait(t, a.URL(), "s", "offset=1000000000&timeout=300ms")
	if code != 504 || r.ErrorClass != admin.AwaitTimeout || !r.Retry || r.Offset != 1e9 || !strings.Contains(r.Error, "not persisted within the timeout of 300ms") || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("timeout: %d %+v after %v", code, r, time.Since(start))
	}
	waitWaiters(t, node, "s", 0) // the timed-out waiter is forgotten

	// Persisted, through the client: committed resolves to the last committed offset.
	write(256 << 10)
	cl := admin.Client{Base: a.URL()}
	res, err := cl.Await(ctx, "s", admin.AwaitQuery{Offset: "committed", Timeout: 30 * time.Second})
	if err != nil || !res.Persisted || res.Offset != lg.NextOffset()-1 || res.Asked != "committed" || res.PersistedNext < res.Offset+1 {
		t.Fatalf("await committed (log next %d): %+v %v", lg.NextOffset(), res, err)
	}
	m, _, _, err := be.Meta.ReadManifest(ctx, "s")
	if err != nil || m.NextOffset <= res.Offset {
		t.Fatalf("answered persisted for %d, etcd's manifest next is %d (%v)", res.Offset, m.NextOffset, err)
	}
	persisted := m.NextOffset
	if res, err := cl.Await(ctx, "s", admin.AwaitQuery{Offset: "0", Timeout: time.Second}); err != nil || !res.Persisted {
		t.Fatalf("await 0: %+v %v", res, err)
	}

	// A declared gap: uploads refused, the local log's retention deletes what was not
	// uploaded, then uploads work again.
	be.Faults.Add(s3test.Rule{Method: "PUT", KeyRegexp: `.*`, Fault: s3test.FaultInternalError})
	write(512 << 10)
	if _, err := lg.ApplyRetention(segments.RetentionPolicy{MayDelete: func(segments.SegmentInfo) bool { return true }}, time.Now()); err != nil {
		t.Fatal(err)
	}
	lost := lg.FirstOffset()
	if lost <= persisted {
		t.Fatalf("retention left the log at %d, not above the persisted %d", lost, persisted)
	}
	write(128 << 10)
	be.Faults.Clear()
	if res, err := cl.Await(ctx, "s", admin.AwaitQuery{Offset: "committed", Timeout: 60 * time.Second}); err != nil || res.Offset != lg.NextOffset()-1 {
		t.Fatalf("await the end after the gap: %+v %v", res, err)
	}
	inGap := (persisted + lost) / 2
	code, _, r = postAwait(t, a.URL(), "s", fmt.Sprintf("offset=%d&timeout=5s", inGap))
	if code != 409 || r.ErrorClass != admin.AwaitInGap || r.Persisted || r.Retry || !strings.Contains(r.Error, "declared gap") {
		t.Fatalf("await %d inside the gap [%d,%d): %d %+v", inGap, persisted, lost, code, r)
	}
	_, err = cl.Await(ctx, "s", admin.AwaitQuery{Offset: fmt.Sprint(inGap)})
	var ae *admin.AwaitError
	if !errors.As(err, &ae) || ae.Status != 409 || ae.Result.ErrorClass != admin.AwaitInGap {
		t.Fatalf("client await in the gap: %v", err)
	}

	// A stream removed while an await waits on it.
	done := make(chan admin.AwaitResult, 1)
	go func() { // ends with the answer: the removal stops the waiter
		_, _, r, err := tryAwait(a.URL(), "t", "offset=1000&timeout=1m")
		if err != nil {
			r.Error = err.Error()
		}
		done <- r
	}()
	waitWaiters(t, node, "t", 1)
	if err := node.RemoveStream(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.ErrorClass != admin.AwaitStreamStopped || r.Persisted || !strings.Contains(r.Error, "stream stopped") {
		t.Fatalf("await on a removed stream: %+v", r)
	}

	// The admin server closing answers the awaits in flight instead of waiting them out.
	type answer struct {
		code int
		h    http.Header
		r    admin.AwaitResult
	}
	closed := make(chan answer, 1)
	go func() { // ends with the answer: Close ends the wait
		code, h, r, err := tryAwait(a.URL(), "s", "offset=1000000000&timeout=10m")
		if err != nil {
			r.Error = err.Error()
		}
		closed <- answer{code, h, r}
	}()
	waitWaiters(t, node, "s", 1)
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	if err := a.Close(cctx); err != nil {
		t.Fatalf("close with an await in flight: %v", err)
	}
	if ans := <-closed; ans.code != 503 || ans.r.ErrorClass != admin.AwaitUnavailable || !ans.r.Retry || ans.h.Get("Retry-After") == "" {
		t.Fatalf("await while the admin server closes: %d %+v", ans.code, ans.r)
	}
}

// undecidedNode is a real node whose await answers "undecided" (a group object that could
// not be read): the fault is injected, the rest is the node's.
type undecidedNode struct{ *actors.Node }

func (n undecidedNode) AwaitOffset(_ context.Context, id string, offset uint64) error {
	return fmt.Errorf("await_offset on %s: the group holding %d could not be read: %w", id, offset, actors.ErrAwaitUndecided)
}

func (n undecidedNode) Flush(ctx context.Context, id string, offset uint64) error {
	return n.AwaitOffset(ctx, id, offset)
}

// TestAwaitUndecided: an undecided answer is 503 with Retry-After, class undecided and
// retry set, the node's reason in the error.
func TestAwaitUndecided(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	be := tiertest.StartBackends(ctx, t, false)
	node := startNode(ctx, t, be.Store, be.Meta)
	addEmptyStream(t, node, "s")
	a, err := admin.Start("127.0.0.1:0", admin.Options{Node: undecidedNode{node}, NodeID: "n", Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	code, h, r := postAwait(t, a.URL(), "s", "offset=7")
	if code != 503 || r.ErrorClass != admin.AwaitUndecided || !r.Retry || h.Get("Retry-After") != "1" || !strings.Contains(r.Error, "could not be read") {
		t.Fatalf("undecided: %d %v %+v", code, h, r)
	}
}

// TestAwaitFlushesByDefault: the await endpoint flushes unless told not to: a quiet
// stream's tail, which the node on its own would cut only after an hour, is persisted at
// once; with flush=false the same await only waits, and times out.
func TestAwaitFlushesByDefault(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	be := tiertest.StartBackends(ctx, t, false)
	node, err := actors.Start(ctx, actors.Config{
		Stream: actors.StreamOptions{FragmentTargetSize: 64 << 20, FragmentMaxAge: time.Hour, PersistThreshold: 1000, PersistInterval: time.Hour},
		Logger: zerolog.Nop(),
	}, be.Store, be.Meta)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Stop(context.Background())
	lg, err := segments.Open(t.TempDir(), segments.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	if err := node.AddStream(actors.StreamSpec{ID: "quiet", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	a, err := admin.Start("127.0.0.1:0", admin.Options{Node: node, NodeID: "n", Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	g, err := loadgen.New(loadgen.Config{Seed: 3, MinDataBytes: 2000, MaxDataBytes: 6000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loadgen.Write(ctx, lg, g, loadgen.Limit{Bytes: 30 << 10}, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
	if code, _, r := postAwait(t, a.URL(), "quiet", "offset=committed&flush=false&timeout=300ms"); code != 504 || r.ErrorClass != admin.AwaitTimeout {
		t.Fatalf("await without a flush of a quiet tail: %d %+v, want a timeout (nothing cut for an hour)", code, r)
	}
	code, _, r := postAwait(t, a.URL(), "quiet", "offset=committed&timeout=30s")
	if code != 200 || !r.Persisted || r.PersistedNext != lg.NextOffset() {
		t.Fatalf("await (flush by default) of a quiet tail: %d %+v, want persisted through %d", code, r, lg.NextOffset())
	}
}
