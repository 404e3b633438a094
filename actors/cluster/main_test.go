package cluster

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/streamtier/streamtier/actors/internal/actortest"
)

// TestMain fails the package if a goroutine outlives the tests. A test's child process (see
// actortest.Isolated) is checked by its exit status only: protoactor remote may leave
// goroutines behind in it.
func TestMain(m *testing.M) {
	if os.Getenv(actortest.ChildEnv) != "" {
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(m)
}
