package resolve

import (
	"errors"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/manifest"
)

func TestChooseTop(t *testing.T) {
	firstOfV2 := v3(1, 3, 0, 0)
	firstOfV2.ParentUID = 0xb
	for _, c := range []struct {
		name   string
		p      Prefix
		want   TopOutcome
		top    uint64 // seq (version 3) or uid (version 2) of the chosen root
		strays int
		maxEp  uint64
		inWhy  string
	}{
		{name: "empty prefix", p: Prefix{}, want: TopEmpty},
		{name: "objects but no root", p: Prefix{Objects: 3}, want: TopOrphansOnly, inWhy: "3 objects"},
		{name: "a marker wins over roots", p: Prefix{Marker: true, Roots: []Root{v3(2, 1, 1, 1)}}, want: TopMarked},
		{name: "a single version 3 root", p: Prefix{Roots: []Root{v3(1, 1, 0, 0)}}, want: TopV3, top: 1, maxEp: 1},
		{name: "a chain: its top", p: Prefix{Roots: []Root{v3(3, 1, 2, 1), v3(4, 1, 3, 1), v3(5, 2, 4, 1)}}, want: TopV3, top: 5, maxEp: 2},
		{name: "a child of the top's ancestor, below its epoch, on top: stray",
			p: Prefix{Roots: []Root{v3(4, 2, 3, 2), v3(5, 2, 4, 2), v3(6, 1, 4, 2)}}, want: TopV3, top: 5, strays: 1, maxEp: 2},
		{name: "a stray below its parent's epoch on top",
			p: Prefix{Roots: []Root{v3(4, 2, 3, 2), v3(5, 1, 4, 2)}}, want: TopV3, top: 4, strays: 1},
		{name: "a stray below an epoch etcd proves persisted",
			p: Prefix{ProvenEpoch: 3, Roots: []Root{v3(5, 1, 4, 1)}}, want: TopUndecided, strays: 1},
		{name: "roots skipped by a later sibling of a higher epoch are strays, not a fork",
			p: Prefix{Roots: []Root{v3(5, 1, 4, 1), v3(6, 1, 4, 1), v3(7, 2, 4, 1)}}, want: TopV3, top: 7},
		{name: "only version 2 roots, one", p: Prefix{Roots: []Root{v2(2, 0xb)}}, want: TopSingleV2, top: 0xb},
		{name: "only version 2 roots, several: refuse, list each",
			p: Prefix{Roots: []Root{v2(1, 0xa), v2(2, 0xb)}}, want: TopAmbiguousV2, inWhy: "2 version 1 or 2 roots"},
		{name: "version 3 over version 2 roots: the version 3 top",
			p: Prefix{Roots: []Root{v2(1, 0xa), v2(2, 0xb), firstOfV2}}, want: TopV3, top: 1, maxEp: 3},
		{name: "a stray version 3 root over the version 2 root it names",
			p: Prefix{Roots: []Root{v2(5, 0xb), firstOfV2}}, want: TopSingleV2, top: 0xb, strays: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := ChooseTop(c.p)
			if got.Outcome != c.want {
				t.Fatalf("outcome %v, want %v (%s)", got.Outcome, c.want, got.Reason)
			}
			switch got.Outcome {
			case TopV3:
				if got.Root.Seq != c.top {
					t.Fatalf("top %v, want seq %d", got.Root, c.top)
				}
			case TopSingleV2:
				if got.Root.UID != c.top {
					t.Fatalf("root %v, want uid %x", got.Root, c.top)
				}
			}
			if len(got.Strays) != c.strays || (c.maxEp != 0 && got.MaxEpoch != c.maxEp) || !strings.Contains(got.Reason, c.inWhy) {
				t.Fatalf("strays %v max epoch %d reason %q", got.Strays, got.MaxEpoch, got.Reason)
			}
		})
	}
}

func TestChooseTopNeedsEveryVersion3Root(t *testing.T) {
	k := manifest.SeqRootKey(kp, st, 9)
	pk, err := manifest.ParseKey(kp, k)
	if err != nil {
		t.Fatal(err)
	}
	r := FromKey(k, pk, time.Unix(5, 0))
	got := ChooseTop(Prefix{Roots: []Root{v3(8, 1, 7, 1), r}})
	if got.Outcome != TopNeedRoots || len(got.Need) != 1 || got.Need[0] != k {
		t.Fatalf("%+v", got)
	}
	obj := manifest.Root{Version: 3, Lineage: v3(9, 1, 8, 1).Lineage}
	if err := CheckRootObject(r, obj); err != nil {
		t.Fatal(err)
	}
	if err := CheckRootObject(r, manifest.Root{Version: 3, Lineage: v3(10, 1, 8, 1).Lineage}); err == nil {
		t.Fatal("a root of another seq accepted under the key")
	}
	if err := CheckRootObject(r, manifest.Root{Version: 2}); err == nil {
		t.Fatal("a version 2 root accepted under a version 3 key")
	}
	if got := ChooseTop(Prefix{Roots: []Root{v3(8, 1, 7, 1), r.WithLineage(obj.Lineage)}}); got.Outcome != TopV3 || got.Root.Seq != 9 {
		t.Fatalf("%+v", got)
	}
}

