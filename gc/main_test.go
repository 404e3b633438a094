package gc_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine outlives them: every sweeper, etcd
// session and server must have stopped.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
