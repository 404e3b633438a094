package manifest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestScenarios runs every file under testdata/scenarios/: one scenario family per file, commands in,
// edits, deletions and manifests out. After every command the root and the whole tree are
// checked (Check, CheckTree, the store against the tree), so a scenario cannot print a
// broken state without failing.
//
// Commands:
//
//	init [next=N] [threshold=M]             empty manifest (never uploaded, or reset at N)
//	append first=F next=N size=S ts=A,B      one fragment covering [F, N)
//	append-run count=K len=L size=S ts=T [step=D]  K fragments of L offsets from next offset
//	gap to=N                                 declare [next offset, N) lost (GapEdit)
//	truncate at=A [prefix-size=S prefix-ts=A,B]  TruncateTail, delete what it drops, and
//	                                         append the straddling fragment's prefix
//	rebalance [cascade]                      fold the next due run (all of them with cascade)
//	retain [max-bytes=B] [max-age=A] now=T   evaluate, fetching groups as asked, apply, delete
//	lookup offset=O | ts=T                   find a fragment
//	iterate [from=O]                         the live fragments from O
//	summary [threshold=M]                    what status shows
//	count-gaps                               CountGaps over the whole tree
//	persist                                  fold the captured edits over the last persisted root
//	print                                    the root and every group below it
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/scenarios", func(t *testing.T, path string) {
		var tr *tier
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "init" && tr == nil {
				d.Fatalf(t, "init first")
			}
			out := runCommand(t, d, &tr)
			if err := tr.m.Check(); err != nil {
				d.Fatalf(t, "root fails Check after %s: %v\n%s", d.Cmd, err, fmtRoot(tr.m))
			}
			if err := CheckTree(tr.m, tr.fetch); err != nil {
				d.Fatalf(t, "tree fails CheckTree after %s: %v\n%s", d.Cmd, err, tr.fmtTree())
			}
			if err := tr.checkStore(); err != nil {
				d.Fatalf(t, "store after %s: %v", d.Cmd, err)
			}
			return out
		})
	})
}

