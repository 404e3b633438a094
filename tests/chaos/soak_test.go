package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/tests/chaos/check"
	"github.com/streamtier/streamtier/tests/chaos/harness"
)

// soakSeed is the CI soak's fixed seed: the same fault schedule on every run. Its first
// cycles hold three lost tails that fork (cycles 2, 3 and 5: the broker writes another
// timeline from the cut on) besides two that refill with the same chunks; the earlier seed,
// 20261425, drew no fork in two minutes.
const soakSeed = 70

// TestSoak is the short soak CI runs: about two minutes of the seeded fault schedule on
// the real node binary (built without the race detector, so that it runs at speed),
// then the final catch-up and the checks. It fails on any violation and prints the report.
// The fault the soak's first bug needed (a lost tail inside a fragment) is in the schedule:
// that bug is fixed (docs/soak.md). At least one fork must have been followed by the remote
// tier (a divergence truncation judged by the checker), and the broker must have appended
// chunks while the node ran (the node follows the logs), or the soak proved too little.
func TestSoak(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	bin, err := harness.BuildNode(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	started := time.Now()
	rep, err := harness.Run(ctx, harness.Config{Seed: soakSeed, Duration: 2 * time.Minute, Streams: 3, NodeBin: bin,
		Progress: &progress})
	var out strings.Builder
	rep.Print(&out)
	t.Logf("soak of %v:\n%s", time.Since(started).Round(time.Second), out.String())
	if err != nil {
		t.Fatalf("the soak could not run: %v\n%s", err, progress.String())
	}
	if len(rep.Violations) > 0 {
		t.Fatalf("%d violations (replay: go run ./tests/chaos --seed %d --duration 2m)", len(rep.Violations), soakSeed)
	}
	if rep.Cycles < 5 || rep.Check.ChunksCompared == 0 || rep.Check.Acks == 0 || rep.Check.ForksFollowed == 0 {
		t.Fatalf("the soak did too little to prove anything: %d cycles, %+v", rep.Cycles, rep.Check)
	}
	if rep.Appends.LiveChunks == 0 {
		t.Fatalf("the broker appended no chunk while the node ran (%+v): the node followed nothing", rep.Appends)
	}
}

// TestExitCodes checks the command's exit status: 2 for a harness that could not run (a bad
// flag here, before anything starts), 1 for a violation, 0 for a clean soak.
func TestExitCodes(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"--no-such-flag"}, &out, &errOut); code != 2 {
		t.Fatalf("a bad flag: exit %d, want 2", code)
	}
	v := harness.Report{Violations: []check.Violation{{Rule: "bytes-differ"}}}
	for _, c := range []struct {
		rep  harness.Report
		err  error
		want int
	}{{harness.Report{}, nil, 0}, {v, nil, 1}, {v, errors.New("etcd would not start"), 2}, {harness.Report{}, context.Canceled, 2}} {
		if got := exitCode(c.rep, c.err); got != c.want {
			t.Errorf("%d violations, error %v: exit %d, want %d", len(c.rep.Violations), c.err, got, c.want)
		}
	}
}
