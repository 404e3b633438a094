package s3io_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
)

// TestConditionalCreate: one root per seq: the second create of a key is refused as a
// precondition failure and leaves the first object as it was.
func TestConditionalCreate(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{})
	st := newStore(t, srv.Config())
	ctx := context.Background()
	key := manifest.SeqRootKey("p", "s", 1)
	if err := st.PutObjectIfAbsent(ctx, key, []byte("first")); err != nil {
		t.Fatal(err)
	}
	err := st.PutObjectIfAbsent(ctx, key, []byte("second"))
	if !errors.Is(err, s3io.ErrPreconditionFailed) || !s3io.IsPreconditionFailed(err) || !strings.Contains(err.Error(), key) {
		t.Fatalf("second create: %v, want a precondition failure naming %s", err, key)
	}
	if got, err := st.GetObject(ctx, key); err != nil || string(got) != "first" {
		t.Fatalf("after the refused create: %q, %v", got, err)
	}
	b, info, err := st.GetObjectInfo(ctx, key)
	if err != nil || string(b) != "first" || info.ETag == "" || info.LastModified.IsZero() {
		t.Fatalf("GetObjectInfo: %q %+v %v", b, info, err)
	}
	if err := st.PutObjectIfMatch(ctx, key, []byte("other"), `"0123"`); !errors.Is(err, s3io.ErrPreconditionFailed) {
		t.Fatalf("replace with a stale ETag: %v", err)
	}
	if err := st.PutObjectIfMatch(ctx, key, []byte("third"), info.ETag); err != nil {
		t.Fatalf("replace with the ETag read: %v", err)
	}
}

