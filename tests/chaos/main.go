// Command chaos is the soak of the whole system under faults: it runs the real node binary
// on a three-member etcd cluster and a real S3 server that it owns, writes the streams'
// local logs with the deterministic load, injects the faults a seeded schedule draws (node
// kills, S3 storms, etcd member and cluster restarts, gc, retention changes, lost tails, a
// broker's retention outrunning the upload, forced cuts, a replica cutting a deposed
// leader's suffix, retention racing a behind log), and has an independent checker
// judge the bucket and the etcd records after every cycle and at the end. See docs/soak.md.
//
//	go run ./tests/chaos [--seed N] [--duration D] [--streams K] [--dir DIR] [--keep] [-v] [--avoid-known-bugs]
//	                     [--weight KIND=N]... [--rewind-percent P] [--broker-percent P]
//
// It exits 0 when no violation was found, 1 when one was, 2 when the harness could not run.
package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/streamtier/streamtier/tests/chaos/faults"
	"github.com/streamtier/streamtier/tests/chaos/harness"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	seed := fs.Uint64("seed", 0, "seed of the fault schedule and the load (0: a random one, printed)")
	duration := fs.Duration("duration", 2*time.Minute, "how long cycles keep starting")
	streams := fs.Int("streams", 3, "streams tiered at once")
	dir := fs.String("dir", "", "work directory (kept); default a temporary one, removed after a clean run")
	keep := fs.Bool("keep", false, "keep the work directory after a clean run")
	nodeBin := fs.String("node-bin", "", "a built node binary (default: build github.com/streamtier/streamtier/cmd/node)")
	verbose := fs.Bool("v", false, "print the history (faults, starts, checks) as it happens")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	lag := fs.Duration("lag-bound", 90*time.Second, "after the faults stop, every stream must have persisted its whole log within this")
	avoid := fs.Bool("avoid-known-bugs", false, "keep off the faults that trip known, unfixed bugs (docs/soak.md); the CI soak sets it")
	weights := map[faults.Kind]int{}
	fs.Func("weight", "KIND=N: the relative frequency of a fault kind (repeatable; 0 never); the kinds: "+kindNames(), func(v string) error {
		k, n, ok := strings.Cut(v, "=")
		w, err := strconv.Atoi(n)
		if !ok || err != nil || w < 0 || !slices.Contains(faults.Kinds, faults.Kind(k)) {
			return fmt.Errorf("want KIND=N with a known kind and N >= 0, got %q", v)
		}
		weights[faults.Kind(k)] = w
		return nil
	})
	rewind := fs.Int("rewind-percent", -1, "chance (0-100) that a cycle also holds an etcd wipe or snapshot restore (-1: the default)")
	broker := fs.Int("broker-percent", -1, "chance (0-100) that a cycle also holds a broker rewrite: a deposed tail or retention racing a behind stream (-1: the default)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *seed == 0 {
		var b [8]byte
		rand.Read(b[:])
		*seed = binary.BigEndian.Uint64(b[:]) >> 1
	}
	cfg := harness.Config{Seed: *seed, Duration: *duration, Streams: *streams, Dir: *dir, Keep: *keep, NodeBin: *nodeBin,
		Progress: stderr, LagBound: *lag, AvoidKnownBugs: *avoid, Schedule: faults.DefaultOptions(*streams)}
	cfg.Schedule.Weights = maps.Clone(faults.DefaultWeights)
	maps.Copy(cfg.Schedule.Weights, weights)
	if *rewind >= 0 {
		cfg.Schedule.RewindPercent = min(*rewind, 100)
	}
	if *broker >= 0 {
		cfg.Schedule.BrokerPercent = min(*broker, 100)
	}
	if *verbose {
		cfg.Live = stderr
	}
	fmt.Fprintf(stderr, "chaos: seed %d (replay with --seed %d)\n", *seed, *seed)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := harness.Run(ctx, cfg)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	} else {
		rep.Print(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "chaos: %v\n", err)
	}
	return exitCode(rep, err)
}

// kindNames lists the fault kinds for the usage text.
func kindNames() string {
	var out []string
	for _, k := range faults.Kinds {
		out = append(out, string(k))
	}
	return strings.Join(out, ", ")
}

// exitCode is the process's exit status: 2 when the harness could not run (whatever it
// found before), 1 when the checker found a violation, 0 otherwise.
func exitCode(rep harness.Report, err error) int {
	switch {
	case err != nil:
		return 2
	case len(rep.Violations) > 0:
		return 1
	}
	return 0
}
