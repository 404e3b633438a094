package segments

import (
	"bufio"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"github.com/streamtier/streamtier/chunk"
)

// ScannedChunk is one chunk as Scan found it.
type ScannedChunk struct {
	Header   chunk.Header
	Location chunk.Location
	CRCOK    bool // the data section matches the header's CRC
}

// ScanSummary totals a Scan.
type ScanSummary struct {
	FirstOffset uint64 // chunk id of the first chunk (the first segment's name)
	NextOffset  uint64 // one past the last offset
	Chunks      int
	Bytes       int64 // sum of the chunks' sizes on disk (file headers excluded)
	Segments    int
	// Skipped lists files Scan left out, with the reason: a .segment without its .index
	// (crash debris) or an .index without its .segment.
	Skipped []string
}

// Scan reads a stream directory without changing it, as tools and the dump command do:
// every segment in order, every chunk in full, checking each chunk's CRC (reported per
// chunk, not an error), that the index agrees with the segment record by record, and that
// chunk ids run on without a gap. It calls fn for each chunk in log order; an error from
// fn stops the scan and is returned. Anything else wrong (not a stream directory, a bad
// file header, a truncated chunk, a disagreeing index) stops the scan with an error that
// names the file and the byte position. Unlike Open, it repairs nothing: the tail a crash
// leaves in the index is tolerated, but a torn or unindexed chunk is reported.
func Scan(dir string, fn func(ScannedChunk) error) (ScanSummary, error) {
	var sum ScanSummary
	fi, err := os.Stat(dir)
	if err != nil {
		return sum, fmt.Errorf("scan: %w", err)
	}
	if !fi.IsDir() {
		return sum, fmt.Errorf("scan %s: not a directory", dir)
	}
	listing, err := listDir(dir)
	if err != nil {
		return sum, fmt.Errorf("scan: %w", err)
	}
	for _, id := range listing.segmentsOnly {
		sum.Skipped = append(sum.Skipped, SegmentName(id)+": no index file (crash debris)")
	}
	for _, id := range listing.indexesOnly {
		sum.Skipped = append(sum.Skipped, IndexName(id)+": no segment file")
	}
	if len(listing.pairs) == 0 {
		return sum, fmt.Errorf("scan %s: not a stream directory: no segment file with its index file", dir)
	}
	sum.FirstOffset = listing.pairs[0]
	sum.NextOffset = listing.pairs[0]
	br := bufio.NewReaderSize(nil, 1<<20)
	for _, id := range listing.pairs {
		if id != sum.NextOffset {
			return sum, fmt.Errorf("scan %s: %s starts at offset %d, the log before it ends at %d", dir, SegmentName(id), id, sum.NextOffset)
		}
		if err := scanSegment(dir, id, br, &sum, fn); err != nil {
			return sum, err
		}
		sum.Segments++
	}
	return sum, nil
}

// scanSegment scans one segment and checks it against its index.
func scanSegment(dir string, id uint64, br *bufio.Reader, sum *ScanSummary, fn func(ScannedChunk) error) error {
	name, iname := SegmentName(id), IndexName(id)
	ib, err := os.ReadFile(filepath.Join(dir, iname))
	if err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	index, err := ParseIndex(iname, ib)
	if err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	size := st.Size()
	br.Reset(f)
	var hb [chunk.HeaderSize]byte
	n, err := io.ReadFull(br, hb[:FileHeaderSize])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return fmt.Errorf("scan %s: %w", name, err)
	}
	if err := checkFileHeader(hb[:n], segmentFileHeader, name); err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	pos := int64(FileHeaderSize)
	k := 0
	crc := crc32.NewIEEE()
	for pos < size {
		if pos+chunk.HeaderSize > size {
			return fmt.Errorf("scan %s position %d: truncated chunk header, the file ends at %d", name, pos, size)
		}
		if _, err := io.ReadFull(br, hb[:]); err != nil {
			return fmt.Errorf("scan %s position %d: %w", name, pos, err)
		}
		h, err := chunk.ParseHeader(hb[:])
		if err != nil {
			return fmt.Errorf("scan %s position %d: %w", name, pos, err)
		}
		if pos+h.Size() > size {
			return fmt.Errorf("scan %s position %d: truncated chunk %d of %d bytes, the file ends at %d", name, pos, h.ChunkID, h.Size(), size)
		}
		crc.Reset()
		if _, err := br.Discard(int(h.BloomSize)); err != nil {
			return fmt.Errorf("scan %s position %d: %w", name, pos, err)
		}
		if _, err := io.CopyN(crc, br, int64(h.DataLen)); err != nil {
			return fmt.Errorf("scan %s position %d: %w", name, pos, err)
		}
		if _, err := br.Discard(int(h.TrailerLen)); err != nil {
			return fmt.Errorf("scan %s position %d: %w", name, pos, err)
		}
		if h.ChunkID != sum.NextOffset {
			return fmt.Errorf("scan %s position %d: chunk id %d, expected %d", name, pos, h.ChunkID, sum.NextOffset)
		}
		if k >= len(index.Records) {
			return fmt.Errorf("scan %s position %d: chunk %d has no record in %s (%d records)", name, pos, h.ChunkID, iname, len(index.Records))
		}
		rec := index.Records[k]
		if err := matches(h, rec); err != nil {
			return fmt.Errorf("scan %s record at byte %d: %w", iname, FileHeaderSize+k*IndexRecordSize, err)
		}
		if int64(rec.Position) != pos {
			return fmt.Errorf("scan %s record at byte %d: chunk %d at position %d, the segment has it at %d", iname, FileHeaderSize+k*IndexRecordSize, h.ChunkID, rec.Position, pos)
		}
		c := ScannedChunk{Header: h, Location: chunk.Location{Segment: name, Position: pos, Size: h.Size()}, CRCOK: crc.Sum32() == h.DataCRC}
		if err := fn(c); err != nil {
			return err
		}
		k++
		pos += h.Size()
		sum.Chunks++
		sum.Bytes += h.Size()
		sum.NextOffset = h.NextID()
	}
	if k < len(index.Records) {
		return fmt.Errorf("scan %s: %d records, but %s holds %d chunks", iname, len(index.Records), name, k)
	}
	return nil
}
