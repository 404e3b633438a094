package segments

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/streamtier/streamtier/chunk"
)

// dirListing is what a stream directory holds: ids with both files, and the debris.
type dirListing struct {
	pairs        []uint64 // ids with a .segment and an .index, ascending
	segmentsOnly []uint64 // .segment without .index
	indexesOnly  []uint64 // .index without .segment
}

// listDir reads the stream directory's segment and index files; other files are ignored.
func listDir(dir string) (dirListing, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return dirListing{}, err
	}
	segs := map[uint64]bool{}
	idxs := map[uint64]bool{}
	for _, e := range ents {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, segmentExt):
			if id, err := parseFileName(name, segmentExt); err == nil && e.Type().IsRegular() {
				segs[id] = true
			}
		case strings.HasSuffix(name, indexExt):
			if id, err := parseFileName(name, indexExt); err == nil && e.Type().IsRegular() {
				idxs[id] = true
			}
		}
	}
	var l dirListing
	for id := range segs {
		if idxs[id] {
			l.pairs = append(l.pairs, id)
		} else {
			l.segmentsOnly = append(l.segmentsOnly, id)
		}
	}
	for id := range idxs {
		if !segs[id] {
			l.indexesOnly = append(l.indexesOnly, id)
		}
	}
	slices.Sort(l.pairs)
	slices.Sort(l.segmentsOnly)
	slices.Sort(l.indexesOnly)
	return l, nil
}

// debrisOutside splits orphan files into those before the first pair or after the last
// (crash debris: a retention or a roll cut short) and those in between (a damaged log).
func (d dirListing) debrisOutside() (debris []string, inside []string) {
	check := func(ids []uint64, name func(uint64) string) {
		for _, id := range ids {
			if len(d.pairs) == 0 || id < d.pairs[0] || id > d.pairs[len(d.pairs)-1] {
				debris = append(debris, name(id))
			} else {
				inside = append(inside, name(id))
			}
		}
	}
	check(d.segmentsOnly, SegmentName)
	check(d.indexesOnly, IndexName)
	return debris, inside
}

// load reads the directory into l and repairs what a crash leaves:
//   - a .segment without .index, or an .index without .segment, before the oldest or after
//     the newest complete pair is removed (one in the middle is an error);
//   - the last segment: index records are dropped from the tail (a partial record, all-zero
//     records, records that do not point at a complete chunk with a valid CRC) until the
//     last one does; the segment is truncated right after that chunk (dropping torn or
//     unindexed chunks) and the index after that record. A missing or short file header
//     of the last pair is rewritten.
//
// Older segments are only checked (their last index record must point at a chunk that ends
// the segment, and chunk ids must run on from one segment to the next), never changed.
func (l *Log) load() error {
	fi, err := os.Stat(l.dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", l.dir)
	}
	listing, err := listDir(l.dir)
	if err != nil {
		return err
	}
	debris, inside := listing.debrisOutside()
	if len(inside) > 0 {
		return fmt.Errorf("files without their pair inside the log (not crash debris, refusing to guess): %s", strings.Join(inside, ", "))
	}
	for _, name := range debris { // all checked before any is removed: a refusal changes nothing
		if err := checkDebris(l.dir, name); err != nil {
			return err
		}
	}
	for _, name := range debris {
		if err := os.Remove(filepath.Join(l.dir, name)); err != nil {
			return fmt.Errorf("remove crash debris: %w", err)
		}
	}
	if len(listing.pairs) == 0 {
		seg, idx, err := createSegment(l.dir, l.opts.FirstOffset)
		if err != nil {
			return err
		}
		l.segFile, l.idxFile = seg, idx
		id := l.opts.FirstOffset
		l.segs = []*segment{{name: SegmentName(id), first: id, next: id, size: FileHeaderSize}}
		l.nextID = id
		return nil
	}
	for i, id := range listing.pairs {
		var s *segment
		var h chunk.Header
		if i < len(listing.pairs)-1 {
			s, h, err = loadSealed(l.dir, id)
		} else {
			s, h, err = l.recoverActive(id)
		}
		if err != nil {
			return err
		}
		if n := len(l.segs); n > 0 && l.segs[n-1].next != s.first {
			return fmt.Errorf("%s ends at offset %d but %s starts at %d", l.segs[n-1].name, l.segs[n-1].next, s.name, s.first)
		}
		if s.chunks > 0 {
			l.last, l.hasLast = h, true
		}
		l.segs = append(l.segs, s)
	}
	l.nextID = l.segs[len(l.segs)-1].next
	return nil
}

