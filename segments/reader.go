package segments

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// Errors of the data reader.
var (
	// ErrEndOfStream: the next chunk is not committed (or not written) yet. Call Next again
	// later; NotifyWhenCommittedPast(reader.NextOffset()) says when.
	ErrEndOfStream = errors.New("end of stream")
	// ErrBelowFirst: the requested offset lies before the log's first offset (retention
	// deleted it). errors.As with *OffsetError gives the first offset.
	ErrBelowFirst = errors.New("offset below the first offset of the log")
	// ErrAboveNext: the requested offset lies beyond the log's next offset.
	ErrAboveNext = errors.New("offset above the next offset of the log")
)

// OffsetError says that a reader was asked for an offset outside [First, Next]. It
// matches ErrBelowFirst or ErrAboveNext with errors.Is.
type OffsetError struct {
	Dir    string
	Offset uint64 // the offset asked for
	First  uint64 // the log's first offset
	Next   uint64 // the log's next offset
}

// Error names the directory, the offset asked for and the range the log holds.
func (e *OffsetError) Error() string {
	return fmt.Sprintf("read %s from offset %d: %v (the log holds [%d, %d))", e.Dir, e.Offset, e.Unwrap(), e.First, e.Next)
}

// Unwrap is ErrBelowFirst or ErrAboveNext.
func (e *OffsetError) Unwrap() error {
	if e.Offset < e.First {
		return ErrBelowFirst
	}
	return ErrAboveNext
}

// Read-ahead sizes of the data reader. Headers are read from a buffer filled by one pread
// of readAheadSmallChunks bytes, so that a run of small chunks costs one syscall per many
// headers. After a chunk too big for the buffer to hold the next header, the reader reads
// only readAheadBigChunks: the body in between would be read for nothing.
const (
	readAheadSmallChunks = 64 << 10
	readAheadBigChunks   = 4 << 10
)

// Reader drains committed chunk headers from a Log, in order, following segment rolls. It
// reads the 48-byte headers only; the bodies are read at upload time by location. A Reader
// is used by one goroutine at a time.
type Reader struct {
	log      *Log
	seg      string // segment file name
	segFirst uint64 // first chunk id of that segment
	f        *os.File
	pos      int64  // position of the next chunk header in seg
	next     uint64 // chunk id expected next

	buf    []byte
	bufOff int64 // file position of buf[0]
	bufLen int
	big    bool // the last chunk did not fit the read-ahead buffer
}

// NewReader opens a reader whose first Next returns the chunk holding offset from (the
// chunk with id from, or the chunk from falls inside). from may equal NextOffset: the
// reader then waits at the end. Offsets outside [FirstOffset, NextOffset] give an
// *OffsetError (ErrBelowFirst, ErrAboveNext); a segment deleted meanwhile ErrSegmentGone.
func (l *Log) NewReader(from uint64) (*Reader, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	first := l.segs[0].first
	if from < first || from > l.nextID {
		return nil, &OffsetError{Dir: l.dir, Offset: from, First: first, Next: l.nextID}
	}
	seg := l.segs[l.segmentAt(from)]
	var pos int64
	var id uint64
	switch {
	case from == l.nextID:
		seg = l.segs[len(l.segs)-1]
		pos, id = seg.size, l.nextID
	case seg.chunks > 0 && from >= seg.lastID:
		pos, id = seg.lastPos, seg.lastID
	default:
		rec, _, err := searchIndex(l.dir, seg, from)
		if err != nil {
			return nil, fmt.Errorf("new reader at %d: %w", from, err)
		}
		pos, id = int64(rec.Position), rec.ChunkID
	}
	f, err := OpenSegment(l.dir, seg.name)
	if err != nil {
		return nil, fmt.Errorf("new reader at %d: %w", from, err)
	}
	return &Reader{log: l, seg: seg.name, segFirst: seg.first, f: f, pos: pos, next: id,
		buf: make([]byte, readAheadSmallChunks)}, nil
}

// NextOffset is the chunk id the reader returns next (once it is committed).
func (r *Reader) NextOffset() uint64 { return r.next }

