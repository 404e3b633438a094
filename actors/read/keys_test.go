package read

import (
	"fmt"
	"testing"

	"github.com/streamtier/streamtier/manifest"
)

func fragmentEntry(off uint64) manifest.Entry {
	return manifest.Entry{Kind: manifest.KindFragment, FirstOffset: off, UID: off*7 + 1}
}

// Keys gives back what was put, per stream, kind and uid, never for a gap, stays within its
// size, and keeps a key that is used through the generations that drop the others.
func TestKeysRemembersBoundedAndKeepsWhatIsUsed(t *testing.T) {
	k := NewKeys(8)
	k.Put("s", fragmentEntry(0), "key-0")
	if got, ok := k.Get("s", fragmentEntry(0)); !ok || got != "key-0" {
		t.Fatalf("get: %q %v", got, ok)
	}
	if _, ok := k.Get("other", fragmentEntry(0)); ok {
		t.Fatal("another stream's entry found")
	}
	other := fragmentEntry(0)
	other.UID++
	if _, ok := k.Get("s", other); ok {
		t.Fatal("an entry with another uid found")
	}
	group := fragmentEntry(0)
	group.Kind = manifest.KindGroup
	if _, ok := k.Get("s", group); ok {
		t.Fatal("a group found under its first fragment's key")
	}
	k.Put("s", group, "group-key")
	if got, ok := k.Get("s", group); !ok || got != "group-key" {
		t.Fatalf("group: %q %v", got, ok)
	}
	gap := manifest.Entry{Kind: manifest.KindGap, FirstOffset: 5}
	k.Put("s", gap, "gap-key")
	if _, ok := k.Get("s", gap); ok {
		t.Fatal("a gap's key kept")
	}
	for i := uint64(1); i <= 100; i++ {
		k.Put("s", fragmentEntry(i), fmt.Sprint("key-", i))
		if _, ok := k.Get("s", fragmentEntry(0)); !ok {
			t.Fatalf("key 0, used after every put, dropped after %d puts", i)
		}
		if k.len() > 8 {
			t.Fatalf("%d keys kept, at most 8", k.len())
		}
	}
	if _, ok := k.Get("s", fragmentEntry(1)); ok {
		t.Fatal("key 1, never used, still kept after 100 puts")
	}
	if got, ok := k.Get("s", fragmentEntry(100)); !ok || got != "key-100" {
		t.Fatalf("the last put: %q %v", got, ok)
	}
	var none *Keys
	none.Put("s", fragmentEntry(0), "k")
	if _, ok := none.Get("s", fragmentEntry(0)); ok || none.len() != 0 {
		t.Fatal("a nil Keys remembered something")
	}
}