// ErrNotDebris: Open found a segment file without its index, outside the log's pairs, that
// holds more than a file header (or is no segment). Crash debris holds at most a file
// header, so Open refuses to delete it.
var ErrNotDebris = errors.New("not crash debris")

// checkDebris says whether an orphan file outside the log's pairs may be removed. An index
// holds no data. A segment may only if it holds at most its file header: a crash leaves no
// more (the writer creates a segment and its index before it writes a chunk, and retention
// deletes the segment before its index). One holding more is not debris (a copied stream
// directory whose index files were left behind, say): it must be moved aside or given its
// index, and Open refuses with ErrNotDebris.
func checkDebris(dir, name string) error {
	if !strings.HasSuffix(name, segmentExt) {
		return nil
	}
	size, err := headerOnlySize(filepath.Join(dir, name))
	if err == nil && size <= FileHeaderSize {
		return nil
	}
	reason := fmt.Sprintf("holds %d bytes, more than the file header a crash leaves", size)
	if err != nil {
		reason = "is not a segment: " + err.Error()
	}
	index := strings.TrimSuffix(name, segmentExt) + indexExt
	return fmt.Errorf("%w: %s has no %s and %s; move it out of the directory or restore its index",
		ErrNotDebris, name, index, reason)
}

// headerOnlySize is the size of the segment file at path, and an error if what it holds
// does not start with a segment file header (or a prefix of one, or zeros).
func headerOnlySize(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	size, err := presentHeader(f, segmentFileHeader)
	return size, errors.Join(err, f.Close())
}

// readAtFull reads len(b) bytes at off; a short read is an error naming the file.
func readAtFull(f *os.File, b []byte, off int64) error {
	n, err := f.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("%s: read %d bytes at %d: got %d: %w", filepath.Base(f.Name()), len(b), off, n, err)
}

// loadSealed reads the account of a segment the writer has left behind, checking its
// file headers and that its last index record points at the chunk that ends the file.
func loadSealed(dir string, id uint64) (*segment, chunk.Header, error) {
	s := &segment{name: SegmentName(id), first: id}
	sf, err := os.Open(filepath.Join(dir, s.name))
	if err != nil {
		return nil, chunk.Header{}, err
	}
	defer sf.Close()
	xf, err := os.Open(filepath.Join(dir, IndexName(id)))
	if err != nil {
		return nil, chunk.Header{}, err
	}
	defer xf.Close()
	sst, err := sf.Stat()
	if err != nil {
		return nil, chunk.Header{}, err
	}
	xst, err := xf.Stat()
	if err != nil {
		return nil, chunk.Header{}, err
	}
	var hb [FileHeaderSize]byte
	if err := readAtFull(sf, hb[:], 0); err != nil {
		return nil, chunk.Header{}, err
	}
	if err := checkFileHeader(hb[:], segmentFileHeader, s.name); err != nil {
		return nil, chunk.Header{}, err
	}
	if err := readAtFull(xf, hb[:], 0); err != nil {
		return nil, chunk.Header{}, err
	}
	if err := checkFileHeader(hb[:], indexFileHeader, IndexName(id)); err != nil {
		return nil, chunk.Header{}, err
	}
	s.size = sst.Size()
	s.chunks = int((xst.Size() - FileHeaderSize) / IndexRecordSize)
	if s.chunks == 0 {
		return nil, chunk.Header{}, fmt.Errorf("%s: no chunk, yet a later segment exists", IndexName(id))
	}
	first, err := readIndexRecord(xf, 0)
	if err != nil {
		return nil, chunk.Header{}, err
	}
	last, err := readIndexRecord(xf, s.chunks-1)
	if err != nil {
		return nil, chunk.Header{}, err
	}
	if first.ChunkID != id {
		return nil, chunk.Header{}, fmt.Errorf("%s: first record is chunk %d, the name says %d", IndexName(id), first.ChunkID, id)
	}
	if int64(last.Position)+chunk.HeaderSize > s.size {
		return nil, chunk.Header{}, fmt.Errorf("%s is %d bytes, but its index (%s) puts chunk %d at position %d: the segment was cut short (or the index belongs to another file)",
			s.name, s.size, IndexName(id), last.ChunkID, last.Position)
	}
	h, err := readHeaderAt(sf, int64(last.Position))
	if err != nil {
		return nil, chunk.Header{}, err
	}
	if err := matches(h, last); err != nil {
		return nil, chunk.Header{}, fmt.Errorf("%s position %d: %w", s.name, last.Position, err)
	}
	if end := int64(last.Position) + h.Size(); end != s.size {
		return nil, chunk.Header{}, fmt.Errorf("%s: last indexed chunk %d ends at %d, the file at %d", s.name, h.ChunkID, end, s.size)
	}
	s.next, s.firstTS, s.lastTS = h.NextID(), first.Timestamp, last.Timestamp
	s.lastID, s.lastPos = h.ChunkID, int64(last.Position)
	return s, h, nil
}

