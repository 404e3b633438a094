package segments

import "fmt"

// AppendRaw writes one chunk exactly as given (header, bloom, data and trailer, bytes
// unchanged: id, epoch, timestamp and CRC are the chunk's own) at the end of the log: how a
// restore rebuilds a log from its remote tier. The chunk must verify (VerifyChunk), its id
// must be the log's next offset and its epoch not below the log's. The log does not take
// the slice: it is written before AppendRaw returns. Like Append, the chunk is readable
// only once committed.
func (l *Log) AppendRaw(chunk []byte) (Header, Location, error) {
	h, err := VerifyChunk(chunk)
	if err != nil {
		return Header{}, Location{}, fmt.Errorf("append raw chunk to %s: %w", l.dir, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return Header{}, Location{}, ErrClosed
	case l.broken != nil:
		return Header{}, Location{}, fmt.Errorf("append raw chunk to %s: an earlier write failed, reopen the log to recover: %w", l.dir, l.broken)
	case h.ChunkID != l.nextID:
		return Header{}, Location{}, fmt.Errorf("append raw chunk to %s: chunk id %d, the log's next offset is %d", l.dir, h.ChunkID, l.nextID)
	case l.hasLast && h.Epoch < l.last.Epoch:
		return Header{}, Location{}, fmt.Errorf("append raw chunk to %s: chunk %d has epoch %d, below the log's epoch %d", l.dir, h.ChunkID, h.Epoch, l.last.Epoch)
	}
	return l.writeChunk(chunk, h)
}
