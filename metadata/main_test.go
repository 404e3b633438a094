package metadata_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
)

// TestMain fails the package's tests if any goroutine outlives them: every watcher,
// registration, client and embedded server must have stopped. Nothing is ignored.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testCtx is a context for one test step, canceled when the test ends.
func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// anchored starts an etcd, a store on it and a context of d, and anchors stream s1: the
// opening of most tests here.
func anchored(t *testing.T, d time.Duration) (*metadata.Embedded, *metadata.Store, context.Context) {
	t.Helper()
	e := etcdtest.Start(t)
	s := etcdtest.Store(t, e)
	ctx := testCtx(t, d)
	if err := s.Anchor(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	return e, s, ctx
}
