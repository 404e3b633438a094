// Package faults draws the chaos soak's fault schedule from a seed: for each cycle, how
// much each stream's log grows, how long the node runs, which faults strike when, and how
// the cycle ends. A cycle's plan depends only on the seed, the cycle's index and the
// options, never on what the system did, so the same seed replays the same schedule.
package faults

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"
)

// Kind is a kind of fault.
type Kind string

// The faults the soak injects.
const (
	// NodeKill sends SIGKILL to the node, lets the broker append, and starts it again.
	NodeKill Kind = "node-kill"
	// S3Storm makes the fault injector fail S3 requests for a while.
	S3Storm Kind = "s3-storm"
	// EtcdMemberKill stops one etcd member abruptly and starts it again later.
	EtcdMemberKill Kind = "etcd-member-kill"
	// EtcdClusterRestart stops every etcd member and starts them again (same data).
	EtcdClusterRestart Kind = "etcd-cluster-restart"
	// GCDelete runs `node gc --delete` while the node tiers.
	GCDelete Kind = "gc-delete"
	// Retention changes a stream's remote retention policy with `node retention`.
	Retention Kind = "retention-change"
	// LocalAhead blocks a stream's fragment uploads, kills the node and deletes the oldest
	// local segments past the persisted next offset, as a broker's retention outrunning
	// the upload would: the node must declare a gap.
	LocalAhead Kind = "local-ahead"
	// LostTail cuts a stream's local log back at a chunk boundary before the node starts
	// (an unsynced tail lost in a crash): the remote tier is ahead; the node waits behind
	// until the log refills (a match) or forks (a truncation at the divergence point). In
	// some cycles (Fork) the broker at once writes other chunks from the cut on, at a higher
	// epoch, as a new leader does after an unclean failover: the node must cut the remote
	// tier back to the cut exactly and tier the new timeline.
	LostTail Kind = "lost-tail"
	// Cut forces a fragment cut with `node cut`.
	Cut Kind = "cut"
	// EtcdWipe stops the node, deletes every key under the etcd prefix (etcd lost: the
	// bucket is claimed, etcd is not), runs `node recover --yes --takeover` (the roots are
	// younger than 10 minutes) and starts the node again: the records recovered from the
	// bucket must cover everything acknowledged before.
	EtcdWipe Kind = "etcd-wipe"
	// EtcdSnapshotRestore copies every key under the etcd prefix at one moment (a
	// snapshot), lets the node persist on for a while (For), stops it, puts etcd back to
	// the snapshot (records behind the bucket), runs `node recover --yes --after-restore`
	// and starts the node again: the same promise.
	EtcdSnapshotRestore Kind = "etcd-snapshot-restore"
	// DeposedTail is a replica truncating a deposed leader's higher-epoch suffix: before the
	// start the broker goes on at a higher epoch from the log's end (a leader elected with
	// that epoch), the node tiers some of it; at the fault's moment the node is killed, the
	// broker cuts the log below that epoch's first chunk (below the latest fork point) and
	// writes another timeline from the cut at a still higher epoch (the replica rejoining the
	// new leader), and the node starts again: it must cut the remote tier back to the cut and
	// tier the new timeline.
	DeposedTail Kind = "deposed-tail"
	// BehindRetention is the broker's retention racing a behind stream: before the start the
	// log is cut back below the persisted next offset (a broker restored from an older copy:
	// the log is a prefix of the remote tier) and it stays there while the node waits; at
	// the fault's moment the node is killed and the broker's retention deletes the log's
	// oldest segments, either within the behind log (Past false) or, after the log refilled
	// with the same chunks, past the remote next offset (Past true: a gap is due); the node
	// starts again and the log grows on.
	BehindRetention Kind = "behind-retention"
)

// Kinds lists every kind, in a fixed order.
var Kinds = []Kind{NodeKill, S3Storm, EtcdMemberKill, EtcdClusterRestart, GCDelete, Retention, LocalAhead, LostTail, Cut, EtcdWipe, EtcdSnapshotRestore,
	DeposedTail, BehindRetention}

// Rewinds are the kinds that take etcd's records back (wiped or restored): a cycle holds
// at most one, drawn after everything else (see Options.RewindPercent).
var Rewinds = []Kind{EtcdWipe, EtcdSnapshotRestore}

