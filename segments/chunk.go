package segments

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/streamtier/streamtier/chunk"
)

// ErrChunkCRC marks a chunk whose data section does not match the CRC in its header. The
// upload path refuses such a chunk rather than copy corrupt bytes to the remote tier.
var ErrChunkCRC = errors.New("chunk data CRC mismatch")

// ChunkSpec is what a caller appends: the chunk's type, epoch, timestamp, entries and
// trailer. The log assigns the chunk id.
type ChunkSpec struct {
	Type      chunk.Type
	Epoch     uint64
	Timestamp int64 // milliseconds since the Unix epoch
	Entries   []Entry
	// Trailer holds the chunk's tracking trailer (producer/consumer tracking records);
	// the log copies it unchanged and never interprets it.
	Trailer []byte
}

// maxChunkSize bounds a chunk so that its position and length always fit the u32 fields.
const maxChunkSize = math.MaxUint32

// EncodeChunk appends the on-disk bytes of the chunk spec describes, with chunk id id, to
// dst, and returns them with the chunk's header. Tracking chunks must hold exactly one
// simple entry (one offset), as osiris writes them; user chunks at least one record.
func EncodeChunk(dst []byte, spec ChunkSpec, id uint64) ([]byte, chunk.Header, error) {
	if spec.Type > chunk.TypeTrackingSnapshot {
		return dst, chunk.Header{}, fmt.Errorf("encode chunk: unknown chunk type %d", spec.Type)
	}
	if spec.Type != chunk.TypeUser && (len(spec.Entries) != 1 || spec.Entries[0].SubBatch) {
		return dst, chunk.Header{}, fmt.Errorf("encode chunk: a %s chunk holds exactly one simple entry, got %d entries", spec.Type, len(spec.Entries))
	}
	if uint64(len(spec.Trailer)) > math.MaxUint32 {
		return dst, chunk.Header{}, fmt.Errorf("encode chunk: trailer of %d bytes", len(spec.Trailer))
	}
	start := len(dst)
	var zero [chunk.HeaderSize]byte
	dst = append(dst, zero[:]...)
	dst, records, err := AppendData(dst, spec.Entries)
	if err != nil {
		return dst[:start], chunk.Header{}, fmt.Errorf("encode chunk: %w", err)
	}
	if records == 0 {
		return dst[:start], chunk.Header{}, fmt.Errorf("encode chunk: no records")
	}
	data := dst[start+chunk.HeaderSize:]
	if uint64(len(data))+uint64(len(spec.Trailer))+chunk.HeaderSize > maxChunkSize {
		return dst[:start], chunk.Header{}, fmt.Errorf("encode chunk: %d data and %d trailer bytes exceed the %d-byte chunk limit", len(data), len(spec.Trailer), uint64(maxChunkSize))
	}
	h := chunk.Header{
		Type:       spec.Type,
		Entries:    uint16(len(spec.Entries)),
		Records:    records,
		Timestamp:  spec.Timestamp,
		Epoch:      spec.Epoch,
		ChunkID:    id,
		DataCRC:    crc32.ChecksumIEEE(data),
		DataLen:    uint32(len(data)),
		TrailerLen: uint32(len(spec.Trailer)),
	}
	chunk.AppendHeader(dst[start:start], h)
	dst = append(dst, spec.Trailer...)
	return dst, h, nil
}

// setChunkID rewrites the chunk id of an encoded chunk in place; the CRC covers only the
// data section, so it stays valid.
func setChunkID(chunk []byte, id uint64) { binary.BigEndian.PutUint64(chunk[24:32], id) }

// VerifyChunk checks the complete on-disk bytes of one chunk: its header, that its size
// matches len(b), and the data CRC (ErrChunkCRC). It returns the header.
func VerifyChunk(b []byte) (chunk.Header, error) {
	h, err := chunk.ParseHeader(b)
	if err != nil {
		return chunk.Header{}, err
	}
	if h.Size() != int64(len(b)) {
		return h, fmt.Errorf("chunk %d: %d bytes, header says %d", h.ChunkID, len(b), h.Size())
	}
	data := b[chunk.HeaderSize+int64(h.BloomSize) : chunk.HeaderSize+int64(h.BloomSize)+int64(h.DataLen)]
	if got := crc32.ChecksumIEEE(data); got != h.DataCRC {
		return h, fmt.Errorf("chunk %d: data CRC %08x, header says %08x: %w", h.ChunkID, got, h.DataCRC, ErrChunkCRC)
	}
	return h, nil
}
