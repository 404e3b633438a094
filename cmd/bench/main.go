// Command bench runs streamtier against its baseline in one process, interleaved round by
// round (A B A B ...) so that the machine's drift hits both, and prints each figure's
// minimum, median and maximum and the per-round ratios. Subcommands:
//
//	go run ./cmd/bench upload   [flags]  tiering throughput vs raw PutObject of the same objects
//	go run ./cmd/bench idle     [flags]  memory, goroutines, descriptors and CPU of idle streams
//	go run ./cmd/bench latency  [flags]  commit-to-persisted latency vs an ideal single PUT
//	go run ./cmd/bench requests [flags]  S3 requests per GiB by kind vs raw PutObject
//	go run ./cmd/bench read     [flags]  remote read throughput through a node vs raw range GETs
//	go run ./cmd/bench recover  [flags]  node recover --yes after an etcd wipe vs raw listing
//
// `go run ./cmd/bench <subcommand> -h` lists a subcommand's flags; docs/performance.md
// explains how to read the output.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/rs/zerolog"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

// subcommand is one benchmark: its name, one line of help and its body, which parses its own
// flags from args and prints its report to stdout.
type subcommand struct {
	name string
	help string
	run  func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var subcommands = []subcommand{
	{"upload", "tiering throughput of one or more streams vs raw PutObject of the same objects", runUpload},
	{"idle", "idle cost per stream (RSS, heap, goroutines, descriptors, CPU) vs the node without them", runIdle},
	{"latency", "commit-to-persisted latency at a write rate vs an ideal tierer's single PUT", runLatency},
	{"requests", "S3 requests per GiB tiered, by kind, vs raw PutObject of the same objects", runRequests},
	{"recover", "node recover --yes of every stream after an etcd wipe vs raw listing of the same prefixes", runRecover},
	{"read", "remote read throughput through a node (OpenReader from first) vs raw parallel range GETs of the same objects", runRead},
}

func main() {
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00" // milliseconds: a round's steps are that close
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// errUsage marks an error in the command line: it is printed with the usage hint and exits 2.
var errUsage = errors.New("usage")

// run dispatches to a subcommand and maps its outcome to an exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, sc := range subcommands {
		if sc.name != args[0] {
			continue
		}
		err := sc.run(ctx, args[1:], stdout, stderr)
		switch {
		case err == nil:
			return exitOK
		case errors.Is(err, flag.ErrHelp):
			return exitOK
		case errors.Is(err, errUsage):
			fmt.Fprintf(stderr, "bench %s: %v (see bench %s -h)\n", sc.name, err, sc.name)
			return exitUsage
		default:
			fmt.Fprintf(stderr, "bench %s: %v\n", sc.name, err)
			return exitFailed
		}
	}
	fmt.Fprintf(stderr, "bench: unknown subcommand %q\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: go run ./cmd/bench <subcommand> [flags]")
	for _, sc := range subcommands {
		fmt.Fprintf(w, "  %-9s %s\n", sc.name, sc.help)
	}
	fmt.Fprintln(w, "`bench <subcommand> -h` lists its flags; docs/performance.md says how to read the output.")
}