// IsRewind reports whether k takes etcd's records back.
func IsRewind(k Kind) bool { return k == EtcdWipe || k == EtcdSnapshotRestore }

// BrokerRewrites are the kinds that rewrite a log the way a broker's failover or restore
// does (beyond a lost tail): a cycle holds at most one, drawn after everything else (see
// Options.BrokerPercent).
var BrokerRewrites = []Kind{DeposedTail, BehindRetention}

// IsBrokerRewrite reports whether k is one of BrokerRewrites.
func IsBrokerRewrite(k Kind) bool { return k == DeposedTail || k == BehindRetention }

// drawnApart reports whether k is drawn after a cycle's other faults (not among its 1 to
// MaxFaults).
func drawnApart(k Kind) bool { return IsRewind(k) || IsBrokerRewrite(k) }

// Storm is what an S3 storm does to the requests it hits.
type Storm string

// The storms.
const (
	Storm503          Storm = "503"
	Storm500          Storm = "500"
	StormResetRequest Storm = "reset-mid-request"
	StormResetReply   Storm = "reset-mid-response"
	StormDrop         Storm = "dropped-response"
	Storm403          Storm = "403-window"
	StormSlow         Storm = "slow"
	StormCorrupt      Storm = "corrupt-body"
)

// Storms lists the storms in a fixed order.
var Storms = []Storm{Storm503, Storm500, StormResetRequest, StormResetReply, StormDrop, Storm403, StormSlow, StormCorrupt}

// Policy is a remote retention policy (0: no limit).
type Policy struct {
	MaxBytes uint64
	MaxAge   time.Duration
}

// Fault is one fault of a cycle.
type Fault struct {
	Kind   Kind
	At     time.Duration // after the node's start in the cycle
	For    time.Duration // how long a window lasts (storms, etcd outages, a local-ahead block)
	Stream int           // the stream it concerns; -1 for all
	// S3 storms.
	Storm  Storm
	Method string // "PUT", "GET" or "" (any)
	Target string // "data" (fragments), "meta" (roots and groups) or "" (any key)
	Count  int    // requests hit at most (0: all in the window)
	Delay  time.Duration
	// EtcdMemberKill.
	Member int
	// Retention.
	Policy Policy
	// LostTail: where in the range it may cut, 0 to 1; Fork: the log is refilled at once
	// with ForkBytes of another timeline's chunks (else it refills later with the same ones).
	// DeposedTail: where below the deposed leader's first chunk the cut falls, and the new
	// timeline's bytes. BehindRetention: where the lost tail's cut falls (the retention's
	// reach is drawn as Reach).
	Fraction  float64
	Fork      bool
	ForkBytes int64
	// BehindRetention: the retention deletes past the remote next offset (after a refill)
	// rather than within the behind log; Reach (0 to 1) is how far into the log it goes.
	Past  bool
	Reach float64
	// NodeKill and LocalAhead: bytes each stream's log grows by before the restart.
	Appends []int64
}

// String describes the fault canonically.
func (f Fault) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s@%v", f.Kind, f.At.Round(time.Millisecond))
	if f.For > 0 {
		fmt.Fprintf(&b, " for %v", f.For.Round(time.Millisecond))
	}
	if f.Stream >= 0 {
		fmt.Fprintf(&b, " stream %d", f.Stream)
	}
	switch f.Kind {
	case S3Storm:
		fmt.Fprintf(&b, " %s method=%q target=%q count=%d", f.Storm, f.Method, f.Target, f.Count)
		if f.Delay > 0 {
			fmt.Fprintf(&b, " delay=%v", f.Delay)
		}
	case EtcdMemberKill:
		fmt.Fprintf(&b, " member %d", f.Member)
	case Retention:
		fmt.Fprintf(&b, " max-bytes=%d max-age=%v", f.Policy.MaxBytes, f.Policy.MaxAge)
	case LostTail:
		fmt.Fprintf(&b, " at %.3f", f.Fraction)
		if f.Fork {
			fmt.Fprintf(&b, " fork %d bytes", f.ForkBytes)
		}
	case DeposedTail:
		fmt.Fprintf(&b, " cut at %.3f, new timeline %d bytes", f.Fraction, f.ForkBytes)
	case BehindRetention:
		fmt.Fprintf(&b, " behind at %.3f, retention reach %.3f past=%t", f.Fraction, f.Reach, f.Past)
	}
	if len(f.Appends) > 0 {
		fmt.Fprintf(&b, " appends=%v", f.Appends)
	}
	return b.String()
}

