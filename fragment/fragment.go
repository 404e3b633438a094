// Package fragment describes a fragment: a run of committed chunks that is uploaded as one
// S3 object. It is pure: the replica reader's core builds descriptions, s3io uploads them.
package fragment

import "github.com/streamtier/streamtier/chunk"

// Span is a contiguous byte range [Start, End) of one segment file that belongs to a
// fragment. A fragment that crosses a segment roll has one span per segment.
type Span struct {
	Segment string // segment file name
	Start   int64
	End     int64
}

// Chunk is one chunk of a fragment: its header as drained, where it sits in the segment,
// and where its header will sit in the fragment object (the index record's position).
type Chunk struct {
	Header   chunk.Header
	Location chunk.Location
	Position uint32 // byte position of the chunk header in the object (the first chunk is at 8)
}

// Description is everything the upload needs to stream a fragment from the segment files
// and everything the manifest needs once it is uploaded.
type Description struct {
	FirstOffset    uint64 // chunk id of the first chunk
	NextOffset     uint64 // one past the last offset of the last chunk
	FirstTimestamp int64
	LastTimestamp  int64
	Size           uint64 // S: bytes of the chunk region
	Spans          []Span
	Chunks         []Chunk
}

// ObjectHeaderSize is the "OSIF" + version header in front of the chunk region.
const ObjectHeaderSize = 8

// IndexRecordSize is the size of one index record after the chunk region.
const IndexRecordSize = 20

// ObjectSize is the fragment object's length: header, chunk region and index.
func (d Description) ObjectSize() int64 {
	return ObjectHeaderSize + int64(d.Size) + IndexRecordSize*int64(len(d.Chunks))
}
