package manifest

import (
	"fmt"
	"strings"
	"testing"
)

// v1Key is a version 1 key as earlier writers made it: <off20>-<uid16>, no epoch.
func v1Key(keyPrefix, stream string, e Entry) string {
	return EntryListPrefix(keyPrefix, stream, e) + fmt.Sprintf("%016x.%s", e.UID, e.Kind)
}

func TestParseKey(t *testing.T) {
	const p = "tier/one"
	good := map[string]ObjectKey{
		FragmentKey(p, "s-1", 42, 7, 0xabc):                                  {Stream: "s-1", Kind: ObjectFragment, KeyVersion: 2, Offset: 42, Epoch: 7, UID: 0xabc},
		GroupKey(p, "s-1", KindGroup, 7, 1, 1):                               {Stream: "s-1", Kind: ObjectGroup, KeyVersion: 2, Offset: 7, Epoch: 1, UID: 1},
		GroupKey(p, "s.2", KindKiloGroup, 0, ^uint64(0), 0xffffffffffffffff): {Stream: "s.2", Kind: ObjectKiloGroup, KeyVersion: 2, Epoch: ^uint64(0), UID: 0xffffffffffffffff},
		GroupKey(p, "s", KindMegaGroup, 9, 0, 2):                             {Stream: "s", Kind: ObjectMegaGroup, KeyVersion: 2, Offset: 9, UID: 2},
		RootKey(p, "s", 3, 0x10):                                             {Stream: "s", Kind: ObjectRoot, KeyVersion: 2, Epoch: 3, UID: 0x10},
		v1Key(p, "s-1", Entry{FirstOffset: 42, UID: 0xabc}):                  {Stream: "s-1", Kind: ObjectFragment, KeyVersion: 1, Offset: 42, UID: 0xabc},
		v1Key(p, "s", Entry{FirstOffset: 5, UID: 6, Kind: KindKiloGroup}):    {Stream: "s", Kind: ObjectKiloGroup, KeyVersion: 1, Offset: 5, UID: 6},
	}
	for key, want := range good {
		got, err := ParseKey(p, key)
		if err != nil || got != want {
			t.Errorf("ParseKey(%q) = %+v, %v; want %+v", key, got, err, want)
		}
	}
	frag := FragmentKey(p, "s", 42, 7, 0xabc)
	v1 := v1Key(p, "s", Entry{FirstOffset: 42, UID: 0xabc})
	h4 := strings.Split(frag, "/")[2]
	sp := StreamPrefix(p, "s")
	bad := []string{
		"other/" + frag,
		p + "/readme.txt",
		strings.Replace(frag, h4, "0000", 1),
		strings.Replace(frag, ".fragment", ".frag", 1),
		strings.Replace(frag, "/data/", "/meta/", 1),
		strings.Replace(frag, "-0000000000000abc", "-0000000000000ABC", 1),
		strings.Replace(frag, "-0000000000000abc", "-abc", 1),
		strings.Replace(frag, "-00000000000000000007-", "-7-", 1),
		strings.Replace(frag, "-00000000000000000007-", "-0000000000000000000x-", 1),
		strings.Replace(frag, "-00000000000000000007-", "-99999999999999999999-", 1), // above 2^64
		strings.Replace(frag, "/data/", "/dat/", 1),
		strings.Replace(v1, "-0000000000000abc", "-+000000000000abc", 1),
		strings.Replace(v1, ".fragment", "-0000000000000001-0000000000000001.fragment", 1),
		sp + "data/00000000000000000042.fragment",
		sp + "meta/root-1.manifest",
		sp + "meta/root-00000000000000000001-00000000000000000001-0000000000000001.manifest",
		sp + "meta/00000000000000000001-0000000000000001.bgroup",
		sp + "meta/00000000000000000001-0000000000000001.gap",
		sp + "meta/x/y",
	}
	for _, key := range bad {
		if k, err := ParseKey(p, key); err == nil {
			t.Errorf("ParseKey(%q) accepted: %+v", key, k)
		} else if !strings.Contains(err.Error(), key) {
			t.Errorf("ParseKey(%q): error %q does not name the key", key, err)
		}
	}
}

