package tests

import (
	"bytes"
	"fmt"

	"github.com/streamtier/streamtier/actors/read"
	"github.com/streamtier/streamtier/segments"
)

// This file holds what the read tests share: checking what a reader delivers against a
// reference log the deterministic load generator wrote the same way.

// checker follows one reader against the reference log: every item must start where the
// previous one ended, every chunk must be the reference's chunk at that offset, byte for
// byte; a skipped range (remote retention raced the reader) is allowed, a gap is not (the
// local log never loses data here).
type checker struct {
	name   string
	ref    *segments.Log
	rd     *segments.Reader
	prev   uint64
	chunks int
	tiers  map[read.Tier]int
	skips  int
}

func newChecker(name string, ref *segments.Log) *checker {
	return &checker{name: name, ref: ref, tiers: map[read.Tier]int{}}
}

// close releases the checker's reference reader.
func (c *checker) close() {
	if c.rd != nil {
		c.rd.Close()
		c.rd = nil
	}
}

// item checks the next item the reader delivered.
func (c *checker) item(it read.Item) error {
	if c.chunks+c.skips > 0 && it.Offset != c.prev {
		return fmt.Errorf("%s: %s [%d, %d) (%s) follows an item ending at %d", c.name, it.Kind, it.Offset, it.End, it.Tier, c.prev)
	}
	c.prev = it.End
	switch it.Kind {
	case read.ItemSkipped:
		c.skips++
		if c.rd != nil {
			c.rd.Close()
			c.rd = nil
		}
		return nil
	case read.ItemGap:
		return fmt.Errorf("%s: gap [%d, %d)", c.name, it.Offset, it.End)
	}
	if c.rd == nil {
		var err error
		if c.rd, err = c.ref.NewReader(it.Offset); err != nil {
			return err
		}
	}
	h, loc, err := c.rd.Next()
	if err != nil {
		return fmt.Errorf("%s: reference at %d: %w", c.name, it.Offset, err)
	}
	want, _, err := c.ref.ReadChunk(loc)
	if err != nil {
		return err
	}
	if h.ChunkID != it.Offset || !bytes.Equal(want, it.Chunk) {
		return fmt.Errorf("%s: chunk %d (%s) is not the reference chunk %d", c.name, it.Offset, it.Tier, h.ChunkID)
	}
	c.chunks++
	c.tiers[it.Tier]++
	return nil
}
