package segments

import (
	"bufio"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/streamtier/streamtier/chunk"
)

// ErrReadOnly is returned by Append and AppendRaw on a log opened with Options.ReadOnly:
// another process writes that directory.
var ErrReadOnly = errors.New("log opened read-only (follow mode): another process writes it")

// ErrRewritten marks a followed directory that no longer holds what the follower saw: a
// file shrank, vanished or a chunk below the known end changed (the writer truncated an
// uncommitted tail). errors.As with *RewrittenError gives the details.
var ErrRewritten = errors.New("followed log rewritten below what was seen")

// RewrittenError says how a followed directory changed under the follower. It matches
// ErrRewritten with errors.Is. The follower's view did not advance.
type RewrittenError struct {
	Dir     string
	Segment string // the file that changed
	Next    uint64 // the follower's next offset (one past what it saw)
	Last    uint64 // chunk id of the last chunk it saw (when HasLast)
	HasLast bool
	Detail  string // what changed
	// Shrank says the change proves a rewrite: a file the follower had seen shrank, a chunk
	// it had seen changed, or its last segment vanished while an older one stayed (the
	// writer's retention deletes the oldest first). A last segment that vanished with
	// every older one could as well be retention: Shrank is false then.
	Shrank bool
}

// Error names the directory, the file, what changed and the offsets the follower held.
func (e *RewrittenError) Error() string {
	last := "none"
	if e.HasLast {
		last = fmt.Sprint(e.Last)
	}
	return fmt.Sprintf("follow %s: %s: %s (the follower had seen up to offset %d, last chunk %s): %v",
		e.Dir, e.Segment, e.Detail, e.Next, last, ErrRewritten)
}

// Unwrap is ErrRewritten.
func (e *RewrittenError) Unwrap() error { return ErrRewritten }

// FollowState is what the last Refresh of a followed log found.
type FollowState struct {
	// Next is one past the last complete chunk seen.
	Next uint64
	// PendingBytes are the bytes of the last segment file past its last complete chunk: a
	// chunk the writer is writing (or a torn tail it left), not visible yet.
	PendingBytes int64
	// Dropped names the oldest segments that vanished from the directory (the writer's own
	// retention) and left the view in this Refresh.
	Dropped []string
}

// ReadOnly reports whether the log was opened with Options.ReadOnly (follow mode).
func (l *Log) ReadOnly() bool { return l.opts.ReadOnly }

// openReadOnly opens dir as a follower: nothing is created, written or truncated. The view
// is every sealed segment plus the prefix of the last segment that is complete (see
// scanActive); an incomplete tail is left out, not repaired.
func openReadOnly(dir string, opts Options) (*Log, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("follow log: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("follow log: %s is not a directory", dir)
	}
	listing, err := listDir(dir)
	if err != nil {
		return nil, fmt.Errorf("follow log %s: %w", dir, err)
	}
	if len(listing.pairs) == 0 {
		return nil, fmt.Errorf("follow log %s: no segment file with its index file yet (has the writer created the stream?)", dir)
	}
	l := &Log{dir: dir, opts: opts}
	for i, id := range listing.pairs {
		var s *segment
		var h chunk.Header
		if i < len(listing.pairs)-1 {
			s, h, err = loadSealed(dir, id)
		} else {
			s, h, l.followed.PendingBytes, err = openActiveReadOnly(dir, id)
		}
		if err != nil {
			return nil, fmt.Errorf("follow log %s: %w", dir, err)
		}
		if n := len(l.segs); n > 0 && l.segs[n-1].next != s.first {
			return nil, fmt.Errorf("follow log %s: %s ends at offset %d but %s starts at %d", dir, l.segs[n-1].name, l.segs[n-1].next, s.name, s.first)
		}
		if s.chunks > 0 {
			l.last, l.hasLast = h, true
		}
		l.segs = append(l.segs, s)
	}
	l.nextID = l.segs[len(l.segs)-1].next
	l.followed.Next = l.nextID
	l.firstSeg.Store(l.segs[0].first)
	return l, nil
}

