package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the package if a goroutine outlives the benchmarks: each one stops its node
// and servers before it returns. Two of the embedded S3 gateway's HTTP library outlive any
// server by design: its process-wide date updater, and a stopped worker pool's cleaner,
// which ends after its next 10 s sleep. And protoactor's dead-letter throttle timer, which
// ends after its period: a node reader closed at the stop offset while its manifest walk
// was still out gets the walk's answer as a dead letter (the read subcommand, last here).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

// TestSubcommandsAtTinySizes runs every subcommand at a tiny size, in process, and checks
// that it exits 0 and prints its ratio rows with a minimum, a median and a maximum, so that
// the benchmark keeps working. It asserts nothing about speed.
func TestSubcommandsAtTinySizes(t *testing.T) {
	cases := []struct {
		args   []string
		ratios []string // ratio rows that must be printed
	}{
		{[]string{"upload", "--bytes", "16MiB", "--fragment", "4MiB", "--rounds", "2", "--warmup", "0", "--set", "persist_interval=100ms"},
			[]string{"ratio A/B throughput (node/raw)", "ratio B/A process CPU per byte (raw/node)"}},
		{[]string{"upload", "--bytes", "4MiB", "--fragment", "1MiB", "--streams", "3", "--rounds", "1", "--warmup", "1", "--set", "persist_interval=100ms"},
			[]string{"ratio A/B throughput (node/raw)"}},
		// Through the shaping proxy (small latency so that the run stays short), with two
		// streams so that the fairness row is printed; and the preset on a read.
		{[]string{"upload", "--bytes", "4MiB", "--fragment", "1MiB", "--streams", "2", "--rounds", "1", "--warmup", "0", "--s3-latency", "5ms", "--s3-conn-rate", "200MB/s", "--set", "persist_interval=100ms"},
			[]string{"ratio A/B throughput (node/raw)", "A node slowest/fastest stream time"}},
		{[]string{"read", "--bytes", "4MiB", "--fragment", "1MiB", "--segment", "512KiB", "--raw-range", "256KiB", "--raw-n", "4", "--rounds", "1", "--warmup", "0", "--realistic", "--set", "persist_interval=100ms"},
			[]string{"ratio A/B throughput (node/raw)"}},
		{[]string{"idle", "--streams", "20", "--windows", "2", "--window", "200ms", "--settle", "0s", "--set", "stream_dormant_after=100ms"},
			[]string{"ratio A/B RSS", "ratio A/B goroutines", "ratio A/B descriptors", "ratio A/B CPU"}},
		{[]string{"latency", "--rate", "4MB/s", "--fragment", "256KiB", "--duration", "1s", "--rounds", "2", "--set", "persist_interval=100ms"},
			[]string{"ratio A/B p50", "ratio A/B p99"}},
		{[]string{"requests", "--bytes", "16MiB", "--fragment", "4MiB", "--rounds", "1", "--warmup", "0", "--set", "persist_interval=100ms"},
			[]string{"ratio A/B requests (node/raw)"}},
		{[]string{"read", "--bytes", "8MiB", "--fragment", "1MiB", "--segment", "512KiB", "--raw-range", "256KiB", "--raw-n", "2,4", "--rounds", "2", "--warmup", "0", "--set", "persist_interval=100ms"},
			[]string{"ratio A/B throughput (node/raw)", "A node peak heap / read budget", "A node GETs allowed in flight (search, mean)", "ratio B/A process CPU per byte (raw/node)"}},
		{[]string{"recover", "--streams", "20", "--rounds", "2"},
			[]string{"ratio A/B time (recover/raw)", "ratio A/B requests"}},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args[:1], ""), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out, errs bytes.Buffer
			if code := run(ctx, c.args, &out, &errs); code != exitOK {
				t.Fatalf("bench %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(c.args, " "), code, out.String(), errs.String())
			}
			for _, name := range c.ratios {
				line := findRow(out.String(), name)
				if line == "" {
					t.Fatalf("bench %s: no row %q in\n%s", c.args[0], name, out.String())
				}
				f := strings.Fields(strings.TrimPrefix(line, name))
				if len(f) != 4 || !strings.HasPrefix(f[3], "n=") {
					t.Fatalf("bench %s: row %q: want min, median, max and n, got %q", c.args[0], name, line)
				}
				for _, v := range f[:3] {
					if x, err := strconv.ParseFloat(v, 64); err != nil || math.IsNaN(x) || x <= 0 {
						t.Fatalf("bench %s: row %q: %q is not a positive ratio", c.args[0], name, v)
					}
				}
			}
		})
	}
}

// TestProfilesAndTimeline: --cpu-profile writes one profile per side of each counted round
// (none for the warm-up), and --timeline prints the node's pipeline on stderr.
func TestProfilesAndTimeline(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "p")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errs bytes.Buffer
	args := []string{"upload", "--bytes", "4MiB", "--fragment", "1MiB", "--rounds", "1", "--warmup", "1", "--set", "persist_interval=100ms",
		"--cpu-profile", prefix, "--timeline"}
	if code := run(ctx, args, &out, &errs); code != exitOK {
		t.Fatalf("bench %s: exit %d\nstderr:\n%s", strings.Join(args, " "), code, errs.String())
	}
	for _, name := range []string{"p-node-r1.pprof", "p-raw-r1.pprof"} {
		if fi, err := os.Stat(filepath.Join(filepath.Dir(prefix), name)); err != nil || fi.Size() == 0 {
			t.Errorf("profile %s: %v (size %v)", name, err, fi)
		}
	}
	if got, _ := filepath.Glob(prefix + "-*-r0.pprof"); len(got) != 0 {
		t.Errorf("the warm-up round was profiled: %v", got)
	}
	if !strings.Contains(errs.String(), "timeline ") || !strings.Contains(errs.String(), "uploads running") {
		t.Errorf("no timeline on stderr:\n%s", errs.String())
	}
}

// TestBadFlags checks that a bad command line exits 2 with a message naming what was wrong.
func TestBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"nosuch"}, `unknown subcommand "nosuch"`},
		{[]string{"upload", "--bytes", "lots"}, `"lots" is not a size`},
		{[]string{"upload", "--streams", "0"}, "--streams 0: at least 1"},
		{[]string{"upload", "--raw-inflight", "-1"}, "--raw-inflight -1"},
		{[]string{"upload", "--bytes", "1MiB", "--s3-latency", "-1s"}, "latency -1s is negative"},
		{[]string{"idle", "--set", "persist_interval"}, "want name=value"},
		{[]string{"latency", "--set", "persist_interval=soon"}, "setting persist_interval (from flag --persist-interval)"},
	} {
		var out, errs bytes.Buffer
		if code := run(context.Background(), c.args, &out, &errs); code != exitUsage || !strings.Contains(errs.String(), c.want) {
			t.Errorf("bench %s: exit %d, stderr %q; want exit %d naming %q", strings.Join(c.args, " "), code, errs.String(), exitUsage, c.want)
		}
	}
}

// findRow returns the report row that starts with name, or "".
func findRow(out, name string) string {
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, name+" ") {
			return line
		}
	}
	return ""
}
