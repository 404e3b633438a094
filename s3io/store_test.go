package s3io_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
)

func TestConfigValidate(t *testing.T) {
	good := s3io.Config{Endpoint: "http://127.0.0.1:7070", Region: "us-east-1", Bucket: "streams", PathStyle: true, AccessKey: "a", SecretKey: "s"}
	if err := good.Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	ca := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(ca, []byte("x"), 0o600)
	withCA := good
	withCA.CAFile = ca
	if err := withCA.Validate(); err != nil {
		t.Fatalf("config with an existing CA file: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(c *s3io.Config)
		want   string // the setting the message must name
	}{
		{"no region", func(c *s3io.Config) { c.Region = "" }, "region"},
		{"no bucket", func(c *s3io.Config) { c.Bucket = "" }, "bucket"},
		{"short bucket", func(c *s3io.Config) { c.Bucket = "ab" }, "bucket"},
		{"upper-case bucket", func(c *s3io.Config) { c.Bucket = "Streams" }, "bucket"},
		{"bucket with slash", func(c *s3io.Config) { c.Bucket = "a/b/c" }, "bucket"},
		{"bucket ending in a dash", func(c *s3io.Config) { c.Bucket = "streams-" }, "bucket"},
		{"endpoint scheme", func(c *s3io.Config) { c.Endpoint = "ftp://host" }, "endpoint"},
		{"endpoint without host", func(c *s3io.Config) { c.Endpoint = "http://" }, "endpoint"},
		{"endpoint with query", func(c *s3io.Config) { c.Endpoint = "http://host/?a=b" }, "endpoint"},
		{"endpoint unparsable", func(c *s3io.Config) { c.Endpoint = "http://[::1" }, "endpoint"},
		{"access key alone", func(c *s3io.Config) { c.SecretKey = "" }, "secret key"},
		{"secret key alone", func(c *s3io.Config) { c.AccessKey = "" }, "access key"},
		{"session token alone", func(c *s3io.Config) { c.AccessKey, c.SecretKey, c.SessionToken = "", "", "t" }, "session token"},
		{"missing CA file", func(c *s3io.Config) { c.CAFile = "/nonexistent/ca.pem" }, "CA file"},
		{"negative request timeout", func(c *s3io.Config) { c.RequestTimeout = -time.Second }, "request timeout"},
		{"negative transfer timeout", func(c *s3io.Config) { c.TransferTimeout = -time.Second }, "transfer timeout"},
		{"list page size", func(c *s3io.Config) { c.ListPageSize = 1001 }, "list page size"},
	} {
		c := good
		tc.mutate(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.name, err, tc.want)
		}
		if _, err := s3io.NewStore(context.Background(), c); err == nil {
			t.Errorf("%s: NewStore accepted it", tc.name)
		}
	}
}

func TestSmallObjects(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{})
	st := newStore(t, srv.Config())
	ctx := context.Background()
	body := bytes.Repeat([]byte("0123456789"), 1000)
	if err := st.PutObject(ctx, "meta/root", body); err != nil {
		t.Fatal(err)
	}
	got, err := st.GetObject(ctx, "meta/root")
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("get: %v (%d bytes)", err, len(got))
	}
	rng, err := st.GetRange(ctx, "meta/root", 9990, 10)
	if err != nil || string(rng) != "0123456789" {
		t.Fatalf("range: %v %q", err, rng)
	}
	info, err := st.Head(ctx, "meta/root")
	if err != nil || info.Size != int64(len(body)) || info.Key != "meta/root" || info.LastModified.IsZero() {
		t.Fatalf("head: %v %+v", err, info)
	}
	// Empty objects are objects.
	if err := st.PutObject(ctx, "meta/empty", nil); err != nil {
		t.Fatal(err)
	}
	if got, err := st.GetObject(ctx, "meta/empty"); err != nil || len(got) != 0 {
		t.Fatalf("empty: %v %d bytes", err, len(got))
	}

	_, err = st.GetObject(ctx, "meta/missing")
	if !s3io.IsNotFound(err) {
		t.Fatalf("missing object: %v, want not found", err)
	}
	wantClass(t, err, s3io.ClassNonTransient)
	_, err = st.Head(ctx, "meta/missing")
	if !s3io.IsNotFound(err) {
		t.Fatalf("head missing: %v", err)
	}
	// A range the object cannot satisfy is the caller's mistake.
	_, err = st.GetRange(ctx, "meta/root", 9995, 10)
	wantClass(t, err, s3io.ClassNonTransient)
	_, err = st.GetRange(ctx, "meta/root", -1, 10)
	if !errors.Is(err, s3io.ErrInvalidArgument) {
		t.Fatalf("negative offset: %v", err)
	}
	if err := st.PutObject(ctx, "", body); !errors.Is(err, s3io.ErrInvalidArgument) {
		t.Fatalf("empty key: %v", err)
	}
	// Creating an existing bucket is fine.
	if err := st.EnsureBucket(ctx); err != nil {
		t.Fatalf("EnsureBucket on an existing bucket: %v", err)
	}
	snap := st.Metrics().Snapshot()
	if snap[s3io.OpPutObject].Requests != 2 || snap[s3io.OpPutObject].Bytes != uint64(len(body)) {
		t.Fatalf("put_object metrics: %+v", snap[s3io.OpPutObject])
	}
	// The GET of a missing key is a 404: counted apart, not an error (nor is the HEAD).
	if g := snap[s3io.OpGetObject]; g.Requests != 3 || g.Errors() != 0 || g.NotFound != 1 || g.ByClass[s3io.ClassNonTransient] != 0 {
		t.Fatalf("get_object metrics: %+v", g)
	}
	if h := snap[s3io.OpHead]; h.NotFound != 1 || h.Errors() != 0 {
		t.Fatalf("head metrics: %+v", h)
	}
	// A missing bucket is an error, not an answer, except to the bucket check.
	cfg := srv.Config()
	cfg.Bucket = "no-such-bucket-at-all"
	gone := newStore(t, cfg)
	if _, err := gone.GetObject(ctx, "meta/root"); !s3io.IsNotFound(err) {
		t.Fatalf("get from a missing bucket: %v", err)
	}
	if err := gone.PutObject(ctx, "meta/root", body); err == nil {
		t.Fatal("put into a missing bucket succeeded")
	}
	if g := gone.Metrics().Snapshot(); g[s3io.OpGetObject].Errors() != 1 || g[s3io.OpGetObject].NotFound != 0 || g[s3io.OpPutObject].Errors() != 1 {
		t.Fatalf("missing bucket metrics: get %+v put %+v", g[s3io.OpGetObject], g[s3io.OpPutObject])
	}
	var inBuckets uint64
	for _, n := range snap[s3io.OpGetObject].Buckets {
		inBuckets += n
	}
	if inBuckets != 3 || snap[s3io.OpGetObject].Sum <= 0 {
		t.Fatalf("get_object latency histogram holds %d observations, sum %v", inBuckets, snap[s3io.OpGetObject].Sum)
	}
}