// openActiveReadOnly reads the account of the last segment without changing it: like
// recovery, the last index record that points at a complete chunk with a valid CRC marks
// the end, and the chunks before it are the writer's earlier appends; what follows (a torn
// chunk, a chunk without its record, a record without its chunk) is not visible yet.
func openActiveReadOnly(dir string, id uint64) (s *segment, last chunk.Header, pending int64, err error) {
	s = &segment{name: SegmentName(id), first: id, next: id, size: FileHeaderSize}
	sf, xf, segSize, idxSize, err := openPairReadOnly(dir, id)
	if err != nil {
		return nil, chunk.Header{}, 0, err
	}
	defer sf.Close()
	defer xf.Close()
	if segSize < FileHeaderSize || idxSize < FileHeaderSize {
		return s, chunk.Header{}, 0, nil // a roll in progress: the file headers are being written
	}
	slots := int((idxSize - FileHeaderSize) / IndexRecordSize)
	for k := slots - 1; k >= 0; k-- {
		rec, h, ok, err := validChunkAt(sf, xf, k, segSize)
		if err != nil {
			return nil, chunk.Header{}, 0, err
		}
		if !ok {
			continue
		}
		first, err := readIndexRecord(xf, 0)
		if err != nil {
			return nil, chunk.Header{}, 0, err
		}
		if first.ChunkID != id {
			return nil, chunk.Header{}, 0, fmt.Errorf("%s: first record is chunk %d, the name says %d", IndexName(id), first.ChunkID, id)
		}
		s.size = int64(rec.Position) + h.Size()
		s.chunks, s.next, s.firstTS, s.lastTS = k+1, h.NextID(), first.Timestamp, h.Timestamp
		s.lastID, s.lastPos = h.ChunkID, int64(rec.Position)
		return s, h, segSize - s.size, nil
	}
	return s, chunk.Header{}, segSize - s.size, nil
}

// openPairReadOnly opens a segment and its index for reading and checks whatever of their
// file headers is present (a file shorter than its header must hold a prefix of it: a roll
// in progress). It returns both sizes.
func openPairReadOnly(dir string, id uint64) (sf, xf *os.File, segSize, idxSize int64, err error) {
	sf, err = os.Open(filepath.Join(dir, SegmentName(id)))
	if err != nil {
		return nil, nil, 0, 0, err
	}
	xf, err = os.Open(filepath.Join(dir, IndexName(id)))
	if err != nil {
		return nil, nil, 0, 0, errors.Join(err, sf.Close())
	}
	fail := func(err error) (*os.File, *os.File, int64, int64, error) {
		return nil, nil, 0, 0, errors.Join(err, sf.Close(), xf.Close())
	}
	if segSize, err = presentHeader(sf, segmentFileHeader); err != nil {
		return fail(err)
	}
	if idxSize, err = presentHeader(xf, indexFileHeader); err != nil {
		return fail(err)
	}
	return sf, xf, segSize, idxSize, nil
}

// presentHeader returns the size of f after checking the part of its file header it holds
// (a file shorter than a header may hold only a prefix of it or zeros: torn, or being
// written).
func presentHeader(f *os.File, header []byte) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	b := make([]byte, min(st.Size(), FileHeaderSize))
	if err := readAtFull(f, b, 0); err != nil {
		return 0, err
	}
	if st.Size() >= FileHeaderSize {
		return st.Size(), checkFileHeader(b, header, filepath.Base(f.Name()))
	}
	for i, c := range b {
		if c != 0 && c != header[i] {
			return 0, fmt.Errorf("%s: %d-byte file that is not a partial file header", filepath.Base(f.Name()), len(b))
		}
	}
	return st.Size(), nil
}

// seenChunk is a chunk a Refresh found complete.
type seenChunk struct {
	h   chunk.Header
	pos int64
}

// Refresh extends the view of a followed (read-only) log with the chunks the writer has
// completed since: in the last segment and in new segment files named after the next
// offset. A chunk is visible once its index record is written and points at a whole chunk
// in the segment whose header agrees and whose data CRC is valid; anything short of that
// is not visible yet and is no error. Segments that vanished from the front of the
// directory (the writer's retention) leave the view. A file that shrank or vanished, or a
// last seen chunk that changed, is a *RewrittenError (ErrRewritten): the view stays as it
// was. Refresh does not commit; the caller decides with SetCommitted. LastRefresh keeps
// the outcome for status.
func (l *Log) Refresh() (FollowState, error) {
	st, err := l.refresh()
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		l.followed, l.followErr = st, nil
	case !errors.Is(err, ErrClosed):
		l.followErr = err
	}
	return st, err
}

