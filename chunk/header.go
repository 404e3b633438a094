// Package chunk holds the osiris chunk header, its codec and where a chunk lives on disk:
// the format types the local log, the fragment description and the pure cores share. It
// is pure (no I/O), so the cores can depend on it without linking the local log's files.
package chunk

import (
	"encoding/binary"
	"fmt"
)

// HeaderSize is the size of an osiris chunk header on disk.
const HeaderSize = 48

// chunkMagicVersion is the first header byte: magic 5 in the high nibble, version 0.
const chunkMagicVersion = 0x50

// Type says what a chunk carries; the upload path copies every type unchanged.
type Type uint8

// Chunk types as osiris writes them.
const (
	TypeUser             Type = 0
	TypeTrackingDelta    Type = 1
	TypeTrackingSnapshot Type = 2
)

// String names the chunk type as the dump command prints it.
func (t Type) String() string {
	switch t {
	case TypeUser:
		return "user"
	case TypeTrackingDelta:
		return "tracking_delta"
	case TypeTrackingSnapshot:
		return "tracking_snapshot"
	}
	return fmt.Sprintf("unknown(%d)", uint8(t))
}

// Header is a decoded 48-byte osiris chunk header.
type Header struct {
	Type       Type
	Entries    uint16 // entries in the data section
	Records    uint32 // offsets this chunk uses
	Timestamp  int64  // milliseconds since the Unix epoch
	Epoch      uint64
	ChunkID    uint64 // offset of the chunk's first record
	DataCRC    uint32 // CRC-32 (IEEE) of the data section
	DataLen    uint32
	TrailerLen uint32
	BloomSize  uint8
}

// Size is the chunk's total size on disk: header, bloom filter, data and trailer.
func (h Header) Size() int64 {
	return HeaderSize + int64(h.BloomSize) + int64(h.DataLen) + int64(h.TrailerLen)
}

// NextID is the chunk id that follows this chunk in the log.
func (h Header) NextID() uint64 { return h.ChunkID + uint64(h.Records) }

// ParseHeader decodes a chunk header, refusing a wrong magic/version byte, an unknown
// chunk type, a chunk that uses no offset and non-zero reserved bytes.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("chunk header: %d bytes, need %d", len(b), HeaderSize)
	}
	if b[0] != chunkMagicVersion {
		return Header{}, fmt.Errorf("chunk header: magic/version byte 0x%02x, want 0x%02x", b[0], chunkMagicVersion)
	}
	h := Header{
		Type:       Type(b[1]),
		Entries:    binary.BigEndian.Uint16(b[2:4]),
		Records:    binary.BigEndian.Uint32(b[4:8]),
		Timestamp:  int64(binary.BigEndian.Uint64(b[8:16])),
		Epoch:      binary.BigEndian.Uint64(b[16:24]),
		ChunkID:    binary.BigEndian.Uint64(b[24:32]),
		DataCRC:    binary.BigEndian.Uint32(b[32:36]),
		DataLen:    binary.BigEndian.Uint32(b[36:40]),
		TrailerLen: binary.BigEndian.Uint32(b[40:44]),
		BloomSize:  b[44],
	}
	if h.Type > TypeTrackingSnapshot {
		return Header{}, fmt.Errorf("chunk header at id %d: unknown chunk type %d", h.ChunkID, h.Type)
	}
	if h.Records == 0 {
		return Header{}, fmt.Errorf("chunk header at id %d: zero records", h.ChunkID)
	}
	if b[45] != 0 || b[46] != 0 || b[47] != 0 {
		return Header{}, fmt.Errorf("chunk header at id %d: reserved bytes not zero", h.ChunkID)
	}
	return h, nil
}

// AppendHeader appends the 48-byte encoding of h to dst.
func AppendHeader(dst []byte, h Header) []byte {
	var b [HeaderSize]byte
	b[0] = chunkMagicVersion
	b[1] = byte(h.Type)
	binary.BigEndian.PutUint16(b[2:4], h.Entries)
	binary.BigEndian.PutUint32(b[4:8], h.Records)
	binary.BigEndian.PutUint64(b[8:16], uint64(h.Timestamp))
	binary.BigEndian.PutUint64(b[16:24], h.Epoch)
	binary.BigEndian.PutUint64(b[24:32], h.ChunkID)
	binary.BigEndian.PutUint32(b[32:36], h.DataCRC)
	binary.BigEndian.PutUint32(b[36:40], h.DataLen)
	binary.BigEndian.PutUint32(b[40:44], h.TrailerLen)
	b[44] = h.BloomSize
	return append(dst, b[:]...)
}

// Location says where a chunk lives on disk.
type Location struct {
	Segment  string // segment file name, e.g. "00000000000000003699.segment"
	Position int64  // byte position of the chunk header in the segment file
	Size     int64  // total size on disk (Header.Size)
}