// putMany stores n small objects under prefix with a few workers.
func putMany(t *testing.T, st *s3io.Store, prefix string, n int) []string {
	t.Helper()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%06d", prefix, i)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				if err := st.PutObject(context.Background(), keys[i], []byte(keys[i])); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return keys
}

func TestListPaginates(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{})
	cfg := srv.Config()
	cfg.ListPageSize = 7
	st := newStore(t, cfg)
	keys := putMany(t, st, "streams/a/", 25)
	putMany(t, st, "streams/b/", 5)
	before := requests(st, s3io.OpList)
	var got []string
	err := st.List(context.Background(), "streams/a/", func(o s3io.ObjectInfo) error {
		if o.Size != int64(len(o.Key)) {
			t.Errorf("%s: size %d", o.Key, o.Size)
		}
		got = append(got, o.Key)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != strings.Join(keys, ",") {
		t.Fatalf("listed %d keys %v, want %d in order", len(got), got, len(keys))
	}
	if n := requests(st, s3io.OpList) - before; n != 4 {
		t.Fatalf("%d list requests for 25 keys in pages of 7, want 4", n)
	}
	// The callback's error stops the listing.
	seen := 0
	err = st.List(context.Background(), "streams/", func(s3io.ObjectInfo) error {
		seen++
		if seen == 10 {
			return errStop
		}
		return nil
	})
	if !errors.Is(err, errStop) || seen != 10 {
		t.Fatalf("stopped listing: %v after %d", err, seen)
	}
	// An empty prefix lists nothing without error.
	if err := st.List(context.Background(), "nothing/", func(s3io.ObjectInfo) error { return errStop }); err != nil {
		t.Fatal(err)
	}
}

func TestDeleteObjects(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{})
	st := newStore(t, srv.Config())
	ctx := context.Background()
	// 1005 keys make two requests; real objects sit in both batches, the rest never
	// existed (deleting a missing key succeeds in S3).
	real := append(putMany(t, st, "streams/gc/a", 5), putMany(t, st, "streams/gc/z", 5)...)
	var keys []string
	keys = append(keys, real[:5]...)
	for i := 0; i < 995; i++ {
		keys = append(keys, fmt.Sprintf("streams/gc/m%06d", i))
	}
	keys = append(keys, real[5:]...)
	before := requests(st, s3io.OpDeleteObjects)
	failed, err := st.DeleteObjects(ctx, keys)
	if err != nil || len(failed) != 0 {
		t.Fatalf("delete: %v, failed %v", err, failed)
	}
	if n := requests(st, s3io.OpDeleteObjects) - before; n != 2 {
		t.Fatalf("%d delete requests for %d keys, want 2", n, len(keys))
	}
	left := 0
	st.List(ctx, "streams/gc/", func(s3io.ObjectInfo) error { left++; return nil })
	if left != 0 {
		t.Fatalf("%d objects left after delete", left)
	}

	// Per-key refusals come back by key: the posix backend will not delete a directory
	// object that still has objects under it.
	if err := st.PutObject(ctx, "streams/dir/x", []byte("x")); err != nil {
		t.Fatal(err)
	}
	failed, err = st.DeleteObjects(ctx, []string{"streams/dir/", "streams/dir/never"})
	if err != nil {
		t.Fatal(err)
	}
	var ke *s3io.KeyError
	if len(failed) != 1 || !errors.As(failed["streams/dir/"], &ke) || ke.Code == "" {
		t.Fatalf("per-key errors: %v", failed)
	}
	if failed, err := st.DeleteObjects(ctx, nil); err != nil || len(failed) != 0 {
		t.Fatalf("delete of no keys: %v %v", failed, err)
	}
}