// LastRefresh is what the last Refresh found (the view's end and the pending bytes, as of
// the last success) and its error (nil when it succeeded): what status shows of a
// followed log. Before any Refresh it is the state at open.
func (l *Log) LastRefresh() (FollowState, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.followed, l.followErr
}

func (l *Log) refresh() (FollowState, error) {
	if !l.opts.ReadOnly {
		return FollowState{}, fmt.Errorf("refresh %s: only a log opened read-only follows its directory", l.dir)
	}
	// retainMu: Refresh and ApplyRetention are the only ones to change the segment list (and
	// Refresh the only one to change a segment's account), so the list read below without
	// mu stays as read until the update under mu.
	l.retainMu.Lock()
	defer l.retainMu.Unlock()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return FollowState{}, ErrClosed
	}
	segs := append([]*segment(nil), l.segs...)
	last, hasLast := l.last, l.hasLast
	l.mu.Unlock()

	var st FollowState
	drop := 0
	for drop < len(segs)-1 {
		_, err := os.Stat(filepath.Join(l.dir, segs[drop].name))
		if !errors.Is(err, fs.ErrNotExist) {
			break
		}
		st.Dropped = append(st.Dropped, segs[drop].name)
		drop++
	}
	act := *segs[len(segs)-1]
	rewritten := func(name, detail string, args ...any) error {
		return &RewrittenError{Dir: l.dir, Segment: name, Next: act.next, Last: last.ChunkID, HasLast: hasLast, Detail: fmt.Sprintf(detail, args...), Shrank: true}
	}
	sf, xf, segSize, idxSize, err := openPairReadOnly(l.dir, act.first)
	if errors.Is(err, fs.ErrNotExist) {
		rw := rewritten(act.name, "the last segment or its index is gone").(*RewrittenError)
		// The loop above stopped at a segment still there, older than the last, unless it
		// dropped every older one.
		rw.Shrank = drop < len(segs)-1
		if rw.Shrank {
			rw.Detail += fmt.Sprintf(" while the older %s is still there", segs[drop].name)
		}
		return FollowState{}, rw
	}
	if err != nil {
		return FollowState{}, fmt.Errorf("refresh %s: %w", l.dir, err)
	}
	defer sf.Close()
	defer xf.Close()
	// Only what was seen can shrink or change. A last segment with no chunk seen is a roll
	// (its files may even be shorter than their headers: the follower may have opened
	// before they were whole): the last chunk seen is in the segment before it, which the
	// writer may have truncated and written again since, rolling again to the same name.
	// So that one is checked instead; only a view with no chunk at all has nothing to check.
	if act.chunks > 0 {
		if file, detail := seenUnchanged(sf, xf, &act, segSize, idxSize, last); detail != "" {
			return FollowState{}, rewritten(file, "%s", detail)
		}
	} else if hasLast && len(segs)-drop >= 2 {
		if err := l.prevUnchanged(segs[len(segs)-2], last, rewritten); err != nil {
			return FollowState{}, err
		}
	}
	fresh, err := scanForward(sf, xf, &act, segSize, idxSize, last, hasLast)
	if err != nil {
		return FollowState{}, fmt.Errorf("refresh %s: %w", l.dir, err)
	}
	if len(fresh) > 0 {
		last, hasLast = fresh[len(fresh)-1].h, true
	}
	st.PendingBytes = max(0, segSize-act.size)
	var added []*segment
	var addedChunks [][]seenChunk
	for tailEnd := segSize; act.chunks > 0 || len(added) > 0; {
		// The writer rolls to a segment named after the next offset once the last one is
		// whole: follow it once it holds a complete chunk.
		cur := &act
		if len(added) > 0 {
			cur = added[len(added)-1]
		}
		ns, chunks, nsSize, err := l.scanNew(cur.next, last, hasLast)
		if err != nil {
			return FollowState{}, fmt.Errorf("refresh %s: %w", l.dir, err)
		}
		if ns == nil {
			break
		}
		if tailEnd != cur.size {
			// The writer may have cut those bytes and rolled since the size was taken.
			if fi, err := os.Stat(filepath.Join(l.dir, cur.name)); err == nil {
				tailEnd = fi.Size()
			}
		}
		if tailEnd != cur.size {
			return FollowState{}, fmt.Errorf("refresh %s: %s holds %d bytes past its last complete chunk, yet %s follows it", l.dir, cur.name, tailEnd-cur.size, ns.name)
		}
		added, addedChunks = append(added, ns), append(addedChunks, chunks)
		last, hasLast = chunks[len(chunks)-1].h, true
		tailEnd = nsSize
		st.PendingBytes = nsSize - ns.size
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return FollowState{}, ErrClosed
	}
	if drop > 0 {
		l.segs = l.segs[drop:]
		l.firstSeg.Store(l.segs[0].first)
	}
	*l.segs[len(l.segs)-1] = act
	l.segs = append(l.segs, added...)
	for _, chunks := range append([][]seenChunk{fresh}, addedChunks...) {
		for _, c := range chunks {
			l.nextID = c.h.NextID()
			l.commit.written(c.h, l.nextID)
		}
	}
	l.last, l.hasLast = last, hasLast
	l.publish()
	st.Next = l.nextID
	return st, nil
}

