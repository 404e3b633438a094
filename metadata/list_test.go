package metadata_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
)

// ListStreams pages through the streams with records, each once, in key order, whatever
// the page size (one below, at and above the batch of keys a request reads); ids that
// continue with '-' or '.' (which sort before "<id>/") are not lost across a page boundary;
// a deleted stream is not listed; other records under the prefix (the cluster's) are not
// streams; a bad argument is refused before any request.
func TestListStreams(t *testing.T) {
	e := etcdtest.Start(t)
	s := etcdtest.Store(t, e)
	ctx := testCtx(t, 60*time.Second)

	empty, err := s.ListStreams(ctx, "", 10)
	if err != nil || len(empty.Streams) != 0 || empty.After != "" {
		t.Fatalf("empty store: %+v, %v", empty, err)
	}
	var want []string
	for i := range 300 {
		want = append(want, fmt.Sprintf("s%03d", i))
	}
	want = append(want, "a", "a-b", "a.c", "ab")
	for _, id := range want {
		if err := s.Anchor(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	// A second record for some: a stream is listed once however many keys it has.
	for _, id := range []string{"a", "s007", "s299"} {
		if _, err := e.Client().Put(ctx, metadata.EpochKey(s.Prefix(), id), "00000000000000000001"); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Anchor(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteStream(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client().Put(ctx, metadata.MemberKey(s.Prefix(), "node-1"), "{}"); err != nil {
		t.Fatal(err)
	}
	// Key order: "a-b/" < "a.c/" < "a/" < "ab/" < "s000/" ...
	slices.SortFunc(want, func(x, y string) int {
		switch a, b := x+"/", y+"/"; {
		case a < b:
			return -1
		case a > b:
			return 1
		}
		return 0
	})
	for _, size := range []int{1, 3, 170, 303, 304, 305, 1000} {
		var got []string
		after, pages := "", 0
		for {
			page, err := s.ListStreams(ctx, after, size)
			if err != nil {
				t.Fatalf("page size %d after %q: %v", size, after, err)
			}
			if len(page.Streams) > size {
				t.Fatalf("page size %d: %d streams", size, len(page.Streams))
			}
			got = append(got, page.Streams...)
			pages++
			if page.After == "" {
				break
			}
			after = page.After
		}
		if !slices.Equal(got, want) {
			t.Fatalf("page size %d: listed %d streams %v..., want %d %v...", size, len(got), got[:min(6, len(got))], len(want), want[:6])
		}
		if wantPages := (len(want) + size - 1) / size; pages != wantPages {
			t.Fatalf("page size %d: %d pages, want %d", size, pages, wantPages)
		}
	}
	for _, bad := range []struct {
		after string
		limit int
	}{{"", 0}, {"", -1}, {"../x", 5}, {"a/b", 5}} {
		if _, err := s.ListStreams(ctx, bad.after, bad.limit); err == nil {
			t.Errorf("ListStreams(%q, %d) accepted", bad.after, bad.limit)
		}
	}
}
