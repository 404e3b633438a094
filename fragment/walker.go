package fragment

import (
	"fmt"
	"hash/crc32"

	"github.com/streamtier/streamtier/chunk"
)

// RegionWalker checks a chunk region as it streams past, in pieces of any size, without
// holding it: the streaming counterpart of WalkChunks for a region read from a remote object
// (a prefix copy). Each chunk header is parsed as it arrives, each data section is checked
// against its header's CRC, chunk ids must be contiguous. Memory is one chunk header and
// the list of chunks seen (one LayoutChunk per chunk, not per byte).
type RegionWalker struct {
	base   int64 // object position of the region's first byte
	pos    int64 // object position of the next byte
	start  int64 // object position of the current chunk's header
	hdr    [chunk.HeaderSize]byte
	nhdr   int
	cur    chunk.Header
	crc    uint32
	chunks []LayoutChunk
	err    error
}

// NewRegionWalker walks a region whose first byte (a chunk header) sits at object position
// base (ObjectHeaderSize for a whole chunk region).
func NewRegionWalker(base int64) *RegionWalker {
	return &RegionWalker{base: base, pos: base, start: base}
}

// Write feeds the next bytes of the region; it fails on the first problem and keeps failing
// afterwards. Errors wrap ErrCorrupt and name the object position.
func (w *RegionWalker) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if w.err != nil {
			return 0, w.err
		}
		if w.nhdr < chunk.HeaderSize {
			c := copy(w.hdr[w.nhdr:], p)
			w.nhdr += c
			w.pos += int64(c)
			p = p[c:]
			if w.nhdr < chunk.HeaderSize {
				continue
			}
			h, err := chunk.ParseHeader(w.hdr[:])
			if err != nil {
				w.err = fmt.Errorf("%w: at position %d: %w", ErrCorrupt, w.start, err)
				return 0, w.err
			}
			if k := len(w.chunks); k > 0 && h.ChunkID != w.chunks[k-1].Header.NextID() {
				w.err = fmt.Errorf("%w: chunk at object position %d: id %d does not follow %d", ErrCorrupt, w.start, h.ChunkID, w.chunks[k-1].Header.NextID())
				return 0, w.err
			}
			w.cur, w.crc = h, 0
			w.finishIfDone() // a chunk of a header alone ends here
			continue
		}
		off := w.pos - w.start // inside the current chunk, past its header
		dataStart := chunk.HeaderSize + int64(w.cur.BloomSize)
		dataEnd := dataStart + int64(w.cur.DataLen)
		var take int64
		switch {
		case off < dataStart:
			take = min(int64(len(p)), dataStart-off)
		case off < dataEnd:
			take = min(int64(len(p)), dataEnd-off)
			w.crc = crc32.Update(w.crc, crc32.IEEETable, p[:take])
		default:
			take = min(int64(len(p)), w.cur.Size()-off)
		}
		w.pos += take
		p = p[take:]
		w.finishIfDone()
	}
	return n, nil
}

// finishIfDone closes the current chunk once all its bytes went past: its data CRC is
// checked and it is recorded. It reports whether the chunk was closed.
func (w *RegionWalker) finishIfDone() bool {
	if w.pos-w.start != w.cur.Size() {
		return false
	}
	if w.crc != w.cur.DataCRC {
		w.err = fmt.Errorf("%w: chunk %d at position %d: data CRC %08x, header says %08x", ErrCorrupt, w.cur.ChunkID, w.start, w.crc, w.cur.DataCRC)
		return false
	}
	w.chunks = append(w.chunks, LayoutChunk{Header: w.cur, Position: w.start})
	w.start, w.nhdr = w.pos, 0
	return true
}

// Done reports the chunks walked, once the region ended at a chunk boundary after at least
// one chunk; call it after the last Write.
func (w *RegionWalker) Done() ([]LayoutChunk, error) {
	switch {
	case w.err != nil:
		return nil, w.err
	case w.pos != w.start:
		return nil, fmt.Errorf("%w: region ended at position %d inside the chunk at %d", ErrCorrupt, w.pos, w.start)
	case len(w.chunks) == 0:
		return nil, fmt.Errorf("%w: empty region at object position %d", ErrCorrupt, w.base)
	}
	return w.chunks, nil
}
