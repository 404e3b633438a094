package main

import (
	"context"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/s3io"
)

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