// seenUnchanged checks that what the follower saw of s is still there: neither file shrank
// below it and its last chunk (last) is unchanged. It returns the file that changed and
// how, or an empty detail.
func seenUnchanged(sf, xf *os.File, s *segment, segSize, idxSize int64, last chunk.Header) (file, detail string) {
	if segSize < s.size {
		return s.name, fmt.Sprintf("the segment shrank to %d bytes, below the %d seen", segSize, s.size)
	}
	if want := FileHeaderSize + int64(s.chunks)*IndexRecordSize; idxSize < want {
		return IndexName(s.first), fmt.Sprintf("the index shrank to %d bytes, below the %d seen", idxSize, want)
	}
	if err := sameLastChunk(sf, xf, s, last); err != nil {
		return s.name, err.Error()
	}
	return "", ""
}

// prevUnchanged checks the segment before an empty last segment, which holds the last
// chunk seen (last): a missing file, a shrink or a changed last chunk is a
// *RewrittenError made by rewritten.
func (l *Log) prevUnchanged(prev *segment, last chunk.Header, rewritten func(name, detail string, args ...any) error) error {
	sf, xf, segSize, idxSize, err := openPairReadOnly(l.dir, prev.first)
	if errors.Is(err, fs.ErrNotExist) {
		rw := rewritten(prev.name, "the segment holding the last chunk seen or its index is gone").(*RewrittenError)
		rw.Shrank = false // the writer's retention may have deleted it (the empty last one stays)
		return rw
	}
	if err != nil {
		return fmt.Errorf("refresh %s: %w", l.dir, err)
	}
	defer sf.Close()
	defer xf.Close()
	if file, detail := seenUnchanged(sf, xf, prev, segSize, idxSize, last); detail != "" {
		return rewritten(file, "%s", detail)
	}
	return nil
}

// sameLastChunk checks that the last chunk seen in the segment is still there, header and
// index record unchanged.
func sameLastChunk(sf, xf *os.File, s *segment, last chunk.Header) error {
	rec, err := readIndexRecord(xf, s.chunks-1)
	if err != nil {
		return fmt.Errorf("the index record of the last chunk seen no longer reads: %w", err)
	}
	want := IndexRecord{ChunkID: last.ChunkID, Timestamp: last.Timestamp, Epoch: last.Epoch, Position: uint32(s.lastPos), Type: last.Type}
	if rec != want {
		return fmt.Errorf("index record %d now names chunk %d (epoch %d) at position %d, it was chunk %d (epoch %d) at %d",
			s.chunks-1, rec.ChunkID, rec.Epoch, rec.Position, want.ChunkID, want.Epoch, want.Position)
	}
	h, err := readHeaderAt(sf, s.lastPos)
	if err != nil {
		return fmt.Errorf("the header of the last chunk seen no longer reads: %w", err)
	}
	if h != last {
		return fmt.Errorf("position %d now holds chunk %d (epoch %d, crc %08x), it was chunk %d (epoch %d, crc %08x)",
			s.lastPos, h.ChunkID, h.Epoch, h.DataCRC, last.ChunkID, last.Epoch, last.DataCRC)
	}
	return nil
}

