package segments

import (
	"fmt"

	"github.com/streamtier/streamtier/chunk"
)

// AppendRaw writes one chunk exactly as given (header, bloom, data and trailer, bytes
// unchanged: id, epoch, timestamp and CRC are the chunk's own) at the end of the log: how a
// restore rebuilds a log from its remote tier. The chunk must verify (VerifyChunk), its id
// must be the log's next offset and its epoch not below the log's. The log does not take
// the slice: it is written before AppendRaw returns. Like Append, the chunk is readable
// only once committed.
func (l *Log) AppendRaw(raw []byte) (chunk.Header, chunk.Location, error) {
	h, err := VerifyChunk(raw)
	if err != nil {
		return chunk.Header{}, chunk.Location{}, fmt.Errorf("append raw raw to %s: %w", l.dir, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return chunk.Header{}, chunk.Location{}, ErrClosed
	case l.broken != nil:
		return chunk.Header{}, chunk.Location{}, fmt.Errorf("append raw raw to %s: an earlier write failed, reopen the log to recover: %w", l.dir, l.broken)
	case h.ChunkID != l.nextID:
		return chunk.Header{}, chunk.Location{}, fmt.Errorf("append raw raw to %s: raw id %d, the log's next offset is %d", l.dir, h.ChunkID, l.nextID)
	case l.hasLast && h.Epoch < l.last.Epoch:
		return chunk.Header{}, chunk.Location{}, fmt.Errorf("append raw raw to %s: raw %d has epoch %d, below the log's epoch %d", l.dir, h.ChunkID, h.Epoch, l.last.Epoch)
	}
	return l.writeChunk(raw, h)
}
