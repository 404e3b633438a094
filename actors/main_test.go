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
	// Example runs the embedded S3 endpoint (versitygw over fasthttp) in this process:
	// fasthttp's server-date ticker lives as long as the process, and its worker pool's
	// cleaner outlives the server by up to its idle period. Nothing of streamtier's own.
	// protoactor's dead-letter throttle starts a goroutine per throttle period that ends by
	// itself when the period passes (actor/throttler.go): one a stopping node's last dead
	// letter started may still be waiting when the last test ends.
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}
