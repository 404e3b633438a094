package actors

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/claim"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
)

// TestStartRetriesTransientClaimFailures: the S3 client's own retryer is off, so Start
// itself tries opening the key prefix again when the store answers 500 or 503 SlowDown
// (to the conditional-create probe and to the claim's read); the node starts, and says so.
func TestStartRetriesTransientClaimFailures(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{})
	log, buf := testLogger(t)
	w.Inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: `/probe/`, Fault: s3test.FaultInternalError, Count: 2})
	w.Inj.Add(s3test.Rule{Method: "GET", KeyRegexp: `/claim$`, Fault: s3test.FaultSlowDown, Count: 1})
	startNode(w, Config{Logger: log})
	if w.Inj.Hits() < 3 {
		t.Fatalf("the injector fired %d times, want 3: the test did not inject what it means to", w.Inj.Hits())
	}
	if n := buf.Count("opening the key prefix failed transiently"); n != 3 {
		t.Fatalf("want 3 warnings of a retried open, got %d", n)
	}
}

// TestStartRefusalIsNotRetried: an answer that will not change (403) fails the start at
// once, naming the store's refusal, instead of retrying until the resolve timeout.
func TestStartRefusalIsNotRetried(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{})
	log, buf := testLogger(t)
	w.Inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: `/probe/`, Fault: s3test.FaultForbidden})
	began := time.Now()
	n, err := Start(context.Background(), Config{Logger: log, ResolveTimeout: time.Minute}, w.Store, w.Meta)
	if err == nil {
		n.Stop(context.Background())
		t.Fatal("a node started on a store that refuses every write")
	}
	if !errors.Is(err, s3io.ErrNoConditionalCreate) && !errors.Is(err, claim.ErrRefused) || !strings.Contains(err.Error(), "AccessDenied") {
		t.Fatalf("want the store's refusal named, got %v", err)
	}
	if d := time.Since(began); d > 20*time.Second || buf.Count("retrying") != 0 {
		t.Fatalf("a refusal was retried (%v, %d retries logged)", d, buf.Count("retrying"))
	}
}