// readIndexRecord reads and checks record k of an index file.
func readIndexRecord(f *os.File, k int) (IndexRecord, error) {
	var b [IndexRecordSize]byte
	pos := FileHeaderSize + int64(k)*IndexRecordSize
	if err := readAtFull(f, b[:], pos); err != nil {
		return IndexRecord{}, err
	}
	r := decodeIndexRecord(b[:])
	if err := r.wellFormed(); err != nil {
		return IndexRecord{}, fmt.Errorf("%s record at byte %d: %w", filepath.Base(f.Name()), pos, err)
	}
	return r, nil
}

// readHeaderAt reads and parses the chunk header at pos of a segment file.
func readHeaderAt(f *os.File, pos int64) (chunk.Header, error) {
	var b [chunk.HeaderSize]byte
	if err := readAtFull(f, b[:], pos); err != nil {
		return chunk.Header{}, err
	}
	h, err := chunk.ParseHeader(b[:])
	if err != nil {
		return chunk.Header{}, fmt.Errorf("%s position %d: %w", filepath.Base(f.Name()), pos, err)
	}
	return h, nil
}

// matches says how a chunk header disagrees with its index record, or nil.
func matches(h chunk.Header, r IndexRecord) error {
	if h.ChunkID != r.ChunkID || h.Epoch != r.Epoch || h.Timestamp != r.Timestamp || h.Type != r.Type {
		return fmt.Errorf("chunk header (id %d, epoch %d, timestamp %d, type %s) disagrees with its index record (id %d, epoch %d, timestamp %d, type %s)",
			h.ChunkID, h.Epoch, h.Timestamp, h.Type, r.ChunkID, r.Epoch, r.Timestamp, r.Type)
	}
	return nil
}

