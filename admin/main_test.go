package admin_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine outlives them: every node, admin
// server, probe and sweeper must have stopped. The examples run the embedded S3 endpoint
// (versitygw over fasthttp) in this process: fasthttp's server-date ticker lives as long as
// the process, and its worker pool's cleaner outlives the server by up to its idle period.
// protoactor's dead-letter throttle starts a goroutine per throttle period that ends by
// itself when the period passes (actor/throttler.go): one the examples' stopping node
// started may still be waiting when the last test ends. Nothing of streamtier's own.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}
