package s3io_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
)

// recorded is one request as the SDK signed and sent it.
type recorded struct {
	op     string
	method string
	header http.Header
}

type recorder struct {
	mu   sync.Mutex
	reqs []recorded
}

func (r *recorder) record(op string, h http.Header, method, _ string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, recorded{op: op, method: method, header: h})
}

func (r *recorder) all() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.reqs...)
}

// exercise makes one request of every kind the node makes.
func exercise(t *testing.T, st *s3io.Store, dir string, d fragment.Description) []error {
	t.Helper()
	ctx := context.Background()
	var errs []error
	note := func(err error) { errs = append(errs, err) }
	_, err := st.PutFragment(ctx, "data/f", dir, d)
	note(err)
	note(st.PutObject(ctx, "meta/root", []byte("root")))
	_, err = st.GetObject(ctx, "meta/root")
	note(err)
	_, err = st.GetRange(ctx, "meta/root", 0, 2)
	note(err)
	_, err = st.GetRangePartial(ctx, "meta/root", 1, 10, nil)
	note(err)
	_, err = st.Head(ctx, "meta/root")
	note(err)
	note(st.List(ctx, "meta/", func(s3io.ObjectInfo) error { return nil }))
	_, err = st.DeleteObjects(ctx, []string{"meta/root"})
	note(err)
	note(st.ProbeBucket(ctx, ""))
	note(st.EnsureBucket(ctx))
	return errs
}

// TestEncryptionAndOwnerHeaders: with s3_sse and s3_expected_bucket_owner set, every
// object PUT (fragment and small object) asks for the encryption (and the KMS key), and
// every request (PUT, GET, HEAD, LIST, DELETE, the probe, the bucket check) carries the
// expected owner, as signed and sent by the SDK; the server accepts SSE-S3 and refuses a
// wrong owner. Without them no such header is sent.
func TestEncryptionAndOwnerHeaders(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{})
	dir, frags := genLog(t, s3test.LogSpec{Seed: 3, Chunks: 10, MinData: 1000, MaxData: 4000, SegmentBytes: 1 << 20}, 1<<40)
	const owner = "123456789012"
	for _, tc := range []struct {
		name, sse, kms, owner string
	}{
		{name: "none"},
		{name: "sse-s3-only", sse: s3io.SSEAES256},
		{name: "sse-s3", sse: s3io.SSEAES256, owner: owner},
		{name: "sse-kms", sse: s3io.SSEKMS, kms: "arn:aws:kms:us-east-1:123456789012:key/abcd", owner: owner},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := srv.NewBucket(t)
			cfg.SSE, cfg.SSEKMSKeyID, cfg.ExpectedBucketOwner = tc.sse, tc.kms, tc.owner
			rec := &recorder{}
			st, err := s3io.NewRecordingStore(context.Background(), cfg, rec.record)
			if err != nil {
				t.Fatal(err)
			}
			// The server acts on them: SSE-S3 is accepted, and a bucket that does not
			// belong to the expected owner (versitygw's owner is its root access key, not
			// an account id) refuses every request with 403.
			for i, err := range exercise(t, st, dir, frags[0]) {
				switch {
				case tc.owner == "" && err != nil:
					t.Errorf("call %d: %v", i, err)
				case tc.owner != "" && (err == nil || !strings.Contains(err.Error(), "StatusCode: 403")):
					t.Errorf("call %d with a foreign expected owner: %v, want a 403", i, err)
				}
			}
			ops := map[string]bool{}
			for _, r := range rec.all() {
				ops[r.op] = true
				gotOwner := r.header.Get("X-Amz-Expected-Bucket-Owner")
				if r.op == "CreateBucket" {
					if gotOwner != "" {
						t.Errorf("CreateBucket carries an expected owner (S3 does not take one there)")
					}
					continue
				}
				if gotOwner != tc.owner {
					t.Errorf("%s %s: expected bucket owner %q, want %q", r.method, r.op, gotOwner, tc.owner)
				}
				if tc.owner != "" && !strings.Contains(r.header.Get("Authorization"), "x-amz-expected-bucket-owner") {
					t.Errorf("%s: the owner header is not signed", r.op)
				}
				sse, kms := r.header.Get("X-Amz-Server-Side-Encryption"), r.header.Get("X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id")
				if r.op == "PutObject" {
					if sse != tc.sse || kms != tc.kms {
						t.Errorf("PutObject: sse %q kms %q, want %q %q", sse, kms, tc.sse, tc.kms)
					}
				} else if sse != "" || kms != "" {
					t.Errorf("%s asks for encryption (%q): only PUTs do", r.op, sse)
				}
			}
			for _, op := range []string{"PutObject", "GetObject", "HeadObject", "ListObjectsV2", "DeleteObjects", "HeadBucket"} {
				if !ops[op] {
					t.Errorf("no %s request recorded (got %v)", op, ops)
				}
			}
		})
	}
}

// TestEncryptionConfig: bad encryption and owner settings are refused, naming the setting.
func TestEncryptionConfig(t *testing.T) {
	base := s3io.Config{Region: "us-east-1", Bucket: "bucket"}
	for _, tc := range []struct {
		mut  func(*s3io.Config)
		want string
	}{
		{func(c *s3io.Config) { c.SSE = "aes" }, "s3 sse"},
		{func(c *s3io.Config) { c.SSEKMSKeyID = "k" }, "kms key id"},
		{func(c *s3io.Config) { c.SSE, c.SSEKMSKeyID = s3io.SSEAES256, "k" }, "kms key id"},
		{func(c *s3io.Config) { c.ExpectedBucketOwner = "12345" }, "expected bucket owner"},
		{func(c *s3io.Config) { c.ExpectedBucketOwner = "12345678901x" }, "expected bucket owner"},
	} {
		c := base
		tc.mut(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error about %s", c, err, tc.want)
		}
	}
	ok := base
	ok.SSE, ok.SSEKMSKeyID, ok.ExpectedBucketOwner = s3io.SSEKMS, "alias/x", "123456789012"
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
}
