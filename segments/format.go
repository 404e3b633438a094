package segments

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/streamtier/streamtier/chunk"
)

// FileHeaderSize is the size of the header at the start of segment and index files.
const FileHeaderSize = 8

// IndexRecordSize is the size of one index record on disk.
const IndexRecordSize = 29

// Segment and index file headers: a magic and version 1.
var (
	segmentFileHeader = []byte{'O', 'S', 'I', 'L', 0, 0, 0, 1}
	indexFileHeader   = []byte{'O', 'S', 'I', 'I', 0, 0, 0, 1}
)

// File name extensions of a stream directory.
const (
	segmentExt = ".segment"
	indexExt   = ".index"
)

// SegmentName is the segment file name for a segment whose first chunk id is id.
func SegmentName(id uint64) string { return fmt.Sprintf("%020d%s", id, segmentExt) }

// IndexName is the index file name for a segment whose first chunk id is id.
func IndexName(id uint64) string { return fmt.Sprintf("%020d%s", id, indexExt) }

// ParseSegmentName returns the first chunk id a segment file name carries, refusing
// anything but 20 decimal digits followed by ".segment".
func ParseSegmentName(name string) (uint64, error) { return parseFileName(name, segmentExt) }

func parseFileName(name, ext string) (uint64, error) {
	digits, ok := strings.CutSuffix(name, ext)
	if !ok || len(digits) != 20 {
		return 0, fmt.Errorf("file name %q: want 20 digits and %s", name, ext)
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("file name %q: want 20 digits and %s", name, ext)
		}
	}
	id, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("file name %q: %w", name, err)
	}
	return id, nil
}

// checkFileHeader says what is wrong with the first bytes of a segment or index file.
func checkFileHeader(b, want []byte, name string) error {
	if len(b) < FileHeaderSize {
		return fmt.Errorf("%s: file header is %d bytes, need %d", name, len(b), FileHeaderSize)
	}
	if !bytes.Equal(b[:FileHeaderSize], want) {
		return fmt.Errorf("%s: file header % x, want % x (%q version 1)", name, b[:FileHeaderSize], want, want[:4])
	}
	return nil
}

// IndexRecord is one 29-byte record of an index file: where a chunk starts in its segment.
type IndexRecord struct {
	ChunkID   uint64
	Timestamp int64
	Epoch     uint64
	Position  uint32 // byte position of the chunk header in the segment file
	Type      chunk.Type
}

// AppendIndexRecord appends the 29-byte encoding of r to dst.
func AppendIndexRecord(dst []byte, r IndexRecord) []byte {
	var b [IndexRecordSize]byte
	binary.BigEndian.PutUint64(b[0:8], r.ChunkID)
	binary.BigEndian.PutUint64(b[8:16], uint64(r.Timestamp))
	binary.BigEndian.PutUint64(b[16:24], r.Epoch)
	binary.BigEndian.PutUint32(b[24:28], r.Position)
	b[28] = byte(r.Type)
	return append(dst, b[:]...)
}

// decodeIndexRecord decodes 29 bytes without judging them.
func decodeIndexRecord(b []byte) IndexRecord {
	return IndexRecord{
		ChunkID:   binary.BigEndian.Uint64(b[0:8]),
		Timestamp: int64(binary.BigEndian.Uint64(b[8:16])),
		Epoch:     binary.BigEndian.Uint64(b[16:24]),
		Position:  binary.BigEndian.Uint32(b[24:28]),
		Type:      chunk.Type(b[28]),
	}
}

// wellFormed says what is wrong with a record taken on its own, or nil.
func (r IndexRecord) wellFormed() error {
	if r.Position < FileHeaderSize {
		return fmt.Errorf("chunk %d at segment position %d, before the file header ends", r.ChunkID, r.Position)
	}
	if r.Type > chunk.TypeTrackingSnapshot {
		return fmt.Errorf("chunk %d: unknown chunk type %d", r.ChunkID, r.Type)
	}
	return nil
}

// isZero reports whether b holds only zero bytes.
func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// IndexFile is a decoded index file.
type IndexFile struct {
	Records []IndexRecord
	// ValidLen is the length of the header and the records; bytes after it are the tail a
	// crash leaves (a partial record, all-zero records) and are ignored.
	ValidLen int64
}

// ParseIndex decodes the bytes of an index file named name. It tolerates what a crash
// leaves at the end (a partial last record, all-zero records) and refuses a bad header,
// a malformed record, chunk ids or positions that do not increase, and non-zero bytes
// after an all-zero record. Errors name the file and the byte position.
func ParseIndex(name string, b []byte) (IndexFile, error) {
	if err := checkFileHeader(b, indexFileHeader, name); err != nil {
		return IndexFile{}, err
	}
	f := IndexFile{ValidLen: FileHeaderSize}
	pos := FileHeaderSize
	for ; pos+IndexRecordSize <= len(b); pos += IndexRecordSize {
		rb := b[pos : pos+IndexRecordSize]
		if isZero(rb) {
			break
		}
		r := decodeIndexRecord(rb)
		if err := r.wellFormed(); err != nil {
			return IndexFile{}, fmt.Errorf("%s: record at byte %d: %w", name, pos, err)
		}
		if n := len(f.Records); n > 0 {
			prev := f.Records[n-1]
			if r.ChunkID <= prev.ChunkID || r.Position <= prev.Position {
				return IndexFile{}, fmt.Errorf("%s: record at byte %d: chunk %d at position %d does not follow chunk %d at position %d",
					name, pos, r.ChunkID, r.Position, prev.ChunkID, prev.Position)
			}
		}
		f.Records = append(f.Records, r)
		f.ValidLen = int64(pos + IndexRecordSize)
	}
	if pos+IndexRecordSize <= len(b) {
		// Stopped at an all-zero record: the rest must be zero as well (a partial last
		// record of zeros included).
		for i := pos; i < len(b); i++ {
			if b[i] != 0 {
				return IndexFile{}, fmt.Errorf("%s: non-zero data at byte %d after an all-zero record at byte %d", name, i, pos)
			}
		}
	}
	return f, nil
}
