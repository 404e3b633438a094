package governorcore

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestScenarios runs the files under testdata/, one governor each. Commands:
//
//	new [max=N] [per-stream=N] [rate=B] [burst=B]   a governor at time 0
//	submit id=N stream=S [size=B] [owner=N] [ref=N] [at=D]
//	done id=N [at=D]                                  an admitted transfer ended
//	unused id=N [at=D]                                an admitted transfer never started
//	tick at=D
//	cancel-owner owner=N
//	status                                            in flight per stream and the queue
//	bucket                                            tokens and the admission counters
//	counts                                            every counter of Status
//
// Each event prints what the governor decided: superseded ids, abandoned ids, admitted ids
// (with their stream) and the wake-up, or "-" for nothing.
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if strings.Contains(path, "rapid") {
			return // failure files of the property tests, not scenarios
		}
		var g *Governor
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			at := func() time.Time {
				if !d.HasArg("at") {
					return t0
				}
				var s string
				d.ScanArgs(t, "at", &s)
				dur, err := time.ParseDuration(s)
				if err != nil {
					d.Fatalf(t, "at=%s: %v", s, err)
				}
				return t0.Add(dur)
			}
			num := func(name string, def int64) int64 {
				if !d.HasArg(name) {
					return def
				}
				var v int64
				d.ScanArgs(t, name, &v)
				return v
			}
			switch d.Cmd {
			case "new":
				cfg := Config{MaxConcurrent: int(num("max", 0)), PerStream: int(num("per-stream", 0)),
					RateBytesPerSec: num("rate", 0), BurstBytes: num("burst", 0)}
				if err := cfg.Validate(); err != nil {
					return "error: " + err.Error()
				}
				g = New(cfg, t0)
				return "ok"
			case "submit":
				var stream string
				d.ScanArgs(t, "stream", &stream)
				s := Submission{ID: uint64(num("id", 0)), Stream: stream, Size: num("size", 1),
					Owner: uint64(num("owner", 0)), Ref: uint64(num("ref", 0))}
				return describe(g.Submit(at(), s), g)
			case "restart":
				// A new incarnation: the bucket resumed, the queue empty, and the transfers
				// listed in carry=(id:stream:owner:ref ...) still running, adopted.
				tokens := g.Status().Tokens
				if g.cfg.Unlimited() {
					tokens = 0
				}
				var carried []Submission
				for _, a := range d.CmdArgs {
					if a.Key != "carry" {
						continue
					}
					for _, v := range a.Vals {
						var s Submission
						if _, err := fmt.Sscanf(strings.ReplaceAll(v, ":", " "), "%d %s %d %d", &s.ID, &s.Stream, &s.Owner, &s.Ref); err != nil {
							d.Fatalf(t, "carry %q: want id:stream:owner:ref: %v", v, err)
						}
						carried = append(carried, s)
					}
				}
				g = Resume(g.cfg, tokens, at())
				g.Adopt(carried)
				return status(g)
			case "done":
				return describe(g.Done(at(), uint64(num("id", 0))), g)
			case "unused":
				return describe(g.Unused(at(), uint64(num("id", 0))), g)
			case "tick":
				return describe(g.Tick(at()), g)
			case "cancel-owner":
				return fmt.Sprintf("canceled %v", g.CancelOwner(uint64(num("owner", 0))))
			case "status":
				return status(g)
			case "counts":
				st := g.Status()
				return fmt.Sprintf("submitted %d admitted %d superseded %d canceled %d unused %d abandoned %d",
					st.Submitted, st.Admitted, st.Superseded, st.Canceled, st.Unused, st.Abandoned)
			case "bucket":
				st := g.Status()
				return fmt.Sprintf("tokens %d admitted %d unused %d canceled %d", st.Tokens, st.Admitted, st.Unused, st.Canceled)
			}
			d.Fatalf(t, "unknown command %s", d.Cmd)
			return ""
		})
	})
}

func describe(d Decision, g *Governor) string {
	var parts []string
	if len(d.Superseded) > 0 {
		parts = append(parts, fmt.Sprintf("superseded %v", d.Superseded))
	}
	if len(d.Abandoned) > 0 {
		parts = append(parts, fmt.Sprintf("abandoned %v", d.Abandoned))
	}
	if len(d.Admit) > 0 {
		var a []string
		for _, s := range d.Admit {
			a = append(a, fmt.Sprintf("%d:%s", s.ID, s.Stream))
		}
		parts = append(parts, "admit "+strings.Join(a, " "))
	}
	if d.Wake > 0 {
		parts = append(parts, "wake "+d.Wake.String())
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "\n")
}

func status(g *Governor) string {
	st := g.Status()
	var streams []string
	for s, n := range g.streams {
		streams = append(streams, fmt.Sprintf("%s=%d", s, n))
	}
	sort.Strings(streams)
	var q []string
	for _, s := range g.pending {
		q = append(q, fmt.Sprintf("%d:%s", s.ID, s.Stream))
	}
	return fmt.Sprintf("in-flight %d (%s) at-share %d\nqueue [%s]", st.InFlight, strings.Join(streams, " "), st.StreamsAtShare, strings.Join(q, " "))
}
