package manifest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func TestValidateStreamID(t *testing.T) {
	good := []string{"a", "Z", "0", "orders", "orders.v2", "my_stream-01", "a.b", strings.Repeat("x", 200)}
	for _, id := range good {
		if err := ValidateStreamID(id); err != nil {
			t.Errorf("%q refused: %v", id, err)
		}
	}
	bad := map[string]string{
		"":                       "empty",
		strings.Repeat("x", 201): "201 characters",
		"..":                     "must start with a letter or digit",
		"a..b":                   `contains ".."`,
		"a/b":                    `character '/'`,
		"../etc":                 "must start",
		".hidden":                "must start",
		"-x":                     "must start",
		"_x":                     "must start",
		"a b":                    `character ' '`,
		"a\x00b":                 `character '\x00'`,
		"strömung":               "character",
		"a\\b":                   "character",
		"a%2Fb":                  "character '%'",
	}
	for id, says := range bad {
		err := ValidateStreamID(id)
		if !errors.Is(err, ErrInvalidStreamID) || !strings.Contains(err.Error(), says) {
			t.Errorf("%q: got %v, want ErrInvalidStreamID saying %q", id, err, says)
		}
	}
}

func TestKeys(t *testing.T) {
	sum := sha256.Sum256([]byte("orders"))
	h4 := hex.EncodeToString(sum[:])[:4]
	prefix := "streams/" + h4 + "/orders/"
	if got := StreamPrefix(DefaultKeyPrefix, "orders"); got != prefix {
		t.Fatalf("prefix %q, want %q", got, prefix)
	}
	cases := map[string]string{
		FragmentKey("streams", "orders", 42, 3, 0xabc):                                                     prefix + "data/00000000000000000042-00000000000000000003-0000000000000abc.fragment",
		FragmentKey("streams", "orders", 18446744073709551615, 18446744073709551615, 18446744073709551615): prefix + "data/18446744073709551615-18446744073709551615-ffffffffffffffff.fragment",
		GroupKey("streams", "orders", KindGroup, 1, 9, 2):                                                  prefix + "meta/00000000000000000001-00000000000000000009-0000000000000002.group",
		GroupKey("streams", "orders", KindKiloGroup, 1, 9, 2):                                              prefix + "meta/00000000000000000001-00000000000000000009-0000000000000002.kgroup",
		GroupKey("streams", "orders", KindMegaGroup, 1, 9, 2):                                              prefix + "meta/00000000000000000001-00000000000000000009-0000000000000002.mgroup",
		EntryListPrefix("streams", "orders", Entry{FirstOffset: 42, UID: 0xabc}):                           prefix + "data/00000000000000000042-",
		EntryListPrefix("streams", "orders", Entry{FirstOffset: 3, UID: 4, Kind: KindKiloGroup}):           prefix + "meta/00000000000000000003-",
		RootKey("streams", "orders", 7, 0xff):                                                              prefix + "meta/root-00000000000000000007-00000000000000ff.manifest",
	}
	for got, want := range cases {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}
