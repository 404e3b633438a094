package actors

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/streamtier/streamtier/actors/internal/actortest"
)

// TestMain fails the package if a goroutine outlives the tests: every node, actor system,
// task and timer was stopped. A test's child process (see actortest.Isolated) is checked by
// its exit status only.
func TestMain(m *testing.M) {
	if os.Getenv(actortest.ChildEnv) != "" {
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(m)
}