func TestPlanRecovery(t *testing.T) {
	top := ChooseTop(Prefix{Roots: []Root{v3(4, 1, 3, 1), v3(5, 2, 4, 1)}})
	v2only := ChooseTop(Prefix{Roots: []Root{v2(2, 0xb)}})
	bad := errors.New("root CRC-32 mismatch")
	for _, c := range []struct {
		name  string
		c     TopChoice
		check error
		e     Etcd
		want  RecoveryAction
		epoch uint64
		inWhy string
	}{
		{name: "etcd empty: write", c: top, want: RecoverWrite, epoch: 2},
		{name: "etcd behind: raise", c: top, e: Etcd{Anchor: true, Record: rec(4, 1), StoredEpoch: 1}, want: RecoverWrite, epoch: 2},
		{name: "etcd's stored epoch higher: kept", c: top, e: Etcd{Anchor: true, Record: rec(4, 1), StoredEpoch: 9}, want: RecoverWrite, epoch: 9},
		{name: "etcd up to date", c: top, e: Etcd{Anchor: true, Record: rec(5, 2), StoredEpoch: 2}, want: RecoverUpToDate},
		{name: "etcd ahead: never lowered", c: top, e: Etcd{Anchor: true, Record: rec(6, 2)}, want: RecoverSkip, inWhy: "never lowered"},
		{name: "same seq, other uid: refuse", c: top, e: Etcd{Anchor: true, Record: &Record{Seq: 5, UID: 1}}, want: RecoverRefuse, inWhy: "different histories"},
		{name: "a top root whose check fails: refuse, no fallback", c: top, check: bad, want: RecoverRefuse, inWhy: "CRC-32"},
		{name: "a marker: tombstone", c: ChooseTop(Prefix{Marker: true}), want: RecoverTombstone},
		{name: "an etcd tombstone without marker: left deleted", c: top, e: Etcd{Tombstone: true}, want: RecoverSkip, inWhy: "left deleted"},
		{name: "objects but no root: reported", c: ChooseTop(Prefix{Objects: 2}), want: RecoverOrphans},
		{name: "several version 2 roots: refuse", c: ChooseTop(Prefix{Roots: []Root{v2(1, 1), v2(2, 2)}}), want: RecoverRefuse},
		{name: "single version 2 root, etcd empty: write", c: v2only, want: RecoverWrite, epoch: 2},
		{name: "single version 2 root, etcd names it", c: v2only, e: Etcd{Anchor: true, Record: &Record{Epoch: 2, UID: 0xb}}, want: RecoverUpToDate},
		{name: "single version 2 root, etcd names another", c: v2only, e: Etcd{Anchor: true, Record: &Record{Epoch: 1, UID: 0xa}}, want: RecoverRefuse},
		{name: "single version 2 root, etcd on version 3", c: v2only, e: Etcd{Anchor: true, Record: rec(1, 3)}, want: RecoverSkip},
		{name: "roots not read: refuse", c: TopChoice{Outcome: TopNeedRoots}, want: RecoverRefuse},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := PlanRecovery(c.c, c.check, c.e)
			if p.Action != c.want || (c.epoch != 0 && p.StoredEpoch != c.epoch) || !strings.Contains(p.Reason, c.inWhy) || p.Reason == "" {
				t.Fatalf("%v epoch %d %q, want %v epoch %d naming %q", p.Action, p.StoredEpoch, p.Reason, c.want, c.epoch, c.inWhy)
			}
		})
	}
}

// TestPure: the package's own files import nothing that does I/O, reads the clock or
// starts goroutines.
func TestPure(t *testing.T) {
	allowed := map[string]bool{"fmt": true, "sort": true, "strings": true, "time": true, "github.com/streamtier/streamtier/manifest": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fs := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(fs, f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if !allowed[p] {
				t.Errorf("%s imports %s", f, p)
			}
		}
		for _, bad := range []string{"time.Now", "time.Since", "go func", "time.After", "time.Sleep"} {
			if strings.Contains(string(src), bad) {
				t.Errorf("%s uses %s", f, bad)
			}
		}
	}
}
