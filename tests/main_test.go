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
	goleak.VerifyTestMain(m)
}
