package s3io_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine outlives them: every bucket probe and
// server must have stopped.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
