package admin_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine outlives them: every node, admin
// server, probe and sweeper must have stopped.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
