package s3io

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/rs/zerolog"
)

// DefaultProbeInterval is how often a BucketProbe asks the bucket by default.
const DefaultProbeInterval = 30 * time.Second

// ProbeBucket asks the bucket for one key under prefix (a ListObjectsV2 with max-keys 1):
// one request that fails when the endpoint is unreachable, the credentials or the bucket
// policy refuse the listing (which the node needs), or the bucket does not exist. Unlike a
// HEAD, a refused listing carries the server's error code and message.
func (s *Store) ProbeBucket(ctx context.Context, prefix string) error {
	in := &s3.ListObjectsV2Input{Bucket: aws.String(s.cfg.Bucket), Prefix: aws.String(prefix), MaxKeys: aws.Int32(1), ExpectedBucketOwner: s.cfg.owner()}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	start := time.Now()
	_, err := s.client.ListObjectsV2(ctx, in)
	s.metrics.observe(OpProbe, prefix, time.Since(start), 0, err)
	if err != nil {
		return fmt.Errorf("probe s3://%s/%s: %w", s.cfg.Bucket, prefix, err)
	}
	return nil
}

// ProbeOutcome says how the last probe of the bucket ended.
type ProbeOutcome string

// Probe outcomes.
const (
	ProbeUnknown      ProbeOutcome = ""              // no probe finished yet
	ProbeOK           ProbeOutcome = "ok"            // the bucket answered
	ProbeAccessDenied ProbeOutcome = "access_denied" // 403: credentials, bucket policy or owner refused
	ProbeNoBucket     ProbeOutcome = "no_bucket"     // 404: the bucket does not exist
	ProbeUnreachable  ProbeOutcome = "unreachable"   // no answer: connection, timeout, 5xx, throttling
	ProbeError        ProbeOutcome = "error"         // any other refusal (400, a bad certificate)
)

// ProbeOutcomes lists every outcome but ProbeUnknown, for metric labels.
var ProbeOutcomes = []ProbeOutcome{ProbeOK, ProbeAccessDenied, ProbeNoBucket, ProbeUnreachable, ProbeError}

// probeOutcome classifies a probe's error.
func probeOutcome(err error) ProbeOutcome {
	switch {
	case err == nil:
		return ProbeOK
	case responseStatus(err) == 403:
		return ProbeAccessDenied
	case IsNotFound(err):
		return ProbeNoBucket
	case Classify(err) == ClassRetriable:
		return ProbeUnreachable
	}
	return ProbeError
}

// BucketHealth is what the probe knows of the bucket now.
type BucketHealth struct {
	Bucket   string
	Interval time.Duration
	// Outcome of the last probe; ProbeUnknown before the first one finished.
	Outcome ProbeOutcome
	// Error is the last failed probe's error as the SDK reports it (the server's code and
	// message, the request id; never credentials); empty while the bucket answers.
	Error     string
	CheckedAt time.Time // when the last probe finished
	// Since is when the current outcome began (the first probe of a run of equal outcomes).
	Since  time.Time
	Probes uint64                  // probes finished
	Counts map[ProbeOutcome]uint64 // probes by outcome
}

// Reachable says whether the last probe succeeded.
func (h BucketHealth) Reachable() bool { return h.Outcome == ProbeOK }

// Err is the last probe's failure as an error, nil when the bucket answered (or before the
// first probe: nothing is known to be wrong yet).
func (h BucketHealth) Err() error {
	if h.Outcome == ProbeOK || h.Outcome == ProbeUnknown {
		return nil
	}
	return fmt.Errorf("s3 bucket %s %s since %s: %s", h.Bucket, h.Outcome, h.Since.UTC().Format(time.RFC3339), h.Error)
}

// BucketProbe asks the bucket periodically whether it answers, so that status, /readyz and
// the metrics say when it becomes unreachable or refuses access, and when it recovers. It
// runs one goroutine from Start until Stop.
type BucketProbe struct {
	store    *Store
	prefix   string
	interval time.Duration
	log      zerolog.Logger

	mu     sync.Mutex
	health BucketHealth
	wake   chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
}

// NewBucketProbe prepares a probe of store's bucket listing under prefix every interval
// (DefaultProbeInterval when 0; negative is refused).
func NewBucketProbe(store *Store, prefix string, interval time.Duration, log zerolog.Logger) (*BucketProbe, error) {
	if store == nil {
		return nil, errors.New("bucket probe: no store")
	}
	if interval < 0 {
		return nil, fmt.Errorf("bucket probe: s3_probe_interval %v: negative", interval)
	}
	if interval == 0 {
		interval = DefaultProbeInterval
	}
	return &BucketProbe{
		store: store, prefix: prefix, interval: interval, log: log, wake: make(chan struct{}, 1),
		health: BucketHealth{Bucket: store.Bucket(), Interval: interval, Counts: map[ProbeOutcome]uint64{}},
	}, nil
}

// Start probes at once, then every interval, until Stop or ctx ends.
func (p *BucketProbe) Start(ctx context.Context) {
	ctx, p.cancel = context.WithCancel(ctx)
	p.done = make(chan struct{})
	go p.run(ctx) // owned by p: Stop ends it
}

// Stop ends the probe's goroutine and waits for it.
func (p *BucketProbe) Stop() {
	if p.cancel == nil {
		return
	}
	p.cancel()
	<-p.done
}

// Now asks for a probe at once (without waiting for it): an operator's or a test's nudge.
func (p *BucketProbe) Now() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *BucketProbe) run(ctx context.Context) {
	defer close(p.done)
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	for {
		p.ProbeOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-p.wake:
		}
	}
}

// ProbeOnce probes now and records the outcome; it returns the probe's error.
func (p *BucketProbe) ProbeOnce(ctx context.Context) error {
	err := p.store.ProbeBucket(ctx, p.prefix)
	if ctx.Err() != nil {
		return err // stopping: a cancelled probe says nothing about the bucket
	}
	now := time.Now()
	out := probeOutcome(err)
	p.mu.Lock()
	prev := p.health.Outcome
	if out != prev {
		p.health.Since = now
	}
	p.health.Outcome, p.health.CheckedAt = out, now
	p.health.Probes++
	p.health.Counts[out]++
	p.health.Error = ""
	if err != nil {
		p.health.Error = err.Error()
	}
	p.mu.Unlock()
	switch {
	case out != prev && err != nil:
		p.log.Error().Str("bucket", p.store.Bucket()).Str("outcome", string(out)).Err(err).Msg("s3 bucket probe failed")
	case out != prev && prev != ProbeUnknown:
		p.log.Info().Str("bucket", p.store.Bucket()).Str("was", string(prev)).Msg("s3 bucket answers again")
	}
	return err
}

// Health is a copy of what the probe knows now.
func (p *BucketProbe) Health() BucketHealth {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.health
	h.Counts = make(map[ProbeOutcome]uint64, len(p.health.Counts))
	for k, v := range p.health.Counts {
		h.Counts[k] = v
	}
	return h
}