func TestProbeConditionalCreate(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{})
	st := newStore(t, srv.Config())
	ctx := context.Background()
	if err := st.ProbeConditionalCreate(ctx, "p"); err != nil {
		t.Fatalf("versitygw honours If-None-Match, the probe refused it: %v", err)
	}
	var left []string
	if err := st.List(ctx, "p/", func(o s3io.ObjectInfo) error { left = append(left, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("the probe left %v", left)
	}

	// A store that ignores the header is refused, by name.
	inj := s3test.NewInjector(t, srv)
	inj.Add(s3test.Rule{Method: "PUT", Fault: s3test.FaultIgnoreConditions})
	bad := newStore(t, inj.Config())
	err := bad.ProbeConditionalCreate(ctx, "p")
	if !errors.Is(err, s3io.ErrNoConditionalCreate) || !strings.Contains(err.Error(), "If-None-Match") {
		t.Fatalf("probe of a store ignoring If-None-Match: %v", err)
	}
}

func TestClaimObject(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{})
	st := newStore(t, srv.Config())
	ctx := context.Background()
	if _, found, err := st.ReadClaim(ctx, "p"); err != nil || found {
		t.Fatalf("claim of an empty bucket: %v %v", found, err)
	}
	id, err := s3io.NewClusterID(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	c := s3io.Claim{ClusterID: id, Generation: 1, EtcdPrefix: "/streamtier", Created: time.Date(2026, 12, 2, 1, 2, 3, 0, time.UTC)}
	if err := st.CreateClaim(ctx, "p", c); err != nil {
		t.Fatal(err)
	}
	other := c
	other.ClusterID = strings.Repeat("a", 32)
	if err := st.CreateClaim(ctx, "p", other); !errors.Is(err, s3io.ErrPreconditionFailed) {
		t.Fatalf("a second claim: %v", err)
	}
	got, found, err := st.ReadClaim(ctx, "p")
	if err != nil || !found || got.ClusterID != id || got.Generation != 1 || !got.Created.Equal(c.Created) || got.ETag == "" {
		t.Fatalf("read claim: %+v %v %v", got, found, err)
	}
	raw, err := st.GetObject(ctx, manifest.ClaimKey("p"))
	if err != nil || !bytes.Equal(raw, []byte(`{"format":3,"cluster_id":"`+id+`","generation":1,"etcd_prefix":"/streamtier","created":"2026-12-02T01:02:03Z"}`)) {
		t.Fatalf("stored claim %s, %v", raw, err)
	}
	next := got
	next.Generation = 2
	if err := st.ReplaceClaim(ctx, "p", got, next); err != nil {
		t.Fatalf("takeover: %v", err)
	}
	if err := st.ReplaceClaim(ctx, "p", got, next); !errors.Is(err, s3io.ErrPreconditionFailed) {
		t.Fatalf("a takeover from a stale read: %v", err)
	}
	if now, _, _ := st.ReadClaim(ctx, "p"); now.Generation != 2 {
		t.Fatalf("generation %d after the takeover", now.Generation)
	}
}

func TestClaimDecodeRefusals(t *testing.T) {
	id := strings.Repeat("0f", 16)
	for name, doc := range map[string]string{
		"format 2":      `{"format":2,"cluster_id":"` + id + `","generation":1,"etcd_prefix":"/x","created":"2026-01-01T00:00:00Z"}`,
		"generation 0":  `{"format":3,"cluster_id":"` + id + `","generation":0,"etcd_prefix":"/x","created":"2026-01-01T00:00:00Z"}`,
		"short id":      `{"format":3,"cluster_id":"abc","generation":1,"etcd_prefix":"/x","created":"2026-01-01T00:00:00Z"}`,
		"missing field": `{"format":3,"cluster_id":"` + id + `","generation":1,"created":"2026-01-01T00:00:00Z"}`,
		"unknown field": `{"format":3,"cluster_id":"` + id + `","generation":1,"etcd_prefix":"/x","created":"2026-01-01T00:00:00Z","x":1}`,
		"bad time":      `{"format":3,"cluster_id":"` + id + `","generation":1,"etcd_prefix":"/x","created":"yesterday"}`,
		"trailing":      `{"format":3,"cluster_id":"` + id + `","generation":1,"etcd_prefix":"/x","created":"2026-01-01T00:00:00Z"} {}`,
	} {
		if _, err := s3io.DecodeClaim("p/claim", []byte(doc)); !errors.Is(err, s3io.ErrCorruptBucketObject) || !strings.Contains(err.Error(), "p/claim") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestDeletionMarker(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{})
	st := newStore(t, srv.Config())
	ctx := context.Background()
	if has, err := st.HasMarker(ctx, "p", "s"); err != nil || has {
		t.Fatalf("marker before deletion: %v %v", has, err)
	}
	m := s3io.Marker{Stream: "s", ClusterID: strings.Repeat("1", 32), Time: time.UnixMilli(1700000000123).UTC()}
	if err := st.CreateMarker(ctx, "p", m); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateMarker(ctx, "p", m); err != nil {
		t.Fatalf("a deletion completed again: %v", err)
	}
	if has, err := st.HasMarker(ctx, "p", "s"); err != nil || !has {
		t.Fatalf("marker after deletion: %v %v", has, err)
	}
	b, err := st.GetObject(ctx, manifest.MarkerKey("p", "s"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := s3io.DecodeMarker(manifest.MarkerKey("p", "s"), "s", b)
	if err != nil || got != m {
		t.Fatalf("marker %+v, %v; want %+v", got, err, m)
	}
	if _, err := s3io.DecodeMarker("k", "other", b); !errors.Is(err, s3io.ErrCorruptBucketObject) {
		t.Fatalf("a marker of another stream: %v", err)
	}
	if _, err := st.HasMarker(ctx, "p", "../x"); err == nil {
		t.Fatal("an invalid stream id was asked about")
	}
}

func TestServerTime(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{})
	st := newStore(t, srv.Config())
	ctx := context.Background()
	if err := st.PutObject(ctx, "p/x", []byte("x")); err != nil {
		t.Fatal(err)
	}
	now, err := st.ServerTime(ctx, "p/")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Head(ctx, "p/x")
	if err != nil {
		t.Fatal(err)
	}
	// The same machine: the store's Date (whole seconds) is within a few seconds of the
	// object it just stored.
	if d := now.Sub(info.LastModified); d < -2*time.Second || d > 10*time.Second {
		t.Fatalf("server time %v, object written %v", now, info.LastModified)
	}
}

func TestListDir(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{})
	st := newStore(t, srv.Config())
	ctx := context.Background()
	for _, k := range []string{"p/a/x", "p/a/y", "p/b/z", "p/claim"} {
		if err := st.PutObject(ctx, k, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	objs, prefixes, err := st.ListDir(ctx, "p/")
	if err != nil || len(objs) != 1 || objs[0].Key != "p/claim" || strings.Join(prefixes, ",") != "p/a/,p/b/" {
		t.Fatalf("%v %v %v", objs, prefixes, err)
	}
}

// TestListAfter: the keys under a prefix that sort after a key, as a resolution lists the
// roots from a seq on ("" lists them all).
func TestListAfter(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{})
	st := newStore(t, srv.Config())
	ctx := context.Background()
	for _, k := range []string{"p/root-1.m", "p/root-2.m", "p/root-3.m", "q/root-9.m"} {
		if err := st.PutObject(ctx, k, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	list := func(after string) string {
		var keys []string
		if err := st.ListAfter(ctx, "p/root-", after, func(o s3io.ObjectInfo) error {
			keys = append(keys, o.Key)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return strings.Join(keys, ",")
	}
	if got := list("p/root-2"); got != "p/root-2.m,p/root-3.m" {
		t.Fatalf("after p/root-2: %s", got)
	}
	if got := list(""); got != "p/root-1.m,p/root-2.m,p/root-3.m" {
		t.Fatalf("all: %s", got)
	}
}