// Cycle is the plan of one cycle: the node starts, runs for Duration while Faults strike,
// and stops; the checker then looks at everything.
type Cycle struct {
	Index    int
	Duration time.Duration
	Appends  []int64 // bytes each stream's log grows by before the node starts
	LostTail *Fault  // applied to the log before the start; that stream appends nothing
	Faults   []Fault // during the run, ordered by At
	// CleanStop ends the cycle with SIGTERM (the node persists everything first); otherwise
	// with SIGKILL at the end of Duration.
	CleanStop bool
}

// String describes the cycle canonically (the schedule digest hashes it).
func (c Cycle) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cycle %d: %v appends=%v clean=%t", c.Index, c.Duration.Round(time.Millisecond), c.Appends, c.CleanStop)
	if c.LostTail != nil {
		fmt.Fprintf(&b, "; before start: %s", c.LostTail)
	}
	for _, f := range c.Faults {
		fmt.Fprintf(&b, "; %s", f)
	}
	return b.String()
}

// Options shape the schedule.
type Options struct {
	Streams          int
	Members          int           // etcd members
	MinCycle         time.Duration // node run per cycle
	MaxCycle         time.Duration
	MinAppend        int64 // bytes a stream's log grows by per cycle
	MaxAppend        int64
	SegmentBytes     int64        // local segment size: a local-ahead needs several segments
	MaxFaults        int          // faults per cycle at most (at least 1)
	Weights          map[Kind]int // relative frequency; a kind absent or 0 never happens
	LostTailPercent  int          // chance a cycle starts with a lost tail
	ForkPercent      int          // chance a lost tail is refilled at once with another timeline
	CleanStopPercent int          // chance a cycle ends with SIGTERM rather than SIGKILL
	// RewindPercent is the chance a cycle also holds one etcd rewind (a wipe or a snapshot
	// restore, chosen by their Weights). It is drawn after every other draw of the cycle,
	// so that it leaves the rest of a seed's schedule as it was (the CI soak's seed keeps
	// its forks); a rewind comes on top of MaxFaults.
	RewindPercent int
	// BrokerPercent is the chance a cycle also holds one broker rewrite (a deposed tail or a
	// retention racing a behind stream, chosen by their Weights). It is drawn after the
	// rewind, so that it leaves the rest of a seed's schedule as it was; it comes on top of
	// MaxFaults.
	BrokerPercent int
}

// DefaultWeights are the relative frequencies of the faults during a cycle.
var DefaultWeights = map[Kind]int{NodeKill: 3, S3Storm: 6, EtcdMemberKill: 2, EtcdClusterRestart: 1, GCDelete: 2, Retention: 2, LocalAhead: 1, Cut: 3,
	EtcdWipe: 1, EtcdSnapshotRestore: 1, DeposedTail: 1, BehindRetention: 1}

// DefaultOptions is the soak's schedule for streams streams on a three-member etcd.
func DefaultOptions(streams int) Options {
	return Options{Streams: streams, Members: 3, MinCycle: 4 * time.Second, MaxCycle: 9 * time.Second,
		MinAppend: 128 << 10, MaxAppend: 1536 << 10, SegmentBytes: 256 << 10, MaxFaults: 3,
		Weights: DefaultWeights, LostTailPercent: 15, ForkPercent: 50, CleanStopPercent: 30, RewindPercent: 6,
		BrokerPercent: 5}
}