func runCommand(t *testing.T, d *datadriven.TestData, trp **tier) string {
	tr := *trp
	switch d.Cmd {
	case "init":
		threshold := 4
		d.MaybeScanArgs(t, "threshold", &threshold)
		m := Empty()
		if d.HasArg("next") {
			var next uint64
			d.ScanArgs(t, "next", &next)
			m = EmptyAt(next)
		}
		*trp = newTier(m, threshold)
		return fmt.Sprintf("never-uploaded=%t\n%s", m.NeverUploaded(), fmtRoot(m))

	case "append":
		var first, next, size uint64
		d.ScanArgs(t, "first", &first)
		d.ScanArgs(t, "next", &next)
		d.ScanArgs(t, "size", &size)
		ts := scanInts(t, d, "ts", 2)
		before := tr.m
		ed, err := tr.appendFragment(first, next, size, ts[0], ts[1])
		if err != nil {
			if !tr.m.Equal(before) {
				d.Fatalf(t, "a refused append changed the manifest")
			}
			return errString(err)
		}
		return fmtEdit(ed) + "\n" + fmtRoot(tr.m)

	case "append-run":
		var count, length int
		var size uint64
		var ts, step int64 = 0, 10
		d.ScanArgs(t, "count", &count)
		d.ScanArgs(t, "len", &length)
		d.ScanArgs(t, "size", &size)
		d.ScanArgs(t, "ts", &ts)
		d.MaybeScanArgs(t, "step", &step)
		for i := 0; i < count; i++ {
			first := tr.m.NextOffset
			t0 := ts + int64(i)*step
			if _, err := tr.appendFragment(first, first+uint64(length), size, t0, t0+step-1); err != nil {
				return errString(err)
			}
		}
		return fmtRoot(tr.m)

	case "gap":
		var to uint64
		d.ScanArgs(t, "to", &to)
		before := tr.m
		ed, err := tr.declareGap(to)
		if err != nil {
			if !tr.m.Equal(before) {
				d.Fatalf(t, "a refused gap changed the manifest")
			}
			return errString(err)
		}
		return fmtEdit(ed) + "\n" + fmtRoot(tr.m)

	case "truncate":
		var at uint64
		d.ScanArgs(t, "at", &at)
		before := tr.m
		res, objs, err := tr.truncate(at)
		if err != nil {
			if !tr.m.Equal(before) {
				d.Fatalf(t, "a refused truncation changed the manifest")
			}
			return errString(err)
		}
		var b strings.Builder
		if res.Straddle != nil {
			fmt.Fprintf(&b, "straddle: %s\n", fmtEntry(*res.Straddle, res.StraddleEnd))
		}
		var named []string
		for _, e := range res.Dropped {
			named = append(named, fmt.Sprintf("%s@%d", e.Kind, e.FirstOffset))
		}
		if len(named) == 0 {
			named = []string{"nothing"}
		}
		fmt.Fprintf(&b, "dropped: %s\n", strings.Join(named, " "))
		if len(objs) > 0 {
			fmt.Fprintf(&b, "deleted objects: %s\n", fmtObjects(objs))
		}
		b.WriteString(fmtRoot(tr.m))
		if res.Straddle != nil && d.HasArg("prefix-size") {
			var size uint64
			d.ScanArgs(t, "prefix-size", &size)
			ts := scanInts(t, d, "prefix-ts", 2)
			ed, err := tr.appendFragment(res.Straddle.FirstOffset, at, size, ts[0], ts[1])
			if err != nil {
				return b.String() + errString(err)
			}
			b.WriteString("prefix " + fmtEdit(ed) + "\n" + fmtRoot(tr.m))
		}
		return b.String()

	case "count-gaps":
		n, offs, err := CountGaps(tr.m, tr.fetch)
		if err != nil {
			return errString(err)
		}
		return fmt.Sprintf("gap entries=%d gap offsets=%d", n, offs)

	case "rebalance":
		var b strings.Builder
		for {
			r, ed, ok, err := tr.rebalanceOnce()
			if !ok {
				if b.Len() == 0 {
					b.WriteString("no rebalance due\n")
				}
				break
			}
			fmt.Fprintf(&b, "fold root[%d:%d] (%d %ss) into a %s\n", r.At, r.At+len(r.Children), len(r.Children), r.Kind-1, r.Kind)
			if err != nil {
				return b.String() + errString(err)
			}
			b.WriteString(fmtEdit(ed) + "\n")
			if !d.HasArg("cascade") {
				break
			}
		}
		return b.String() + fmtRoot(tr.m)

	case "retain":
		var p Policy
		var now int64
		d.MaybeScanArgs(t, "max-bytes", &p.MaxBytes)
		d.MaybeScanArgs(t, "max-age", &p.MaxAgeMillis)
		d.MaybeScanArgs(t, "now", &now)
		var b strings.Builder
		r, objs, err := tr.retain(p, now, func(e Entry) {
			fmt.Fprintf(&b, "fetch %s@%d uid=%d\n", e.Kind, e.FirstOffset, e.UID)
		})
		if err != nil {
			return b.String() + errString(err)
		}
		if !r.Changed {
			return b.String() + "no change\n"
		}
		b.WriteString(fmtEdit(r.Edit) + "\n")
		var named []string
		for _, e := range r.Delete {
			named = append(named, fmt.Sprintf("%s@%d", e.Kind, e.FirstOffset))
		}
		fmt.Fprintf(&b, "delete (from %d): %s\n", r.DeleteFrom, strings.Join(named, " "))
		fmt.Fprintf(&b, "deleted objects: %s\n", fmtObjects(objs))
		return b.String() + fmtRoot(tr.m)

	case "lookup":
		if d.HasArg("offset") {
			var off uint64
			d.ScanArgs(t, "offset", &off)
			ref, err := LookupOffset(tr.m, off, tr.fetch)
			if err != nil {
				return errString(err)
			}
			if ref.Gap != ref.Entry.IsGap() {
				d.Fatalf(t, "lookup result Gap=%t for a %s", ref.Gap, ref.Entry.Kind)
			}
			return fmtRef(ref)
		}
		var ts int64
		d.ScanArgs(t, "ts", &ts)
		ref, err := LookupTimestamp(tr.m, ts, tr.fetch)
		if err != nil {
			return errString(err)
		}
		if ref.Gap || ref.Entry.Kind != KindFragment {
			d.Fatalf(t, "a timestamp lookup returned a %s", ref.Entry.Kind)
		}
		return fmtRef(ref)

	case "iterate":
		var from uint64
		d.MaybeScanArgs(t, "from", &from)
		before := tr.fetches
		it := Iterate(tr.m, from, tr.fetch)
		var b strings.Builder
		for {
			ref, ok, err := it.Next()
			if err != nil {
				return b.String() + errString(err)
			}
			if !ok {
				break
			}
			if ref.Gap != ref.Entry.IsGap() {
				d.Fatalf(t, "iterator result Gap=%t for a %s", ref.Gap, ref.Entry.Kind)
			}
			b.WriteString(fmtRef(ref) + "\n")
		}
		if b.Len() == 0 {
			b.WriteString("nothing\n")
		}
		fmt.Fprintf(&b, "(%d group fetches)\n", tr.fetches-before)
		return b.String()

	case "summary":
		threshold := tr.threshold
		d.MaybeScanArgs(t, "threshold", &threshold)
		s := tr.m.Summary(threshold)
		out := fmt.Sprintf("first=%d next=%d size=%d fragments=%d oldest=%d", s.FirstOffset, s.NextOffset, s.TotalSize, s.Fragments, s.OldestTimestamp)
		if s.GapEntries > 0 || s.GapOffsets > 0 {
			out += fmt.Sprintf(" root-gaps=%d root-gap-offsets=%d", s.GapEntries, s.GapOffsets)
		}
		return out

	case "persist":
		n := len(tr.edits)
		if err := tr.persist(); err != nil {
			return errString(err)
		}
		return fmt.Sprintf("persisted %d edits; root object %d bytes", n, len(EncodeRoot(tr.m)))

	case "print":
		return tr.fmtTree()
	}
	d.Fatalf(t, "unknown command %q", d.Cmd)
	return ""
}

// scanInts reads an argument written a,b or (a, b).
func scanInts(t *testing.T, d *datadriven.TestData, key string, n int) []int64 {
	arg, ok := d.Arg(key)
	if !ok {
		d.Fatalf(t, "missing argument %s", key)
	}
	var vals []string
	for _, v := range arg.Vals {
		vals = append(vals, strings.Split(v, ",")...)
	}
	if len(vals) != n {
		d.Fatalf(t, "%s wants %d values, has %d", key, n, len(vals))
	}
	out := make([]int64, n)
	for i, v := range vals {
		x, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			d.Fatalf(t, "%s: %v", key, err)
		}
		out[i] = x
	}
	return out
}
