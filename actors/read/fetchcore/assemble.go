package fetchcore

import (
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/streamtier/streamtier/chunk"
)

// ErrCorrupt matches every CorruptError (errors.Is): remote bytes that do not verify. Never
// retried: reading them again gives the same bytes.
var ErrCorrupt = errors.New("remote data corrupt")

// ErrMissing matches every MissingObjectError (errors.Is): an object the freshest manifest
// still names but S3 does not hold. The reader stops rather than skip it.
var ErrMissing = errors.New("remote object missing though the manifest names it")

// CorruptError says the bytes of an object do not form the chunks the manifest promises: a
// header that does not parse, a data CRC mismatch, a chunk id out of sequence, a chunk that
// overruns the chunk region, chunks that do not end where the manifest says. Retrying cannot
// fix it and the core never skips it.
type CorruptError struct {
	Key      string
	Position int64 // object position of the chunk (or region) at fault
	Reason   string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("corrupt fragment object %s at position %d: %s", e.Key, e.Position, e.Reason)
}

// Is lets errors.Is(err, ErrCorrupt) match.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// MissingObjectError says an object the freshest manifest still lists answered 404 too many
// times in a row: retention did not remove it (the manifest still names it), so it is lost.
type MissingObjectError struct {
	Key   string
	First uint64 // the fragment's first offset
	Times int
}

func (e *MissingObjectError) Error() string {
	return fmt.Sprintf("fragment object %s (offset %d) not found %d times while the manifest still lists it", e.Key, e.First, e.Times)
}

// Is lets errors.Is(err, ErrMissing) match.
func (e *MissingObjectError) Is(target error) bool { return target == ErrMissing }

// piece is one response's bytes (RangeDone ID's buffer, or what is left of it), with the
// delivery mark of the last chunk handed out as a sub-slice of it: the cumulative delivered
// chunk bytes once that chunk was delivered (0: no chunk refers to it). A copy piece is the
// shell's copy of a chunk across responses (Item.Copy ID; b is nil): it is released like a
// response's buffer once the consumer passed its mark.
type piece struct {
	b    []byte
	id   uint64
	mark int64
	copy bool
}

// assembler holds the received bytes of one object, in order from position pos, until they
// make whole chunks. Pieces are kept as they came: a chunk inside one piece is handed out
// as a sub-slice of it; a chunk across pieces is handed out as the sub-slices of the pieces
// it spans, which the shell copies into a buffer of its own when it executes the Deliver.
// Pieces it is done with go to freed, in order, with their marks: their buffers are free
// once the consumer is done with the chunk of the mark (and, for the pieces of a chunk
// across pieces, once the shell copied it: the core frees them after its Deliver).
type assembler struct {
	bufs  []piece
	freed []piece
	n     int64 // bytes held
	pos   int64 // object position of the first byte held
	hdr   [chunk.HeaderSize]byte
}

func (a *assembler) push(p piece) {
	if len(p.b) > 0 {
		a.bufs = append(a.bufs, p)
		a.n += int64(len(p.b))
	} else {
		a.freed = append(a.freed, p)
	}
}

// peekHeader copies the first HeaderSize bytes held (the caller checked there are).
func (a *assembler) peekHeader() []byte {
	k := 0
	for _, p := range a.bufs {
		k += copy(a.hdr[k:], p.b)
		if k == chunk.HeaderSize {
			break
		}
	}
	return a.hdr[:]
}

// take removes the first n bytes held (the caller checked there are) and returns them: as
// b, a sub-slice of the first piece, when it holds them all (the piece then carries mark,
// the delivery mark of the chunk they make); otherwise as parts, the sub-slices of the
// pieces they span in order, valid until those pieces are released (the pieces keep their
// marks: the chunk the parts make is copied, it does not refer to them).
func (a *assembler) take(n, mark int64) (b []byte, parts [][]byte) {
	if first := a.bufs[0].b; int64(len(first)) >= n {
		a.bufs[0].mark = mark
		a.drop(n)
		return first[:n:n], nil
	}
	for got := int64(0); got < n; {
		k := min(int64(len(a.bufs[0].b)), n-got)
		parts = append(parts, a.bufs[0].b[:k:k])
		got += k
		a.drop(k)
	}
	return nil, parts
}

// crcOf is the CRC-32 (IEEE) of the n bytes at off of a chunk held as b or, when b is nil,
// as parts in order.
func crcOf(b []byte, parts [][]byte, off, n int64) uint32 {
	if parts == nil {
		return crc32.ChecksumIEEE(b[off : off+n])
	}
	var crc uint32
	for _, p := range parts {
		if off >= int64(len(p)) {
			off -= int64(len(p))
			continue
		}
		k := min(int64(len(p))-off, n)
		crc = crc32.Update(crc, crc32.IEEETable, p[off:off+k])
		off, n = 0, n-k
		if n == 0 {
			break
		}
	}
	return crc
}

// drop removes the first k bytes, which the first piece holds.
func (a *assembler) drop(k int64) {
	if k == int64(len(a.bufs[0].b)) {
		a.freed = append(a.freed, a.bufs[0])
		a.bufs[0] = piece{}
		a.bufs = a.bufs[1:]
	} else {
		a.bufs[0].b = a.bufs[0].b[k:]
	}
	a.n -= k
	a.pos += k
	if len(a.bufs) == 0 {
		a.bufs = nil
	}
}

// reset empties the assembler at pos; the pieces it held go to freed.
func (a *assembler) reset(pos int64) {
	a.freed = append(a.freed, a.bufs...)
	a.bufs, a.n, a.pos = nil, 0, pos
}

// nextChunk returns the next whole chunk held, verified (header, region bounds, data CRC,
// id expected), or ok false when the chunk is not all there yet: as b, a sub-slice of one
// piece, or as parts when it spans pieces (see take). delivered is the cumulative chunk
// bytes delivered before it (for the mark of the piece it refers to).
func (a *assembler) nextChunk(key string, regionEnd int64, expectID uint64, delivered int64) (h chunk.Header, b []byte, parts [][]byte, ok bool, err error) {
	if a.n < chunk.HeaderSize {
		return h, nil, nil, false, nil
	}
	pos := a.pos
	h, perr := chunk.ParseHeader(a.peekHeader())
	if perr != nil {
		return h, nil, nil, false, &CorruptError{Key: key, Position: pos, Reason: perr.Error()}
	}
	size := h.Size()
	if pos+size > regionEnd {
		return h, nil, nil, false, &CorruptError{Key: key, Position: pos, Reason: fmt.Sprintf("chunk %d of %d bytes overruns the chunk region ending at %d", h.ChunkID, size, regionEnd)}
	}
	if h.ChunkID != expectID {
		return h, nil, nil, false, &CorruptError{Key: key, Position: pos, Reason: fmt.Sprintf("chunk id %d, expected %d", h.ChunkID, expectID)}
	}
	if a.n < size {
		return h, nil, nil, false, nil
	}
	b, parts = a.take(size, delivered+size)
	data := chunk.HeaderSize + int64(h.BloomSize)
	if got := crcOf(b, parts, data, int64(h.DataLen)); got != h.DataCRC {
		return h, nil, nil, false, &CorruptError{Key: key, Position: pos, Reason: fmt.Sprintf("chunk %d: data CRC %08x, header says %08x", h.ChunkID, got, h.DataCRC)}
	}
	return h, b, parts, true, nil
}
