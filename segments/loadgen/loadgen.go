// Package loadgen writes a deterministic load into a local log: given the same Config (and
// the same log Options) it produces the same chunks byte for byte on every run and every
// node, timestamps included, for tests, demos and benchmarks. Its random numbers come from
// its own xoshiro256** generator, so no library change can alter the output.
package loadgen

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/streamtier/streamtier/chunk"
	"github.com/streamtier/streamtier/segments"
)

// Config describes the load. Zero fields take the defaults noted.
type Config struct {
	Seed uint64
	// MinDataBytes and MaxDataBytes bound the record bytes of a chunk, drawn uniformly
	// (default 1000 to 4000). Entry headers come on top.
	MinDataBytes, MaxDataBytes int
	// MinEntries and MaxEntries bound the entries per chunk, drawn uniformly (default 1 to 16).
	MinEntries, MaxEntries int
	// SubBatchPercent is the share of entries written as uncompressed sub-batches (0 to
	// 100, default 0); each holds 2 to MaxSubBatchRecords records (default 10).
	SubBatchPercent    int
	MaxSubBatchRecords int
	// TrackingEvery makes every n-th chunk a tracking delta chunk (0: none).
	TrackingEvery int
	// Epoch of every chunk (default 1).
	Epoch uint64
	// StartTimestamp is the first chunk's timestamp in ms; later ones derive from it.
	StartTimestamp int64
	// BytesPerSecond is the logical rate: a chunk's timestamp is StartTimestamp plus the
	// record bytes before it divided by the rate. 0: one millisecond per chunk.
	BytesPerSecond int64
}

func (c Config) withDefaults() (Config, error) {
	if c.MinDataBytes == 0 && c.MaxDataBytes == 0 {
		c.MinDataBytes, c.MaxDataBytes = 1000, 4000
	}
	if c.MinEntries == 0 && c.MaxEntries == 0 {
		c.MinEntries, c.MaxEntries = 1, 16
	}
	if c.MaxSubBatchRecords == 0 {
		c.MaxSubBatchRecords = 10
	}
	if c.Epoch == 0 {
		c.Epoch = 1
	}
	switch {
	case c.MinDataBytes < 0 || c.MaxDataBytes < c.MinDataBytes || c.MaxDataBytes > 1<<30:
		return c, fmt.Errorf("loadgen: data bytes %d to %d: want 0 <= min <= max <= 1 GiB", c.MinDataBytes, c.MaxDataBytes)
	case c.MinEntries < 1 || c.MaxEntries < c.MinEntries || c.MaxEntries > math.MaxUint16:
		return c, fmt.Errorf("loadgen: entries %d to %d: want 1 <= min <= max <= %d", c.MinEntries, c.MaxEntries, math.MaxUint16)
	case c.SubBatchPercent < 0 || c.SubBatchPercent > 100:
		return c, fmt.Errorf("loadgen: sub-batch percent %d: want 0 to 100", c.SubBatchPercent)
	case c.MaxSubBatchRecords < 2 || c.MaxSubBatchRecords > math.MaxUint16:
		return c, fmt.Errorf("loadgen: max sub-batch records %d: want 2 to %d", c.MaxSubBatchRecords, math.MaxUint16)
	case c.TrackingEvery < 0 || c.BytesPerSecond < 0:
		return c, fmt.Errorf("loadgen: negative TrackingEvery or BytesPerSecond")
	}
	return c, nil
}

// Generator produces the chunk specs of a load, one at a time.
type Generator struct {
	cfg    Config
	rng    xoshiro
	chunks int64 // chunks produced
	bytes  int64 // record bytes produced
	body   []byte
	recs   [][]byte
	ents   []segments.Entry
}

// New returns a generator for cfg.
func New(cfg Config) (*Generator, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Generator{cfg: cfg, rng: newXoshiro(cfg.Seed)}, nil
}

// Chunks is how many chunk specs Next has produced.
func (g *Generator) Chunks() int64 { return g.chunks }

// Bytes is how many record bytes Next has produced.
func (g *Generator) Bytes() int64 { return g.bytes }

// Next returns the next chunk spec. Its byte slices are reused by the following call.
func (g *Generator) Next() segments.ChunkSpec {
	c := g.cfg
	ts := c.StartTimestamp + g.chunks
	if c.BytesPerSecond > 0 {
		ts = c.StartTimestamp + g.bytes*1000/c.BytesPerSecond // integers: the same on every platform
	}
	g.chunks++
	if c.TrackingEvery > 0 && g.chunks%int64(c.TrackingEvery) == 0 {
		return g.tracking(ts)
	}
	total := g.between(c.MinDataBytes, c.MaxDataBytes)
	n := g.between(c.MinEntries, c.MaxEntries)
	if cap(g.body) < total {
		g.body = make([]byte, total)
	}
	body := g.body[:total]
	g.rng.fill(body)
	g.bytes += int64(total)
	g.ents = g.ents[:0]
	for i := range n {
		size := total / n
		if i == 0 {
			size += total % n
		}
		part := body[:size]
		body = body[size:]
		if c.SubBatchPercent > 0 && g.between(1, 100) <= c.SubBatchPercent {
			g.ents = append(g.ents, g.subBatch(part))
			continue
		}
		g.ents = append(g.ents, segments.SimpleEntry(part))
	}
	return segments.ChunkSpec{Type: chunk.TypeUser, Epoch: c.Epoch, Timestamp: ts, Entries: g.ents}
}

