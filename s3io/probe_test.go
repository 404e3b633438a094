package s3io_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
)

// TestBucketProbe: the probe reports the bucket reachable, then access denied with the
// server's error code and message once the server answers the listing with 403, then
// reachable again once it stops; the outcome counts and the time the state began follow.
// A bucket that does not exist and a server that does not answer are told apart.
func TestBucketProbe(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{})
	inj := s3test.NewInjector(t, srv)
	cfg := inj.Config()
	cfg.RequestTimeout = 2 * time.Second
	st := newStore(t, cfg)
	ctx := context.Background()
	p, err := s3io.NewBucketProbe(st, "streams/", 0, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if h := p.Health(); h.Outcome != s3io.ProbeUnknown || h.Err() != nil || h.Interval != s3io.DefaultProbeInterval {
		t.Fatalf("before the first probe: %+v", h)
	}
	if err := p.ProbeOnce(ctx); err != nil {
		t.Fatalf("probe: %v", err)
	}
	ok := p.Health()
	if !ok.Reachable() || ok.Err() != nil || ok.Counts[s3io.ProbeOK] != 1 {
		t.Fatalf("healthy bucket: %+v", ok)
	}

	inj.Add(s3test.Rule{Method: "GET", KeyRegexp: "^$", Fault: s3test.FaultForbidden})
	for range 2 {
		if err := p.ProbeOnce(ctx); err == nil {
			t.Fatal("probe passed through a 403")
		}
	}
	h := p.Health()
	if h.Reachable() || h.Outcome != s3io.ProbeAccessDenied || h.Counts[s3io.ProbeAccessDenied] != 2 {
		t.Fatalf("denied: %+v", h)
	}
	if !strings.Contains(h.Error, "AccessDenied") || !strings.Contains(h.Error, "s3test: injected access denied") {
		t.Fatalf("the server's error is not in the health: %q", h.Error)
	}
	if strings.Contains(h.Error, cfg.SecretKey) || strings.Contains(h.Err().Error(), cfg.SecretKey) {
		t.Fatalf("the secret key is in the error: %q", h.Error)
	}
	if !h.Since.After(ok.Since) || h.Since.After(h.CheckedAt) {
		t.Fatalf("since %v: want the first denied probe (after %v, not after %v)", h.Since, ok.Since, h.CheckedAt)
	}
	if snap := st.Metrics().Snapshot()[s3io.OpProbe]; snap.Requests != 3 || snap.ByClass[s3io.ClassNonTransient] != 2 {
		t.Fatalf("probe requests: %+v", snap)
	}

	inj.Clear()
	if err := p.ProbeOnce(ctx); err != nil {
		t.Fatalf("after the fault: %v", err)
	}
	if h := p.Health(); !h.Reachable() || h.Error != "" || h.Err() != nil || h.Counts[s3io.ProbeOK] != 2 {
		t.Fatalf("recovered: %+v", h)
	}

	// A bucket that does not exist, and a server that does not answer.
	missing := srv.Config()
	missing.Bucket = "no-such-bucket-here"
	mp, _ := s3io.NewBucketProbe(newStore(t, missing), "", time.Second, zerolog.Nop())
	mp.ProbeOnce(ctx)
	if h := mp.Health(); h.Outcome != s3io.ProbeNoBucket {
		t.Fatalf("missing bucket: %+v", h)
	}
	inj.Add(s3test.Rule{Fault: s3test.FaultInternalError})
	p.ProbeOnce(ctx)
	if h := p.Health(); h.Outcome != s3io.ProbeUnreachable {
		t.Fatalf("500: %+v", h)
	}
	if _, err := s3io.NewBucketProbe(st, "", -time.Second, zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "s3_probe_interval") {
		t.Fatalf("negative interval: %v", err)
	}
}

// TestBucketProbeRuns: a started probe probes at once and on Now, and Stop ends it.
func TestBucketProbeRuns(t *testing.T) {
	srv := s3test.Start(t, s3test.Options{})
	inj := s3test.NewInjector(t, srv)
	st := newStore(t, inj.Config())
	p, err := s3io.NewBucketProbe(st, "", time.Hour, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	p.Start(context.Background())
	defer p.Stop()
	waitProbes := func(n uint64) s3io.BucketHealth {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if h := p.Health(); h.Probes >= n {
				return h
			}
			if time.Now().After(deadline) {
				t.Fatalf("fewer than %d probes: %+v", n, p.Health())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if h := waitProbes(1); !h.Reachable() {
		t.Fatalf("first probe: %+v", h)
	}
	inj.Add(s3test.Rule{Fault: s3test.FaultForbidden})
	p.Now()
	if h := waitProbes(2); h.Outcome != s3io.ProbeAccessDenied {
		t.Fatalf("second probe: %+v", h)
	}
}