// TestEntryListPrefixAndNames: both layouts of an entry's key sort under its list prefix and
// name it; keys of other offsets, uids or kinds do not, and nothing names a gap.
func TestEntryListPrefixAndNames(t *testing.T) {
	const p = "streams"
	entries := []Entry{
		{FirstOffset: 100, UID: 0xa, Kind: KindFragment},
		{FirstOffset: 100, UID: 0xa, Kind: KindGroup},
		{FirstOffset: 100, UID: 0xa, Kind: KindKiloGroup},
		{FirstOffset: 100, UID: 0xa, Kind: KindMegaGroup},
		{FirstOffset: 1000, UID: 0xa, Kind: KindFragment},
		{FirstOffset: 100, UID: 0xb, Kind: KindFragment},
	}
	keyOf := func(e Entry, epoch uint64) string {
		if e.Kind == KindFragment {
			return FragmentKey(p, "s", e.FirstOffset, epoch, e.UID)
		}
		return GroupKey(p, "s", e.Kind, e.FirstOffset, epoch, e.UID)
	}
	for i, e := range entries {
		prefix := EntryListPrefix(p, "s", e)
		for _, key := range []string{keyOf(e, 0), keyOf(e, 12345678901234567890), v1Key(p, "s", e)} {
			if !strings.HasPrefix(key, prefix) {
				t.Errorf("%s does not sort under %s", key, prefix)
			}
			k, err := ParseKey(p, key)
			if err != nil {
				t.Fatal(err)
			}
			for j, other := range entries {
				if got := k.Names(other); got != (i == j) {
					t.Errorf("%s names %+v: %t", key, other, got)
				}
			}
			if k.Names(GapEntry(100)) {
				t.Errorf("%s names a gap", key)
			}
		}
		// Another offset whose digits extend this one's never sorts under the prefix.
		if longer := keyOf(Entry{FirstOffset: e.FirstOffset*10 + 1, UID: e.UID, Kind: e.Kind}, 1); strings.HasPrefix(longer, prefix) {
			t.Errorf("%s sorts under %s", longer, prefix)
		}
	}
	root, _ := ParseKey(p, RootKey(p, "s", 100, 0xa))
	if root.Names(Entry{FirstOffset: 100, UID: 0xa}) {
		t.Error("a root names an entry")
	}
}

func TestKeyIndex(t *testing.T) {
	const p = "streams"
	x := NewKeyIndex(p)
	e1 := Entry{FirstOffset: 0, UID: 1}
	e2 := Entry{FirstOffset: 50, UID: 2, Kind: KindGroup}
	e3 := Entry{FirstOffset: 50, UID: 3}
	keys := []string{
		FragmentKey(p, "a", 0, 4, 1),
		v1Key(p, "a", e2),
		FragmentKey(p, "b", 50, 1, 3), // another stream's
		RootKey(p, "a", 4, 1),
	}
	for _, k := range keys {
		if _, err := x.Add(k); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := x.Add(p + "/README"); err == nil {
		t.Fatal("a foreign key was indexed")
	}
	for _, c := range []struct {
		stream string
		e      Entry
		want   string
	}{
		{"a", e1, keys[0]}, {"a", e2, keys[1]}, {"b", e3, keys[2]}, {"a", e3, ""},
		{"a", Entry{FirstOffset: 1, UID: 1}, ""}, {"a", Entry{FirstOffset: 0, UID: 1, Kind: KindGroup}, ""},
	} {
		got, ok := x.Lookup(c.stream, c.e)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("Lookup(%s, %+v) = %q, %t; want %q", c.stream, c.e, got, ok, c.want)
		}
	}
}