// Next returns the header and location of the next committed chunk. It returns
// ErrEndOfStream when that chunk is not committed yet (call again later: the reader keeps
// its place), ErrSegmentGone when retention deleted the segment the reader is in or needs,
// and ErrClosed after the reader or the log closed. Other errors name the segment and
// position of a corrupt header.
func (r *Reader) Next() (Header, Location, error) {
	l := r.log
	if r.f == nil || l.closedFlg.Load() {
		return Header{}, Location{}, ErrClosed
	}
	if r.next >= l.visible.Load() {
		return Header{}, Location{}, ErrEndOfStream
	}
	if first := l.firstSeg.Load(); r.segFirst < first {
		// Retention deleted the reader's segment. If the reader had read all of it (its
		// next chunk starts a segment that is still there) it moves on; otherwise the
		// chunk it needs is gone.
		if r.next < first {
			return Header{}, Location{}, fmt.Errorf("read chunk %d: %s: %w", r.next, r.seg, ErrSegmentGone)
		}
		if err := r.roll(); err != nil {
			return Header{}, Location{}, err
		}
	}
	b, err := r.peek(r.pos, HeaderSize)
	if err != nil {
		return Header{}, Location{}, err
	}
	if b == nil {
		// The committed chunk r.next is not in this segment: the writer rolled.
		if err := r.roll(); err != nil {
			return Header{}, Location{}, err
		}
		if b, err = r.peek(r.pos, HeaderSize); err != nil {
			return Header{}, Location{}, err
		}
		if b == nil {
			return Header{}, Location{}, fmt.Errorf("read chunk %d: committed, yet %s holds no chunk", r.next, r.seg)
		}
	}
	h, err := ParseHeader(b)
	if err != nil {
		return Header{}, Location{}, fmt.Errorf("%s position %d: %w", r.seg, r.pos, err)
	}
	if h.ChunkID != r.next {
		return Header{}, Location{}, fmt.Errorf("%s position %d: chunk id %d, expected %d", r.seg, r.pos, h.ChunkID, r.next)
	}
	loc := Location{Segment: r.seg, Position: r.pos, Size: h.Size()}
	r.big = h.Size() > int64(len(r.buf))/2
	r.pos += h.Size()
	r.next = h.NextID()
	return h, loc, nil
}

// peek returns n bytes at file position pos, from the buffer or a fresh pread; nil when
// the file ends exactly at pos. A file ending inside the n bytes is an error.
func (r *Reader) peek(pos int64, n int) ([]byte, error) {
	if pos >= r.bufOff && pos+int64(n) <= r.bufOff+int64(r.bufLen) {
		off := int(pos - r.bufOff)
		return r.buf[off : off+n], nil
	}
	size := len(r.buf)
	if r.big {
		size = readAheadBigChunks
	}
	got, err := r.f.ReadAt(r.buf[:size], pos)
	if err != nil && !errors.Is(err, io.EOF) {
		r.bufLen = 0
		return nil, fmt.Errorf("read %s at %d: %w", r.seg, pos, err)
	}
	r.bufOff, r.bufLen = pos, got
	switch {
	case got >= n:
		return r.buf[:n], nil
	case got == 0:
		return nil, nil
	}
	return nil, fmt.Errorf("%s position %d: file ends %d bytes in, inside a %d-byte read: %w", r.seg, pos, got, n, io.ErrUnexpectedEOF)
}

// roll moves the reader to the segment named after the chunk id it expects.
func (r *Reader) roll() error {
	name := SegmentName(r.next)
	if name == r.seg {
		return fmt.Errorf("read chunk %d: committed, yet %s ends at %d", r.next, r.seg, r.pos)
	}
	f, err := OpenSegment(r.log.dir, name)
	if err != nil {
		return fmt.Errorf("read chunk %d: %w", r.next, err)
	}
	if err := r.f.Close(); err != nil {
		return errors.Join(fmt.Errorf("close %s: %w", r.seg, err), f.Close())
	}
	r.f, r.seg, r.segFirst, r.pos, r.bufLen = f, name, r.next, FileHeaderSize, 0
	b, err := r.peek(0, FileHeaderSize)
	if err != nil {
		return err
	}
	if b == nil {
		return fmt.Errorf("read chunk %d: %s is empty", r.next, name)
	}
	return checkFileHeader(b, segmentFileHeader, name)
}

// Close releases the reader's segment file.
func (r *Reader) Close() error {
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}
