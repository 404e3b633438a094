package read

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a goroutine outlives the tests: every remote reader, its
// actor system, tasks and timers were stopped.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