// scanBatch bounds the index records scanForward reads at once (about 1.9 MB).
const scanBatch = 1 << 16

// scanForward walks the index records of s past the chunks seen and returns the chunks
// that are complete, updating s; it stops at the first record or chunk that is not (yet)
// whole, agreeing and CRC-valid. The records are read in batches and the chunks, which
// follow each other in the segment, through one buffered sequential read, so that a run
// of small chunks costs a few syscalls. Only I/O errors are errors.
func scanForward(sf, xf *os.File, s *segment, segSize, idxSize int64, last chunk.Header, hasLast bool) ([]seenChunk, error) {
	if segSize < FileHeaderSize || idxSize < FileHeaderSize {
		return nil, nil
	}
	var out []seenChunk
	crc := crc32.NewIEEE()
	var hb [chunk.HeaderSize]byte
	for {
		start := FileHeaderSize + int64(s.chunks)*IndexRecordSize
		n := min((idxSize-start)/IndexRecordSize, scanBatch)
		if n <= 0 {
			return out, nil
		}
		ib := make([]byte, n*IndexRecordSize)
		if err := readAtFull(xf, ib, start); err != nil {
			return nil, err
		}
		br := bufio.NewReaderSize(io.NewSectionReader(sf, s.size, segSize-s.size), 256<<10)
		for k := int64(0); k < n; k++ {
			r := decodeIndexRecord(ib[k*IndexRecordSize : (k+1)*IndexRecordSize])
			if r.wellFormed() != nil || int64(r.Position) != s.size || r.ChunkID != s.next || (hasLast && r.Epoch < last.Epoch) ||
				int64(r.Position)+chunk.HeaderSize > segSize {
				return out, nil
			}
			if _, err := io.ReadFull(br, hb[:]); err != nil {
				return out, notYet(err, s.name, r.Position)
			}
			h, err := chunk.ParseHeader(hb[:])
			if err != nil || matches(h, r) != nil || int64(r.Position)+h.Size() > segSize {
				return out, nil
			}
			crc.Reset()
			if _, err := br.Discard(int(h.BloomSize)); err != nil {
				return out, notYet(err, s.name, r.Position)
			}
			if _, err := io.CopyN(crc, br, int64(h.DataLen)); err != nil {
				return out, notYet(err, s.name, r.Position)
			}
			if _, err := br.Discard(int(h.TrailerLen)); err != nil {
				return out, notYet(err, s.name, r.Position)
			}
			if crc.Sum32() != h.DataCRC {
				return out, nil
			}
			if s.chunks == 0 {
				s.firstTS = h.Timestamp
			}
			s.chunks, s.size, s.next, s.lastTS, s.lastID, s.lastPos = s.chunks+1, int64(r.Position)+h.Size(), h.NextID(), h.Timestamp, h.ChunkID, int64(r.Position)
			out = append(out, seenChunk{h: h, pos: int64(r.Position)})
			last, hasLast = h, true
		}
	}
}

// notYet is nil for a read that ended early (the file shrank under the scan: the next
// Refresh tells) and the error, naming the position, for any other failure.
func notYet(err error, name string, pos uint32) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil
	}
	return fmt.Errorf("%s position %d: %w", name, pos, err)
}

// scanNew looks at the segment named after id: nil while it is absent or holds no complete
// chunk yet, otherwise its account, its complete chunks and its file size.
func (l *Log) scanNew(id uint64, last chunk.Header, hasLast bool) (*segment, []seenChunk, int64, error) {
	sf, xf, segSize, idxSize, err := openPairReadOnly(l.dir, id)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, 0, nil // not rolled yet, or the index is not created yet
	}
	if err != nil {
		return nil, nil, 0, err
	}
	defer sf.Close()
	defer xf.Close()
	s := &segment{name: SegmentName(id), first: id, next: id, size: FileHeaderSize}
	chunks, err := scanForward(sf, xf, s, segSize, idxSize, last, hasLast)
	if err != nil || len(chunks) == 0 {
		return nil, nil, 0, err
	}
	return s, chunks, segSize, nil
}