// recoverActive opens the last segment for writing and cuts off whatever a crash left
// after its last complete, indexed chunk with a valid CRC.
func (l *Log) recoverActive(id uint64) (s *segment, last chunk.Header, err error) {
	s = &segment{name: SegmentName(id), first: id, next: id, size: FileHeaderSize}
	sf, err := os.OpenFile(filepath.Join(l.dir, s.name), os.O_RDWR, 0)
	if err != nil {
		return nil, chunk.Header{}, err
	}
	xf, err := os.OpenFile(filepath.Join(l.dir, IndexName(id)), os.O_RDWR, 0)
	if err != nil {
		return nil, chunk.Header{}, errors.Join(err, sf.Close())
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, sf.Close(), xf.Close())
		}
	}()
	segSize, err := ensureFileHeader(sf, segmentFileHeader)
	if err != nil {
		return nil, chunk.Header{}, err
	}
	idxSize, err := ensureFileHeader(xf, indexFileHeader)
	if err != nil {
		return nil, chunk.Header{}, err
	}
	slots := int((idxSize - FileHeaderSize) / IndexRecordSize)
	keep := -1
	var rec IndexRecord
	for k := slots - 1; k >= 0; k-- {
		var ok bool
		rec, last, ok, err = validChunkAt(sf, xf, k, segSize)
		if err != nil {
			return nil, chunk.Header{}, err
		}
		if ok {
			keep = k
			break
		}
	}
	end := int64(FileHeaderSize)
	if keep < 0 {
		last = chunk.Header{}
	} else {
		first, err := readIndexRecord(xf, 0)
		if err != nil {
			return nil, chunk.Header{}, err
		}
		if first.ChunkID != id {
			return nil, chunk.Header{}, fmt.Errorf("%s: first record is chunk %d, the name says %d", IndexName(id), first.ChunkID, id)
		}
		end = int64(rec.Position) + last.Size()
		s.chunks, s.next, s.firstTS, s.lastTS = keep+1, last.NextID(), first.Timestamp, last.Timestamp
		s.lastID, s.lastPos = last.ChunkID, int64(rec.Position)
	}
	s.size = end
	if segSize != end {
		if err := sf.Truncate(end); err != nil {
			return nil, chunk.Header{}, fmt.Errorf("recover %s: %w", s.name, err)
		}
	}
	if want := FileHeaderSize + int64(keep+1)*IndexRecordSize; idxSize != want {
		if err := xf.Truncate(want); err != nil {
			return nil, chunk.Header{}, fmt.Errorf("recover %s: %w", IndexName(id), err)
		}
	}
	l.segFile, l.idxFile = sf, xf
	return s, last, nil
}

// ensureFileHeader checks a file's header, writing it if the file is shorter than a
// header and holds nothing but a prefix of it or zeros (a torn header), and returns the
// file size.
func ensureFileHeader(f *os.File, header []byte) (int64, error) {
	size, err := presentHeader(f, header)
	if err != nil || size >= FileHeaderSize {
		return size, err
	}
	if _, err := f.WriteAt(header, 0); err != nil {
		return 0, fmt.Errorf("recover %s: %w", filepath.Base(f.Name()), err)
	}
	return FileHeaderSize, nil
}

// validChunkAt reports whether index record k is well formed and points at a complete
// chunk within segSize that agrees with it and has a valid CRC. I/O errors are errors;
// anything torn is just "not valid".
func validChunkAt(sf, xf *os.File, k int, segSize int64) (IndexRecord, chunk.Header, bool, error) {
	var b [IndexRecordSize]byte
	if err := readAtFull(xf, b[:], FileHeaderSize+int64(k)*IndexRecordSize); err != nil {
		return IndexRecord{}, chunk.Header{}, false, err
	}
	r := decodeIndexRecord(b[:])
	if r.wellFormed() != nil || int64(r.Position)+chunk.HeaderSize > segSize {
		return r, chunk.Header{}, false, nil
	}
	var hb [chunk.HeaderSize]byte
	if err := readAtFull(sf, hb[:], int64(r.Position)); err != nil {
		return r, chunk.Header{}, false, err
	}
	h, err := chunk.ParseHeader(hb[:])
	if err != nil || matches(h, r) != nil || int64(r.Position)+h.Size() > segSize {
		return r, chunk.Header{}, false, nil
	}
	data := io.NewSectionReader(sf, int64(r.Position)+chunk.HeaderSize+int64(h.BloomSize), int64(h.DataLen))
	crc := crc32.NewIEEE()
	if _, err := io.Copy(crc, data); err != nil {
		return r, chunk.Header{}, false, fmt.Errorf("%s position %d: %w", filepath.Base(sf.Name()), r.Position, err)
	}
	return r, h, crc.Sum32() == h.DataCRC, nil
}
