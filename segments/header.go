package segments

import "github.com/streamtier/streamtier/chunk"

// The chunk header and its codec live in the pure package chunk (shared with the fragment
// description and the cores); these names keep the local log's API as it was.

// HeaderSize is the size of an osiris chunk header on disk.
const HeaderSize = chunk.HeaderSize

// ChunkType says what a chunk carries; the upload path copies every type unchanged.
type ChunkType = chunk.Type

// Chunk types as osiris writes them.
const (
	ChunkUser             = chunk.TypeUser
	ChunkTrackingDelta    = chunk.TypeTrackingDelta
	ChunkTrackingSnapshot = chunk.TypeTrackingSnapshot
)

// Header is a decoded 48-byte osiris chunk header.
type Header = chunk.Header

// Location says where a chunk lives on disk.
type Location = chunk.Location

// ParseHeader decodes a chunk header (see chunk.ParseHeader).
func ParseHeader(b []byte) (Header, error) { return chunk.ParseHeader(b) }

// AppendHeader appends the 48-byte encoding of h to dst.
func AppendHeader(dst []byte, h Header) []byte { return chunk.AppendHeader(dst, h) }
