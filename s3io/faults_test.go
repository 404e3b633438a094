package s3io_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	smithy "github.com/aws/smithy-go"

	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
)

// TestFaults injects every fault class between a store and a real server and checks the
// classified error. Rules fire on every matching request, so a retry anywhere below the
// caller (SDK or s3io) would show as a second hit: each call must make exactly one request.
func TestFaults(t *testing.T) {
	for _, tls := range []bool{false, true} {
		name := "http"
		if tls {
			name = "https"
		}
		t.Run(name, func(t *testing.T) { testFaults(t, tls) })
	}
}

func testFaults(t *testing.T, tls bool) {
	srv := s3test.Start(t, s3test.Options{TLS: tls})
	inj := s3test.NewInjector(t, srv)
	cfg := inj.Config()
	cfg.RequestTimeout, cfg.TransferTimeout = time.Second, time.Second
	st := newStore(t, cfg)
	direct := newStore(t, srv.Config())
	ctx := context.Background()

	dir, frags := genLog(t, s3test.LogSpec{Seed: 11, Chunks: 40, MinData: 10_000, MaxData: 60_000, MaxTrailer: 30, SegmentBytes: 800_000}, 1<<40)
	d := frags[0]
	small := bytes.Repeat([]byte("s3io"), 25_000)
	if err := direct.PutObject(ctx, "small/object", small); err != nil {
		t.Fatal(err)
	}
	putFragment := func(key string) func() error {
		return func() error { _, err := st.PutFragment(ctx, key, dir, d); return err }
	}
	getSmall := func() error {
		b, err := st.GetObject(ctx, "small/object")
		if err == nil && !bytes.Equal(b, small) {
			return errors.New("wrong bytes")
		}
		return err
	}

	for _, tc := range []struct {
		name   string
		rule   s3test.Rule
		op     s3io.Op
		call   func() error
		want   s3io.Class
		code   string // S3 error code the error must carry, if any
		key    string // a key that must (stored) or must not exist afterwards
		stored bool
	}{
		{name: "500 on fragment PUT", rule: s3test.Rule{Method: "PUT", KeyRegexp: `^f/500$`, Fault: s3test.FaultInternalError},
			op: s3io.OpPutFragment, call: putFragment("f/500"), want: s3io.ClassRetriable, code: "InternalError", key: "f/500"},
		{name: "503 SlowDown on fragment PUT", rule: s3test.Rule{Method: "PUT", KeyRegexp: `^f/503$`, Fault: s3test.FaultSlowDown},
			op: s3io.OpPutFragment, call: putFragment("f/503"), want: s3io.ClassRetriable, code: "SlowDown", key: "f/503"},
		{name: "403 on fragment PUT", rule: s3test.Rule{Method: "PUT", KeyRegexp: `^f/403$`, Fault: s3test.FaultForbidden},
			op: s3io.OpPutFragment, call: putFragment("f/403"), want: s3io.ClassNonTransient, code: "AccessDenied", key: "f/403"},
		{name: "BadDigest on fragment PUT", rule: s3test.Rule{Method: "PUT", KeyRegexp: `^f/digest$`, Fault: s3test.FaultBadDigest},
			op: s3io.OpPutFragment, call: putFragment("f/digest"), want: s3io.ClassNonTransient, code: "BadDigest", key: "f/digest"},
		{name: "body corrupted in transit", rule: s3test.Rule{Method: "PUT", KeyRegexp: `^f/flip$`, Fault: s3test.FaultCorruptBody},
			op: s3io.OpPutFragment, call: putFragment("f/flip"), want: s3io.ClassNonTransient, code: "BadDigest", key: "f/flip"},
		{name: "delay past the deadline", rule: s3test.Rule{Method: "PUT", KeyRegexp: `^f/slow$`, Fault: s3test.FaultDelay, Delay: time.Minute},
			op: s3io.OpPutFragment, call: putFragment("f/slow"), want: s3io.ClassRetriable, key: "f/slow"},
		{name: "reset mid request body", rule: s3test.Rule{Method: "PUT", KeyRegexp: `^f/reset$`, Fault: s3test.FaultResetRequest},
			op: s3io.OpPutFragment, call: putFragment("f/reset"), want: s3io.ClassRetriable, key: "f/reset"},
		{name: "dropped response", rule: s3test.Rule{Method: "PUT", KeyRegexp: `^f/drop$`, Fault: s3test.FaultDropResponse},
			op: s3io.OpPutFragment, call: putFragment("f/drop"), want: s3io.ClassRetriable, key: "f/drop", stored: true},
		{name: "reset mid response body", rule: s3test.Rule{Method: "GET", KeyRegexp: `^small/`, Fault: s3test.FaultResetResponse},
			op: s3io.OpGetObject, call: getSmall, want: s3io.ClassRetriable},
		{name: "truncated response body", rule: s3test.Rule{Method: "GET", KeyRegexp: `^small/`, Fault: s3test.FaultTruncateResponse},
			op: s3io.OpGetObject, call: getSmall, want: s3io.ClassRetriable},
		{name: "500 on GET", rule: s3test.Rule{Method: "GET", KeyRegexp: `^small/`, Fault: s3test.FaultInternalError},
			op: s3io.OpGetObject, call: getSmall, want: s3io.ClassRetriable, code: "InternalError"},
		{name: "503 on HEAD", rule: s3test.Rule{Method: "HEAD", KeyRegexp: `^small/`, Fault: s3test.FaultSlowDown},
			op: s3io.OpHead, call: func() error { _, err := st.Head(ctx, "small/object"); return err }, want: s3io.ClassRetriable},
		{name: "403 on small PUT", rule: s3test.Rule{Method: "PUT", KeyRegexp: `^meta/root$`, Fault: s3test.FaultForbidden},
			op: s3io.OpPutObject, call: func() error { return st.PutObject(ctx, "meta/root", small) }, want: s3io.ClassNonTransient, code: "AccessDenied", key: "meta/root"},
		{name: "SlowDown on list", rule: s3test.Rule{Method: "GET", KeyRegexp: `^$`, Fault: s3test.FaultSlowDown},
			op: s3io.OpList, call: func() error { return st.List(ctx, "small/", func(s3io.ObjectInfo) error { return nil }) }, want: s3io.ClassRetriable, code: "SlowDown"},
		{name: "500 on delete", rule: s3test.Rule{Method: "POST", Fault: s3test.FaultInternalError},
			op: s3io.OpDeleteObjects, call: func() error { _, err := st.DeleteObjects(ctx, []string{"small/object"}); return err }, want: s3io.ClassRetriable, code: "InternalError"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inj.Clear()
			inj.Add(tc.rule)
			hits, reqs := inj.Hits(), requests(st, tc.op)
			err := tc.call()
			wantClass(t, err, tc.want)
			if tc.code != "" {
				var apiErr smithy.APIError
				if !errors.As(err, &apiErr) || apiErr.ErrorCode() != tc.code {
					t.Fatalf("error %v does not carry code %s", err, tc.code)
				}
			}
			if n := inj.Hits() - hits; n != 1 {
				t.Fatalf("%d requests reached the fault, want exactly 1 (no retry below the caller)", n)
			}
			if n := requests(st, tc.op) - reqs; n != 1 {
				t.Fatalf("metrics counted %d %v requests, want 1", n, tc.op)
			}
			if snap := st.Metrics().Snapshot()[tc.op]; snap.ByClass[tc.want] == 0 {
				t.Fatalf("metrics did not count a %v failure: %+v", tc.want, snap)
			}
			if tc.key != "" {
				_, herr := direct.Head(ctx, tc.key)
				if tc.stored && herr != nil {
					t.Fatalf("%s should be stored (the server acted, the answer was lost): %v", tc.key, herr)
				}
				if !tc.stored && !s3io.IsNotFound(herr) {
					t.Fatalf("%s should not be stored: %v", tc.key, herr)
				}
			}
			// Without the fault the same call goes through.
			inj.Clear()
			if err := tc.call(); err != nil {
				t.Fatalf("after clearing the fault: %v", err)
			}
		})
	}
	if tls {
		return // the rest does not depend on the transport
	}

	t.Run("canceled before the call", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := st.PutFragment(cctx, "f/canceled", dir, d)
		wantClass(t, err, s3io.ClassCanceled)
	})

	t.Run("canceled while the server holds the request", func(t *testing.T) {
		hit := make(chan string, 1)
		inj.Clear()
		inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: `^f/held$`, Fault: s3test.FaultDelay, Delay: time.Minute, Hit: hit})
		cctx, cancel := context.WithCancel(ctx)
		go func() { // owned by this subtest: ends once the request is seen or the put returns
			select {
			case <-hit:
				cancel()
			case <-cctx.Done():
			}
		}()
		_, err := st.PutFragment(cctx, "f/held", dir, d)
		cancel()
		wantClass(t, err, s3io.ClassCanceled)
	})

	t.Run("connection refused", func(t *testing.T) {
		gone := s3test.Start(t, s3test.Options{})
		gst := newStore(t, gone.Config())
		gone.Stop()
		err := gst.PutObject(ctx, "x", []byte("x"))
		wantClass(t, err, s3io.ClassRetriable)
	})
}