// Plan is cycle index's plan under seed.
func Plan(seed uint64, index int, o Options) Cycle {
	r := rand.New(rand.NewPCG(seed, uint64(index)*0x9e3779b97f4a7c15+1))
	dur := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(r.Int64N(int64(hi-lo)))
	}
	bytesN := func() int64 { return o.MinAppend + r.Int64N(o.MaxAppend-o.MinAppend+1) }
	c := Cycle{Index: index, Duration: dur(o.MinCycle, o.MaxCycle).Round(time.Millisecond)}
	for range o.Streams {
		c.Appends = append(c.Appends, bytesN())
	}
	if r.IntN(100) < o.LostTailPercent {
		s := r.IntN(o.Streams)
		c.LostTail = &Fault{Kind: LostTail, Stream: s, Fraction: float64(r.IntN(1000)) / 1000}
		c.Appends[s] = 0
	}
	var kinds []Kind
	total := 0
	for _, k := range Kinds {
		if w := o.Weights[k]; w > 0 && !drawnApart(k) {
			kinds = append(kinds, k)
			total += w
		}
	}
	n := 1 + r.IntN(max(o.MaxFaults, 1))
	localAhead := false
	for range n {
		if total == 0 {
			break
		}
		pick := r.IntN(total)
		var k Kind
		for _, kk := range kinds {
			if pick < o.Weights[kk] {
				k = kk
				break
			}
			pick -= o.Weights[kk]
		}
		if k == LocalAhead && (localAhead || (c.LostTail != nil && o.Streams < 2)) {
			k = Cut
		}
		f := Fault{Kind: k, Stream: -1, At: dur(300*time.Millisecond, c.Duration-500*time.Millisecond).Round(time.Millisecond)}
		switch k {
		case NodeKill:
			for range o.Streams {
				f.Appends = append(f.Appends, bytesN()/2)
			}
		case S3Storm:
			f.Storm = Storms[r.IntN(len(Storms))]
			f.For = dur(500*time.Millisecond, 4*time.Second).Round(time.Millisecond)
			f.Method = []string{"PUT", "PUT", "GET", ""}[r.IntN(4)]
			f.Target = []string{"data", "meta", ""}[r.IntN(3)]
			if r.IntN(3) == 0 {
				f.Stream = r.IntN(o.Streams)
			}
			if r.IntN(2) == 0 {
				f.Count = 1 + r.IntN(8)
			}
			if f.Storm == StormSlow {
				f.Delay = dur(200*time.Millisecond, 8*time.Second).Round(time.Millisecond)
			}
		case EtcdMemberKill:
			f.Member = r.IntN(max(o.Members, 1))
			f.For = dur(500*time.Millisecond, 5*time.Second).Round(time.Millisecond)
		case EtcdClusterRestart:
			f.For = dur(300*time.Millisecond, 3*time.Second).Round(time.Millisecond)
		case GCDelete, Cut:
			if k == Cut || r.IntN(2) == 0 {
				f.Stream = r.IntN(o.Streams)
			}
		case Retention:
			f.Stream = r.IntN(o.Streams)
			switch r.IntN(4) {
			case 0: // no limit: the configuration's policy no longer applies until a restart
			case 1:
				f.Policy.MaxAge = dur(5*time.Second, 2*time.Minute).Round(time.Second)
			default:
				f.Policy.MaxBytes = uint64(1<<20 + r.Int64N(15<<20))
			}
		case LocalAhead:
			localAhead = true
			f.Stream = r.IntN(o.Streams)
			if c.LostTail != nil && c.LostTail.Stream == f.Stream {
				f.Stream = (f.Stream + 1) % o.Streams // that stream's log must not grow this cycle
			}
			f.At = max(f.At, 1500*time.Millisecond)
			if f.At > c.Duration-200*time.Millisecond {
				c.Duration = f.At + time.Second
			}
			// The log must grow by several segments the node will not upload.
			c.Appends[f.Stream] = max(c.Appends[f.Stream], 4*o.SegmentBytes)
			for range o.Streams {
				f.Appends = append(f.Appends, bytesN()/4)
			}
		}
		c.Faults = append(c.Faults, f)
	}
	sort.SliceStable(c.Faults, func(i, j int) bool { return c.Faults[i].At < c.Faults[j].At })
	c.CleanStop = r.IntN(100) < o.CleanStopPercent
	// Drawn last, so that adding it left every earlier draw of a seed's schedule as it was.
	if fork, bytes := r.IntN(100) < o.ForkPercent, o.MinAppend/8+r.Int64N(o.MaxAppend); c.LostTail != nil {
		c.LostTail.Fork, c.LostTail.ForkBytes = fork, bytes
	}
	// Drawn after the fork, for the same reason.
	if f, ok := planRewind(r, o, c.Duration, dur); ok {
		if end := f.At + f.For + time.Second; end > c.Duration {
			c.Duration = end
		}
		c.Faults = append(c.Faults, f)
		sort.SliceStable(c.Faults, func(i, j int) bool { return c.Faults[i].At < c.Faults[j].At })
	}
	// Drawn after the rewind, for the same reason.
	if f, ok := planBrokerRewrite(r, o, c, dur); ok {
		if end := f.At + time.Second; end > c.Duration {
			c.Duration = end
		}
		c.Faults = append(c.Faults, f)
		sort.SliceStable(c.Faults, func(i, j int) bool { return c.Faults[i].At < c.Faults[j].At })
	}
	return c
}

