package actors

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a goroutine outlives the tests: every node, actor system,
// task and timer was stopped. A cluster test's child process (see isolated) is checked by
// its exit status only: protoactor remote may leave goroutines behind in it.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(m)
}
