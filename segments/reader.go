package segments

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/streamtier/streamtier/chunk"
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

// readAheadBufs recycles the read-ahead buffers: a reader holds one only while it has
// committed data to read, and gives it back at the end of the stream, so ten thousand idle
// readers hold none.
var readAheadBufs = sync.Pool{New: func() any { b := make([]byte, readAheadSmallChunks); return &b }}

// Reader drains committed chunk headers from a Log, in order, following segment rolls. It
// reads the 48-byte headers only; the bodies are read at upload time by location. A Reader
// is used by one goroutine at a time. It holds its segment file and a read-ahead buffer only
// while there is committed data to read: the buffer goes back to a pool at the end of the
// stream, and Suspend closes the file (the next Next reopens it), so an idle reader holds
// neither memory nor a descriptor.
type Reader struct {
	log      *Log
	seg      string   // segment file name
	segFirst uint64   // first chunk id of that segment
	f        *os.File // nil until needed, and while suspended
	pos      int64    // position of the next chunk header in seg
	next     uint64   // chunk id expected next
	closed   bool

	buf    *[]byte // from readAheadBufs; nil while the reader waits
	bufOff int64   // file position of buf[0]
	bufLen int
	bufVis uint64 // the log's visible offset just before buf was filled: chunks from it on may be torn in buf
	big    bool   // the last chunk did not fit the read-ahead buffer
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
	r := &Reader{log: l, seg: seg.name, segFirst: seg.first, pos: pos, next: id}
	if id < l.visible.Load() { // data to read now: open at once, so a vanished segment shows here
		if err := r.open(); err != nil {
			return nil, fmt.Errorf("new reader at %d: %w", from, err)
		}
	}
	return r, nil
}

// open opens the reader's current segment file. Running out of descriptors is an error
// matching syscall.EMFILE (or ENFILE) with errors.Is: the reader keeps its place and a
// later Next tries again.
func (r *Reader) open() error {
	f, err := OpenSegment(r.log.dir, r.seg)
	if err != nil {
		return err
	}
	r.f, r.bufLen = f, 0
	return nil
}

// release gives the read-ahead buffer back to the pool.
func (r *Reader) release() {
	if r.buf != nil {
		readAheadBufs.Put(r.buf)
		r.buf, r.bufLen = nil, 0
	}
}

// Suspend closes the reader's segment file and releases its buffer; it keeps its place, and
// the next Next with data to read reopens the file. A caller suspends a reader that has
// waited a while at the end of the stream.
func (r *Reader) Suspend() error {
	r.release()
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	if err != nil {
		return fmt.Errorf("suspend reader of %s: close %s: %w", r.log.dir, r.seg, err)
	}
	return nil
}

// HoldsFile reports whether the reader has its segment file open now.
func (r *Reader) HoldsFile() bool { return r.f != nil }

// NextOffset is the chunk id the reader returns next (once it is committed).
func (r *Reader) NextOffset() uint64 { return r.next }

// Next returns the header and location of the next committed chunk. It returns
// ErrEndOfStream when that chunk is not committed yet (call again later: the reader keeps
// its place), ErrSegmentGone when retention deleted the segment the reader is in or needs,
// and ErrClosed after the reader or the log closed. Other errors name the segment and
// position of a corrupt header.
func (r *Reader) Next() (chunk.Header, chunk.Location, error) {
	l := r.log
	if r.closed || l.closedFlg.Load() {
		return chunk.Header{}, chunk.Location{}, ErrClosed
	}
	if r.next >= l.visible.Load() {
		// Nothing to read: give the buffer back. What it holds beyond the committed end may
		// have been read while a chunk was being written, so it is not reused anyway.
		r.release()
		return chunk.Header{}, chunk.Location{}, ErrEndOfStream
	}
	if first := l.firstSeg.Load(); r.segFirst < first {
		// Retention deleted the reader's segment. If the reader had read all of it (its
		// next chunk starts a segment that is still there) it moves on; otherwise the
		// chunk it needs is gone.
		if r.next < first {
			return chunk.Header{}, chunk.Location{}, fmt.Errorf("read chunk %d: %s: %w", r.next, r.seg, ErrSegmentGone)
		}
		if err := r.roll(); err != nil {
			return chunk.Header{}, chunk.Location{}, err
		}
	}
	if r.f == nil {
		if err := r.open(); err != nil {
			return chunk.Header{}, chunk.Location{}, fmt.Errorf("read chunk %d: %w", r.next, err)
		}
	}
	if r.next >= r.bufVis {
		// The buffer was filled before this chunk was committed, perhaps while it was being
		// written: read it afresh.
		r.bufLen = 0
	}
	b, err := r.peek(r.pos, chunk.HeaderSize)
	if err != nil {
		return chunk.Header{}, chunk.Location{}, err
	}
	if b == nil {
		// The committed chunk r.next is not in this segment: the writer rolled.
		if err := r.roll(); err != nil {
			return chunk.Header{}, chunk.Location{}, err
		}
		if b, err = r.peek(r.pos, chunk.HeaderSize); err != nil {
			return chunk.Header{}, chunk.Location{}, err
		}
		if b == nil {
			return chunk.Header{}, chunk.Location{}, fmt.Errorf("read chunk %d: committed, yet %s holds no chunk", r.next, r.seg)
		}
	}
	h, err := chunk.ParseHeader(b)
	if err != nil {
		return chunk.Header{}, chunk.Location{}, fmt.Errorf("%s position %d: %w", r.seg, r.pos, err)
	}
	if h.ChunkID != r.next {
		return chunk.Header{}, chunk.Location{}, fmt.Errorf("%s position %d: chunk id %d, expected %d", r.seg, r.pos, h.ChunkID, r.next)
	}
	loc := chunk.Location{Segment: r.seg, Position: r.pos, Size: h.Size()}
	r.big = h.Size() > readAheadSmallChunks/2
	r.pos += h.Size()
	r.next = h.NextID()
	return h, loc, nil
}

// peek returns n bytes at file position pos, from the buffer or a fresh pread; nil when
// the file ends exactly at pos. A file ending inside the n bytes is an error.
func (r *Reader) peek(pos int64, n int) ([]byte, error) {
	if r.buf == nil {
		r.buf, r.bufLen = readAheadBufs.Get().(*[]byte), 0
	}
	buf := *r.buf
	if pos >= r.bufOff && pos+int64(n) <= r.bufOff+int64(r.bufLen) {
		off := int(pos - r.bufOff)
		return buf[off : off+n], nil
	}
	size := len(buf)
	if r.big {
		size = readAheadBigChunks
	}
	r.bufVis = r.log.visible.Load() // before the read: what is below it was written before
	got, err := r.f.ReadAt(buf[:size], pos)
	if err != nil && !errors.Is(err, io.EOF) {
		r.bufLen = 0
		return nil, fmt.Errorf("read %s at %d: %w", r.seg, pos, err)
	}
	r.bufOff, r.bufLen = pos, got
	switch {
	case got >= n:
		return buf[:n], nil
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
	if r.f != nil {
		if err := r.f.Close(); err != nil {
			return errors.Join(fmt.Errorf("close %s: %w", r.seg, err), f.Close())
		}
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

// Close releases the reader's segment file and buffer; Next then returns ErrClosed.
func (r *Reader) Close() error {
	r.closed = true
	r.release()
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}