// planBrokerRewrite draws a cycle's broker rewrite, if any: BrokerPercent decides whether,
// the kinds' weights which. Its stream is one the cycle's lost tail and local-ahead leave
// alone (none: no rewrite). The draws are made whatever the outcome, so that one option
// changes only what depends on it.
func planBrokerRewrite(r *rand.Rand, o Options, c Cycle, dur func(lo, hi time.Duration) time.Duration) (Fault, bool) {
	total := 0
	for _, k := range BrokerRewrites {
		total += max(o.Weights[k], 0)
	}
	if o.BrokerPercent <= 0 || total == 0 || r.IntN(100) >= o.BrokerPercent {
		return Fault{}, false
	}
	pick := r.IntN(total)
	var k Kind
	for _, kk := range BrokerRewrites {
		if w := max(o.Weights[kk], 0); pick < w {
			k = kk
			break
		} else {
			pick -= w
		}
	}
	f := Fault{Kind: k, Stream: r.IntN(o.Streams), Fraction: float64(r.IntN(1000)) / 1000,
		// Late enough that the node has tiered part of what the cycle began with.
		At:        dur(1500*time.Millisecond, max(c.Duration-500*time.Millisecond, 1501*time.Millisecond)).Round(time.Millisecond),
		ForkBytes: o.MinAppend/8 + r.Int64N(o.MaxAppend),
		Past:      r.IntN(2) == 0, Reach: float64(r.IntN(1000)) / 1000}
	for range o.Streams {
		f.Appends = append(f.Appends, o.MinAppend+r.Int64N(o.MaxAppend-o.MinAppend+1))
	}
	busy := map[int]bool{}
	if c.LostTail != nil {
		busy[c.LostTail.Stream] = true
	}
	for _, g := range c.Faults {
		if g.Kind == LocalAhead {
			busy[g.Stream] = true
		}
	}
	for range o.Streams {
		if !busy[f.Stream] {
			return f, true
		}
		f.Stream = (f.Stream + 1) % o.Streams
	}
	return Fault{}, false
}

// planRewind draws a cycle's etcd rewind, if any: RewindPercent decides whether, the
// rewinds' weights which. A snapshot restore puts etcd back after For: the node persists
// on meanwhile.
func planRewind(r *rand.Rand, o Options, d time.Duration, dur func(lo, hi time.Duration) time.Duration) (Fault, bool) {
	total := 0
	for _, k := range Rewinds {
		total += max(o.Weights[k], 0)
	}
	if o.RewindPercent <= 0 || total == 0 || r.IntN(100) >= o.RewindPercent {
		return Fault{}, false
	}
	pick := r.IntN(total)
	var k Kind
	for _, kk := range Rewinds {
		if w := max(o.Weights[kk], 0); pick < w {
			k = kk
			break
		} else {
			pick -= w
		}
	}
	f := Fault{Kind: k, Stream: -1, At: dur(300*time.Millisecond, max(d-500*time.Millisecond, 301*time.Millisecond)).Round(time.Millisecond)}
	if k == EtcdSnapshotRestore {
		f.For = dur(time.Second, 4*time.Second).Round(time.Millisecond)
	}
	return f, true
}

// Digest is a short hash of the plans: two runs with the same seed print the same digest.
func Digest(cycles []Cycle) string {
	h := sha256.New()
	for _, c := range cycles {
		fmt.Fprintln(h, c.String())
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}