// subBatch splits part into 2 to MaxSubBatchRecords records of an uncompressed sub-batch.
func (g *Generator) subBatch(part []byte) segments.Entry {
	r := g.between(2, g.cfg.MaxSubBatchRecords)
	g.recs = g.recs[:0]
	for i := range r {
		size := len(part) / r
		if i == 0 {
			size += len(part) % r
		}
		g.recs = append(g.recs, part[:size])
		part = part[size:]
	}
	e, err := segments.UncompressedSubBatch(g.recs)
	if err != nil {
		panic(fmt.Sprintf("loadgen: sub-batch of %d records: %v", r, err)) // bounds were checked in New
	}
	return e
}

// tracking is a tracking delta chunk holding one sequence record in osiris's layout
// (type 0, id length, id, chunk id, sequence), counting chunks.
func (g *Generator) tracking(ts int64) segments.ChunkSpec {
	id := "loadgen"
	b := append(g.body[:0], 0, byte(len(id)))
	b = append(b, id...)
	b = binary.BigEndian.AppendUint64(b, uint64(g.chunks))
	b = binary.BigEndian.AppendUint64(b, uint64(g.chunks))
	g.body = b
	g.ents = append(g.ents[:0], segments.SimpleEntry(b))
	return segments.ChunkSpec{Type: chunk.TypeTrackingDelta, Epoch: g.cfg.Epoch, Timestamp: ts, Entries: g.ents}
}

// between draws uniformly from [lo, hi].
func (g *Generator) between(lo, hi int) int {
	if hi <= lo {
		return lo
	}
	return lo + int(g.rng.next()%uint64(hi-lo+1))
}

// Limit says when Write stops: after Chunks chunks or Bytes record bytes, whichever comes
// first (a zero field is no limit; both zero writes nothing).
type Limit struct {
	Chunks int64
	Bytes  int64
}

// WriteOptions says how Write drives the log.
type WriteOptions struct {
	// Commit calls SetCommitted after each append, as a single-node broker would.
	Commit bool
	// Pace sleeps so that chunks are appended in real time at the timestamps' pace (for
	// demos); the bytes written are the same as without pacing.
	Pace bool
}

// Stats is what Write wrote.
type Stats struct {
	Chunks int64
	Bytes  int64 // record bytes
}

// Write appends g's chunks to log until limit is reached or ctx is done.
func Write(ctx context.Context, log *segments.Log, g *Generator, limit Limit, opts WriteOptions) (Stats, error) {
	var st Stats
	if limit.Chunks <= 0 && limit.Bytes <= 0 {
		return st, nil
	}
	start := time.Now()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for (limit.Chunks <= 0 || st.Chunks < limit.Chunks) && (limit.Bytes <= 0 || st.Bytes < limit.Bytes) {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		before := g.Bytes()
		spec := g.Next()
		if opts.Pace {
			due := start.Add(time.Duration(spec.Timestamp-g.cfg.StartTimestamp) * time.Millisecond)
			if wait := time.Until(due); wait > 0 {
				if timer == nil {
					timer = time.NewTimer(wait)
				} else {
					timer.Reset(wait)
				}
				select {
				case <-ctx.Done():
					return st, ctx.Err()
				case <-timer.C:
				}
			}
		}
		h, _, err := log.Append(spec)
		if err != nil {
			return st, fmt.Errorf("loadgen: chunk %d: %w", g.Chunks(), err)
		}
		if opts.Commit {
			if err := log.SetCommitted(h.ChunkID); err != nil {
				return st, fmt.Errorf("loadgen: commit chunk %d: %w", h.ChunkID, err)
			}
		}
		st.Chunks++
		st.Bytes += g.Bytes() - before
	}
	return st, nil
}

// xoshiro is the xoshiro256** generator (Blackman and Vigna), seeded with splitmix64.
type xoshiro struct{ s [4]uint64 }

func newXoshiro(seed uint64) xoshiro {
	var x xoshiro
	for i := range x.s {
		seed += 0x9e3779b97f4a7c15
		z := seed
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		x.s[i] = z ^ (z >> 31)
	}
	return x
}

func (x *xoshiro) next() uint64 {
	s := &x.s
	r := rotl(s[1]*5, 7) * 9
	t := s[1] << 17
	s[2] ^= s[0]
	s[3] ^= s[1]
	s[1] ^= s[2]
	s[0] ^= s[3]
	s[2] ^= t
	s[3] = rotl(s[3], 45)
	return r
}

func rotl(x uint64, k uint) uint64 { return x<<k | x>>(64-k) }

// fill writes pseudo-random bytes into b.
func (x *xoshiro) fill(b []byte) {
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, x.next())
		b = b[8:]
	}
	if len(b) > 0 {
		var t [8]byte
		binary.LittleEndian.PutUint64(t[:], x.next())
		copy(b, t[:])
	}
}
