package shell_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors/internal/shell"
)

// BenchmarkTaskRoundTrip is one operation's overhead as its owner sees it: from the owner
// starting a task whose operation returns at once to the owner handling its result, as a
// child task actor (Spawn) and in an owned goroutine (Go). The remote reader pays it per
// range GET.
func BenchmarkTaskRoundTrip(b *testing.B) {
	for _, owned := range []bool{false, true} {
		name := "spawn"
		if owned {
			name = "go"
		}
		b.Run(name, func(b *testing.B) {
			sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
				return slog.New(shell.ZerologHandler{Log: zerolog.Nop()})
			}))
			defer sys.Shutdown()
			ctx, cancel := context.WithCancel(context.Background())
			wg := new(sync.WaitGroup)
			defer wg.Wait()
			defer cancel()
			out := make(chan any, 1)
			o := &taskOwner{ctx: ctx, out: out, tasks: shell.TaskSet{Log: zerolog.Nop()}, owned: owned, wg: wg}
			pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return o }))
			spec := shell.TaskSpec{Name: "nop", Timeout: time.Minute, Failed: failedWith,
				Run: func(context.Context) any { return "done" }}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				sys.Root.Send(pid, spec)
				if r := <-out; r != "done" {
					b.Fatalf("result %v", r)
				}
			}
		})
	}
}
