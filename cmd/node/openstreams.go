package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/nodeconfig"
	"github.com/streamtier/streamtier/s3io"
)

// addStreams opens the declared streams and adds them to the node, start_concurrency at a
// time. Each costs an S3 LIST and three etcd reads one after the other: tens of milliseconds
// against a remote S3, so ten thousand streams opened one at a time take minutes.
// The first error stops the start: no stream is begun after it, the ones running finish,
// and it is returned. The process's streams are then in the order they were declared.
func (p *process) addStreams(streams []nodeconfig.StreamSettings) error {
	g, failed := errgroup.WithContext(context.Background()) // failed ends with the first error
	g.SetLimit(p.s.StartConcurrency)
	for _, st := range streams {
		if failed.Err() != nil {
			break
		}
		g.Go(func() error { // runs once a slot is free: by then another stream may have failed
			if failed.Err() != nil {
				return nil
			}
			return p.addStream(st, nil)
		})
	}
	err := g.Wait()
	order := make(map[string]int, len(streams))
	for i, st := range streams {
		order[st.ID] = i
	}
	p.mu.Lock()
	slices.SortStableFunc(p.streams, func(a, b *openStream) int { return order[a.id] - order[b.id] })
	p.mu.Unlock()
	return err
}

// Waits between the attempts of a read the start retries: the first, and the most.
const (
	startRetryFirst = 100 * time.Millisecond
	startRetryMost  = 2 * time.Second
)

// retryTransient runs read until it succeeds, fails with an error that is not transient
// (s3io.IsRetriable, metadata.IsRetriable), or ctx ends, waiting startRetryFirst between
// attempts, doubling up to startRetryMost, and logging each failure. A start of thousands
// of streams makes thousands of requests; S3 answers a few of them 500 or 503 SlowDown,
// which a client must retry, and the start must not fail on one. For reads only: a write
// whose outcome is unknown is not repeated blindly.
func retryTransient(ctx context.Context, log zerolog.Logger, what string, read func(context.Context) error) error {
	wait := startRetryFirst
	for attempt := 1; ; attempt++ {
		err := read(ctx)
		if err == nil || !(s3io.IsRetriable(err) || metadata.IsRetriable(err)) {
			return err
		}
		log.Warn().Err(err).Str("reading", what).Int("attempt", attempt).Dur("retry_in", wait).Msg("start: a transient failure, retrying")
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("%w (%d attempts, then %v)", err, attempt, ctx.Err())
		case <-timer.C:
		}
		wait = min(2*wait, startRetryMost)
	}
}
