package shell

import (
	"sort"
	"sync"
	"time"
)

// LatencyWindow is how many recent durations a Latencies keeps.
const LatencyWindow = 1024

// Latencies keeps the most recent LatencyWindow durations of one kind, for their p50 and
// p99 in status and metrics, and the count and sum of all of them (a Prometheus summary
// needs both); safe for concurrent use. The zero value is empty.
type Latencies struct {
	mu    sync.Mutex
	w     []time.Duration
	count uint64
	sum   time.Duration
}

// Add records one duration, forgetting the oldest past the window.
func (l *Latencies) Add(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.w) >= LatencyWindow {
		copy(l.w, l.w[1:])
		l.w = l.w[:LatencyWindow-1]
	}
	l.w = append(l.w, d)
	l.count++
	l.sum += d
}

// Totals returns how many durations were added and their sum, since the start.
func (l *Latencies) Totals() (count uint64, sum time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count, l.sum
}

// Quantiles returns the p50 and p99 of the durations kept (0, 0 when none).
func (l *Latencies) Quantiles() (p50, p99 time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.w) == 0 {
		return 0, 0
	}
	s := append([]time.Duration(nil), l.w...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)*50/100], s[min(len(s)*99/100, len(s)-1)]
}
