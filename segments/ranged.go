package segments

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"

	"github.com/streamtier/streamtier/chunk"
)

// segmentGone wraps a missing-file error on path as ErrSegmentGone.
func segmentGone(err error, path string) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", filepath.Base(path), ErrSegmentGone)
	}
	return err
}

// ReadRange reads length bytes at pos of segment file segment: the bytes of one or more
// chunks, for an upload. A deleted segment is ErrSegmentGone; a range past the end of the
// file is an error naming both.
func (l *Log) ReadRange(segment string, pos, length int64) ([]byte, error) {
	if pos < 0 || length < 0 {
		return nil, fmt.Errorf("read %s: bad range at %d length %d", segment, pos, length)
	}
	f, err := OpenSegment(l.dir, segment)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", segment, err)
	}
	if pos+length > st.Size() {
		return nil, fmt.Errorf("read %s: range [%d, %d) past the end of the file at %d: %w", segment, pos, pos+length, st.Size(), io.ErrUnexpectedEOF)
	}
	b := make([]byte, length)
	if err := readAtFull(f, b, pos); err != nil {
		return nil, fmt.Errorf("read %s: %w", segment, err)
	}
	return b, nil
}

// ReadChunk reads the complete bytes of the chunk at loc and checks them with VerifyChunk:
// a CRC mismatch is ErrChunkCRC, a deleted segment ErrSegmentGone.
func (l *Log) ReadChunk(loc chunk.Location) ([]byte, chunk.Header, error) {
	b, err := l.ReadRange(loc.Segment, loc.Position, loc.Size)
	if err != nil {
		return nil, chunk.Header{}, err
	}
	h, err := VerifyChunk(b)
	if err != nil {
		return nil, chunk.Header{}, fmt.Errorf("%s position %d: %w", loc.Segment, loc.Position, err)
	}
	return b, h, nil
}
