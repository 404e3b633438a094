package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"time"

	"github.com/streamtier/streamtier/s3io"
)

// summary is a figure's minimum, median and maximum over rounds (or samples).
type summary struct {
	min, median, max float64
	n                int
}

// summarize computes the summary of xs (NaN figures when xs is empty).
func summarize(xs []float64) summary {
	if len(xs) == 0 {
		return summary{math.NaN(), math.NaN(), math.NaN(), 0}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return summary{s[0], med, s[len(s)-1], len(s)}
}

// quantile is the q-quantile (0 to 1) of sorted by the nearest-rank method.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// report prints the figure rows of a benchmark: a column header, then one row per figure
// with its minimum, median and maximum over the rounds. Ratio rows start with "ratio".
type report struct {
	w io.Writer
}

const rowFormat = "%-40s %12s %12s %12s   %s\n"

func (r report) columns(note string) {
	fmt.Fprintf(r.w, rowFormat, "", "min", "median", "max", note)
}

// row prints one figure; digits is the number of decimals.
func (r report) row(name string, xs []float64, digits int) {
	s := summarize(xs)
	f := func(v float64) string { return fmt.Sprintf("%.*f", digits, v) }
	fmt.Fprintf(r.w, rowFormat, name, f(s.min), f(s.median), f(s.max), fmt.Sprintf("n=%d", s.n))
}

// cpuUse is one side's process CPU (user + system) over a round, the embedded endpoint's
// and the shaping proxy's included, with the bytes it moved and how long it took.
type cpuUse struct {
	cpu, elapsed time.Duration
	bytes        int64
}

// cpuRows prints each side's process CPU per GiB and how busy the cores were, round by
// round (a and b: the two sides, named aName and bName), and returns the ratio of CPU per
// byte b/a, which the caller prints among its ratio rows: when both sides keep the cores
// busy, it bounds the throughput ratio.
func (r report) cpuRows(aName, bName string, a, b []cpuUse) []float64 {
	perGiB := func(us []cpuUse) []float64 {
		out := make([]float64, len(us))
		for i, u := range us {
			out[i] = u.cpu.Seconds() / (mib(u.bytes) / 1024)
		}
		return out
	}
	busy := func(us []cpuUse) []float64 {
		out := make([]float64, len(us))
		for i, u := range us {
			out[i] = u.cpu.Seconds() / u.elapsed.Seconds()
		}
		return out
	}
	aGiB, bGiB := perGiB(a), perGiB(b)
	r.row("A process CPU s per GiB ("+aName+")", aGiB, 3)
	r.row("B process CPU s per GiB ("+bName+")", bGiB, 3)
	r.row("A cores busy (process CPU / wall)", busy(a), 2)
	r.row("B cores busy (process CPU / wall)", busy(b), 2)
	return ratios(bGiB, aGiB)
}

// ratios divides a by b pair by pair (round by round).
func ratios(a, b []float64) []float64 {
	out := make([]float64, 0, len(a))
	for i := range min(len(a), len(b)) {
		out = append(out, a[i]/b[i])
	}
	return out
}

// ms turns durations into float milliseconds.
func ms(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / float64(time.Millisecond)
	}
	return out
}

// mib is bytes in MiB.
func mib(b int64) float64 { return float64(b) / (1 << 20) }

// delta is the requests made between two snapshots, per operation.
func delta(after, before s3io.MetricsSnapshot) s3io.MetricsSnapshot {
	var out s3io.MetricsSnapshot
	for op := range out {
		a, b := after[op], before[op]
		out[op] = s3io.OpSnapshot{Op: a.Op, Requests: a.Requests - b.Requests, Bytes: a.Bytes - b.Bytes, Sum: a.Sum - b.Sum}
		for c := range a.ByClass {
			out[op].ByClass[c] = a.ByClass[c] - b.ByClass[c]
		}
	}
	return out
}

// sampler calls sample every 5 ms (and once at the start) on a goroutine it owns, until
// stop, which returns what result says then. sample and result run on that goroutine only,
// so the state they share needs no lock.
type sampler[T any] struct {
	done chan struct{}
	out  chan T
}

func startSampler[T any](sample func(), result func() T) *sampler[T] {
	s := &sampler[T]{done: make(chan struct{}), out: make(chan T, 1)}
	go func() { // owned by s: stop ends it
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			sample()
			select {
			case <-s.done:
				s.out <- result()
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// stop ends the sampling and returns its result; call it once.
func (s *sampler[T]) stop() T {
	close(s.done)
	return <-s.out
}
