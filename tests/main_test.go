package tests

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives the tests: every node was stopped,
// so nothing a node started may still run (Node.Stop returns when all have ended).
func TestMain(m *testing.M) {
	if cfg := os.Getenv(crashChildEnv); cfg != "" {
		os.Exit(runCrashChild(cfg))
	}
	// protoactor's dead-letter throttle starts a goroutine per throttle period that ends by
	// itself when the period passes (actor/throttler.go): one a stopping node's last dead
	// letter started may still be waiting when the last test ends.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}
