package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// demoLoad writes the deterministic load generator's chunks into a stream's log at a
// fixed rate, committing each one as a single-node broker would. Chunk contents are the
// generator's (a restart resumes after the chunks already in the log); timestamps are the
// wall clock, so that lag in seconds means what it says.
type demoLoad struct {
	log     *segments.Log
	gen     *loadgen.Generator
	rate    int64 // record bytes per second
	logger  zerolog.Logger
	written atomic.Int64 // record bytes written by this run (what rate paces)
	// logBytes are the chunk bytes (headers and all) appended by this run: what the
	// uploads carry, so that the display compares a write rate with an upload rate in
	// the same bytes.
	logBytes atomic.Int64
	chunks   atomic.Int64
}

// demoTick is how often the writer catches up with the rate.
const demoTick = 10 * time.Millisecond

func newDemoLoad(lg *segments.Log, seed uint64, rate int64, logger zerolog.Logger) (*demoLoad, error) {
	gen, err := loadgen.New(loadgen.Config{Seed: seed})
	if err != nil {
		return nil, err
	}
	d := &demoLoad{log: lg, gen: gen, rate: rate, logger: logger}
	if next := lg.NextOffset(); next > 0 {
		start := time.Now()
		skipped, err := gen.SkipToOffset(0, next)
		if err != nil {
			logger.Warn().Err(err).Msg("the demo log was not written by this load (another demo_seed?): new chunks follow it, not reproducibly")
		} else {
			logger.Info().Int64("chunks", skipped).Uint64("next_offset", next).Dur("took", time.Since(start)).
				Msg("demo load resumes after the chunks already in the log")
		}
	}
	return d, nil
}

// run writes until ctx ends, keeping the bytes written at rate × elapsed time.
func (d *demoLoad) run(ctx context.Context) error {
	start := time.Now()
	tick := time.NewTicker(demoTick)
	defer tick.Stop()
	var lastTS int64
	if h, ok := d.log.LastChunk(); ok {
		lastTS = h.Timestamp
	}
	for {
		due := int64(time.Since(start).Seconds() * float64(d.rate))
		for d.written.Load() < due {
			if ctx.Err() != nil {
				return nil
			}
			before := d.gen.Bytes()
			spec := d.gen.Next()
			spec.Timestamp = max(time.Now().UnixMilli(), lastTS)
			lastTS = spec.Timestamp
			h, _, err := d.log.Append(spec)
			if err != nil {
				return fmt.Errorf("demo load: append: %w", err)
			}
			if err := d.log.SetCommitted(h.ChunkID); err != nil {
				return fmt.Errorf("demo load: commit %d: %w", h.ChunkID, err)
			}
			d.written.Add(d.gen.Bytes() - before)
			d.logBytes.Add(h.Size())
			d.chunks.Add(1)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
