package embeds3_test

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"io"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	smithy "github.com/aws/smithy-go"

	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/embeds3"
	"github.com/streamtier/streamtier/s3io/s3test"
)

// TestEmbedded runs the in-process endpoint (one per process, so one test does it all):
// fragments round-trip, the server verifies CRC-32 and signatures, a second instance is
// refused (ErrRunning), and Close stops it and gives the working directory back.
func TestEmbedded(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chdir(wd) }) // the posix backend moves the working directory
	logDir := t.TempDir()              // absolute, as everything must be once the gateway runs
	chunks, err := s3test.WriteLog(logDir, s3test.LogSpec{Seed: 21, Chunks: 80, MinData: 100, MaxData: 40_000, MaxTrailer: 40, SegmentBytes: 600_000})
	if err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	srv, err := embeds3.Start(ctx, filepath.Join(t.TempDir(), "s3"))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if !strings.HasPrefix(srv.Endpoint, "http://127.0.0.1:") {
		t.Fatalf("endpoint %s is not on loopback", srv.Endpoint)
	}
	st, err := s3io.NewStore(ctx, srv.Config("streams"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.EnsureBucket(ctx); err != nil {
		t.Fatal(err)
	}

	for i, d := range s3test.Describe(chunks, 1<<20) {
		key := "streams/x/data/" + string(rune('a'+i)) + ".fragment"
		if _, err := st.PutFragment(ctx, key, logDir, d); err != nil {
			t.Fatalf("fragment %d: %v", i, err)
		}
		want, err := s3test.ExpectedObject(logDir, d)
		if err != nil {
			t.Fatal(err)
		}
		obj, err := st.ReadFragment(ctx, key)
		if err != nil || !bytes.Equal(obj.Bytes, want) {
			t.Fatalf("fragment %d read back: %v (equal: %v)", i, err, bytes.Equal(obj.Bytes, want))
		}
	}

	// The server checks the CRC-32 it is given: a wrong one is BadDigest, nothing stored.
	client := s3.NewFromConfig(aws.Config{Region: srv.Region, Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey}, nil
	})}, func(o *s3.Options) { o.BaseEndpoint, o.UsePathStyle = aws.String(srv.Endpoint), true })
	_, err = client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String("streams"), Key: aws.String("bad-crc"), Body: bytes.NewReader([]byte("payload")),
		ChecksumCRC32: aws.String("AAAAAA=="),
	})
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "BadDigest" {
		t.Fatalf("put with a wrong CRC-32: %v, want BadDigest", err)
	}
	if _, err := st.Head(ctx, "bad-crc"); !s3io.IsNotFound(err) {
		t.Fatalf("object with a wrong CRC was stored: %v", err)
	}

	// Signatures are checked: a wrong secret is refused.
	bad := srv.Config("streams")
	bad.SecretKey = "wrong"
	bst, err := s3io.NewStore(ctx, bad)
	if err != nil {
		t.Fatal(err)
	}
	err = bst.PutObject(ctx, "forged", []byte("x"))
	if s3io.Classify(err) != s3io.ClassNonTransient {
		t.Fatalf("put with a wrong secret: %v, want a non-transient refusal", err)
	}

	// One instance per process, and the working directory is the endpoint's meanwhile.
	if second, err := embeds3.Start(ctx, filepath.Join(t.TempDir(), "s3b")); !errors.Is(err, embeds3.ErrRunning) {
		if second != nil {
			second.Close()
		}
		t.Fatalf("a second embedded endpoint in the same process: %v, want ErrRunning", err)
	}
	if now, _ := os.Getwd(); !strings.HasPrefix(now, srv.Dir) {
		t.Fatalf("working directory %s while the endpoint runs, want under %s (the package documents it)", now, srv.Dir)
	}
	if _, err := embeds3.StartWith(ctx, embeds3.Options{Dir: t.TempDir(), Addr: "0.0.0.0:0"}); err == nil {
		t.Fatal("a non-loopback listen address was accepted")
	}

	if err := srv.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if now, _ := os.Getwd(); now != wd {
		t.Fatalf("working directory %s after Close, want %s as before Start", now, wd)
	}
	if err := st.PutObject(ctx, "after-close", []byte("x")); s3io.Classify(err) != s3io.ClassRetriable {
		t.Fatalf("put after close: %v, want a retriable connection error", err)
	}

	// Once closed, the process may run one again; objects stay in the directory.
	again, err := embeds3.StartWith(ctx, embeds3.Options{Dir: srv.Dir, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	ast, err := s3io.NewStore(ctx, again.Config("streams"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ast.ReadFragment(ctx, "streams/x/data/a.fragment"); err != nil {
		t.Fatalf("fragment after restart: %v", err)
	}
}

// TestStopAfterCanceledReads: range GETs a reader cancels end at once and leave nothing to
// hold the endpoint's stop. A streamed range closed after its first bytes, one whose
// context is canceled mid-body, and one canceled while its connection was being dialed
// (the transport finishes such a dial and, with keep-alive, pooled the connection: it
// never carried a request, so the gateway counted it active and its shutdown waited out
// its 10 s deadline, "shutdown api server: context deadline exceeded"). Close then returns
// within its 100 ms poll, not after 10 s. Before, the last case took 10 s every time.
func TestStopAfterCanceledReads(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chdir(wd) }) // the posix backend moves the working directory
	ctx := context.Background()
	srv, err := embeds3.Start(ctx, filepath.Join(t.TempDir(), "s3"))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			srv.Close()
		}
	}()
	st, err := s3io.NewStore(ctx, srv.Config("reads"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.EnsureBucket(ctx); err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB: more than the socket buffers hold
	if err := st.PutObjectStream(ctx, "big", bytes.NewReader(body), int64(len(body)), crc32.ChecksumIEEE(body)); err != nil {
		t.Fatal(err)
	}
	size := int64(len(body))

	// Closed after its first bytes.
	rc, err := st.GetRangeStream(ctx, "big", 0, size)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(rc, make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}
	// Canceled mid-body: the read fails at once with the cancellation.
	cctx, cancel := context.WithCancel(ctx)
	rc, err = st.GetRangeStream(cctx, "big", 0, size)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(rc, make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := io.Copy(io.Discard, rc); !errors.Is(err, context.Canceled) {
		t.Fatalf("a canceled range read: %v, want context.Canceled", err)
	}
	rc.Close()
	// Canceled while its connection is dialed: the transport completes the dial anyway.
	dctx, dcancel := context.WithCancel(ctx)
	traced := httptrace.WithClientTrace(dctx, &httptrace.ClientTrace{ConnectStart: func(string, string) { dcancel() }})
	if _, err := st.GetRangePartial(traced, "big", 0, size, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("a range GET canceled during its dial: %v, want context.Canceled", err)
	}
	// A request after the canceled one: the transport must not hand it a connection the
	// server has given up.
	if got, err := st.GetRange(ctx, "big", 100, 10); err != nil || !bytes.Equal(got, body[100:110]) {
		t.Fatalf("a range after the canceled ones: %v", err)
	}

	start := time.Now()
	closed = true
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the endpoint's stop took %v after canceled reads (its shutdown waited on a connection)", took)
	}
}
