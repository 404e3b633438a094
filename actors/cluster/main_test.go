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
	// protoactor's dead-letter throttle starts a goroutine per throttle period that ends by
	// itself when the period passes (actor/throttler.go): one a stopping node's last dead
	// letter started may still be waiting when the last test ends.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}
