package s3io_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
)

// v1Key is the version 1 key earlier writers gave the object e names: <off20>-<uid16>.
func v1Key(keyPrefix, stream string, e manifest.Entry) string {
	return manifest.EntryListPrefix(keyPrefix, stream, e) + fmt.Sprintf("%016x.%s", e.UID, e.Kind)
}

// TestLocateEntry puts objects under version 1 and version 2 keys next to decoys (same
// offset and another uid, same uid and another offset or kind, another stream, an offset
// whose digits extend the wanted one) and checks that LocateEntry and LocateEntries find
// exactly the key naming each entry, that a missing one is ErrNotFound (and IsNotFound),
// and that an unreachable server is not.
func TestLocateEntry(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{})
	cfg := srv.NewBucket(t)
	cfg.ListPageSize = 2 // several pages for the range listings
	st := newStore(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const p, s = "tier", "orders"
	v1frag := manifest.Entry{FirstOffset: 100, UID: 0xa1, Kind: manifest.KindFragment}
	v2frag := manifest.Entry{FirstOffset: 200, UID: 0xa2, Kind: manifest.KindFragment}
	v1group := manifest.Entry{FirstOffset: 100, UID: 0xb1, Kind: manifest.KindGroup}
	v2kgroup := manifest.Entry{FirstOffset: 100, UID: 0xb2, Kind: manifest.KindKiloGroup}
	keys := map[manifest.Entry]string{
		v1frag:   v1Key(p, s, v1frag),
		v2frag:   manifest.FragmentKey(p, s, 200, 3, 0xa2),
		v1group:  v1Key(p, s, v1group),
		v2kgroup: manifest.GroupKey(p, s, manifest.KindKiloGroup, 100, 7, 0xb2),
	}
	decoys := []string{
		manifest.FragmentKey(p, s, 100, 3, 0xff),                       // same offset, other uid
		manifest.FragmentKey(p, s, 1000, 3, 0xa1),                      // same uid, offset 100 extended
		manifest.FragmentKey(p, s, 150, 3, 0xa2),                       // same uid, other offset
		manifest.GroupKey(p, s, manifest.KindGroup, 200, 3, 0xa2),      // same offset and uid, a group
		manifest.FragmentKey(p, "orders2", 200, 3, 0xa2),               // another stream
		manifest.RootKey(p, s, 3, 0xa2),                                // a root
		manifest.StreamPrefix(p, s) + "data/00000000000000000200-junk", // not a key
	}
	for _, k := range keys {
		if err := st.PutObject(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range decoys {
		if err := st.PutObject(ctx, k, []byte("decoy")); err != nil {
			t.Fatal(err)
		}
	}
	for e, want := range keys {
		got, err := st.LocateEntry(ctx, p, s, e)
		if err != nil || got != want {
			t.Errorf("LocateEntry(%+v) = %q, %v; want %q", e, got, err, want)
		}
	}

	missing := manifest.Entry{FirstOffset: 200, UID: 0xa3}
	_, err := st.LocateEntry(ctx, p, s, missing)
	if !errors.Is(err, s3io.ErrNotFound) || !s3io.IsNotFound(err) || s3io.Classify(err) != s3io.ClassNonTransient || !strings.Contains(err.Error(), "00000000000000000200-") {
		t.Fatalf("missing entry: %v (class %s)", err, s3io.Classify(err))
	}
	if _, err := st.LocateEntry(ctx, p, s, manifest.GapEntry(100)); !errors.Is(err, s3io.ErrInvalidArgument) {
		t.Fatalf("gap entry: %v", err)
	}

	// Both the per-entry path (fewer than four of a kind) and the range listing.
	all := []manifest.Entry{v1frag, v2frag, v1group, v2kgroup, missing, manifest.GapEntry(150)}
	for _, extra := range [][]manifest.Entry{nil, {{FirstOffset: 120, UID: 1}, {FirstOffset: 130, UID: 2}, {FirstOffset: 10, UID: 3, Kind: manifest.KindGroup}, {FirstOffset: 999, UID: 4, Kind: manifest.KindMegaGroup}}} {
		got, err := st.LocateEntries(ctx, p, s, append(append([]manifest.Entry(nil), all...), extra...))
		if err != nil || len(got) != len(keys) {
			t.Fatalf("LocateEntries (%d extra): %v, %v", len(extra), got, err)
		}
		for e, want := range keys {
			if got[e] != want {
				t.Errorf("LocateEntries (%d extra): %+v -> %q, want %q", len(extra), e, got[e], want)
			}
		}
	}

	// Two keys naming one entry: refused, not guessed.
	if err := st.PutObject(ctx, manifest.FragmentKey(p, s, 100, 9, 0xa1), []byte("copy")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.LocateEntry(ctx, p, s, v1frag); err == nil || s3io.IsNotFound(err) || !strings.Contains(err.Error(), "2 keys") {
		t.Fatalf("ambiguous entry: %v", err)
	}

	// A server that does not answer is not "missing".
	down := cfg
	down.Endpoint, down.RequestTimeout = "http://127.0.0.1:1", 2*time.Second
	_, err = newStore(t, down).LocateEntry(ctx, p, s, v2frag)
	if err == nil || s3io.IsNotFound(err) || s3io.Classify(err) != s3io.ClassRetriable {
		t.Fatalf("unreachable server: %v (class %s)", err, s3io.Classify(err))
	}
	if _, err := newStore(t, down).LocateEntries(ctx, p, s, all); err == nil || s3io.IsNotFound(err) {
		t.Fatalf("unreachable server, LocateEntries: %v", err)
	}
}
