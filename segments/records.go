package segments

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/streamtier/streamtier/chunk"
)

// Record is one record of a chunk, or a compressed sub-batch the reader cannot open
// (Compression not none: Body is the compressed batch, Count the records it holds).
type Record struct {
	Offset      uint64
	Timestamp   int64 // the chunk's
	Type        chunk.Type
	Body        []byte // aliases the chunk's bytes
	Compression Compression
	Count       uint32 // offsets it uses: 1, or a compressed batch's records
}

// ChunkRecords decodes the data section of raw, a whole chunk whose header is h, into
// records: simple entries one each, uncompressed sub-batches split into their records,
// compressed sub-batches as one Record each. The offsets are the chunk id plus the records
// before. A data section whose records disagree with its header is an error.
func ChunkRecords(h chunk.Header, raw []byte) ([]Record, error) {
	lo := int64(chunk.HeaderSize) + int64(h.BloomSize)
	hi := lo + int64(h.DataLen)
	if hi > int64(len(raw)) {
		return nil, fmt.Errorf("chunk %d: data section [%d, %d) past its %d bytes", h.ChunkID, lo, hi, len(raw))
	}
	entries, n, err := DecodeEntries(raw[lo:hi])
	if err != nil {
		return nil, fmt.Errorf("chunk %d: %w", h.ChunkID, err)
	}
	if n != h.Records {
		return nil, fmt.Errorf("chunk %d: data section holds %d records, its header says %d", h.ChunkID, n, h.Records)
	}
	out := make([]Record, 0, n)
	off := h.ChunkID
	for _, e := range entries {
		base := Record{Timestamp: h.Timestamp, Type: h.Type}
		switch {
		case !e.SubBatch:
			r := base
			r.Offset, r.Body, r.Count = off, e.Body, 1
			out = append(out, r)
			off++
		case e.Compression != CompressionNone:
			r := base
			r.Offset, r.Body, r.Compression, r.Count = off, e.Body, e.Compression, uint32(e.Records)
			out = append(out, r)
			off += uint64(e.Records)
		default:
			recs, err := splitSubBatch(e.Body, int(e.Records))
			if err != nil {
				return nil, fmt.Errorf("chunk %d: sub-batch at offset %d: %w", h.ChunkID, off, err)
			}
			for _, b := range recs {
				r := base
				r.Offset, r.Body, r.Count = off, b, 1
				out = append(out, r)
				off++
			}
		}
	}
	return out, nil
}

// splitSubBatch splits an uncompressed sub-batch body into its n records (u32 length each).
func splitSubBatch(b []byte, n int) ([][]byte, error) {
	out := make([][]byte, 0, n)
	for len(b) > 0 {
		if len(b) < 4 {
			return nil, errors.New("record length truncated")
		}
		l := binary.BigEndian.Uint32(b)
		if l&0x80000000 != 0 || uint64(l) > uint64(len(b)-4) {
			return nil, fmt.Errorf("record of %d bytes, %d left", l, len(b)-4)
		}
		out = append(out, b[4:4+l:4+l])
		b = b[4+l:]
	}
	if len(out) != n {
		return nil, fmt.Errorf("holds %d records, its header says %d", len(out), n)
	}
	return out, nil
}
