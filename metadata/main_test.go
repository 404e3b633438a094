package metadata_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
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
