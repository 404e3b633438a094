package fragment

import (
	"fmt"
	"math"

	"github.com/streamtier/streamtier/chunk"
)

// SegmentHeaderSize is the "OSIL" + version header of a segment file: the first chunk of a
// segment sits at this position, so a span opened by a segment roll starts here.
const SegmentHeaderSize = 8

// Assembly gathers drained chunk headers into the next fragment. It reads no bytes: it only
// tracks offsets, timestamps, sizes, segment spans and each chunk's place in the object, and
// says when the fragment has reached its target size and must be cut.
//
// It is a plain value owned by one caller (the replica reader's core); it is not safe for
// concurrent use.
type Assembly struct {
	target uint64
	cur    Description
	hint   int // chunk count of the previous fragment: the next one's capacity
}

// NewAssembly returns an empty assembly that cuts when the chunk bytes reach target.
func NewAssembly(target uint64) (*Assembly, error) {
	if target == 0 {
		return nil, fmt.Errorf("fragment assembly: target size must be above 0")
	}
	if target > MaxTargetSize {
		return nil, fmt.Errorf("fragment assembly: target size %d above %d (index positions are 32-bit)", target, uint64(MaxTargetSize))
	}
	return &Assembly{target: target}, nil
}

// MaxTargetSize is the largest fragment target size: with the crossing chunk on top, every
// chunk position in the object must stay addressable by a 32-bit index record.
const MaxTargetSize = 1 << 31

// Target is the size at which the assembly cuts.
func (a *Assembly) Target() uint64 { return a.target }

// Empty says whether no chunk has been added since the last cut.
func (a *Assembly) Empty() bool { return len(a.cur.Chunks) == 0 }

// Len is the number of chunks in the fragment being assembled.
func (a *Assembly) Len() int { return len(a.cur.Chunks) }

// Size is the chunk-region bytes gathered so far.
func (a *Assembly) Size() uint64 { return a.cur.Size }

// FirstOffset is the first offset of the fragment being assembled (0 when empty).
func (a *Assembly) FirstOffset() uint64 { return a.cur.FirstOffset }

// NextOffset is one past the last offset gathered (0 when empty).
func (a *Assembly) NextOffset() uint64 { return a.cur.NextOffset }

// Add appends one drained chunk: its header and where it sits on disk. It reports whether
// the fragment has reached the target size (the chunk that crosses it is included) and must
// now be cut. A chunk that does not follow the previous one, whose location disagrees with
// its header, or that would not be addressable in the object is refused and nothing changes.
func (a *Assembly) Add(h chunk.Header, loc chunk.Location) (bool, error) {
	if err := a.check(h, loc); err != nil {
		return false, err
	}
	pos := uint32(ObjectHeaderSize + a.cur.Size)
	if len(a.cur.Chunks) == 0 {
		if a.cur.Chunks == nil && a.hint > 0 {
			a.cur.Chunks = make([]Chunk, 0, a.hint)
		}
		a.cur.FirstOffset = h.ChunkID
		a.cur.FirstTimestamp = h.Timestamp
	}
	a.cur.NextOffset = h.NextID()
	a.cur.LastTimestamp = h.Timestamp
	a.cur.Size += uint64(loc.Size)
	end := loc.Position + loc.Size
	if n := len(a.cur.Spans); n > 0 && a.cur.Spans[n-1].Segment == loc.Segment {
		a.cur.Spans[n-1].End = end
	} else {
		a.cur.Spans = append(a.cur.Spans, Span{Segment: loc.Segment, Start: loc.Position, End: end})
	}
	a.cur.Chunks = append(a.cur.Chunks, Chunk{Header: h, Location: loc, Position: pos})
	return a.cur.Size >= a.target, nil
}

func (a *Assembly) check(h chunk.Header, loc chunk.Location) error {
	if h.Records == 0 {
		return fmt.Errorf("fragment assembly: chunk %d uses no offset", h.ChunkID)
	}
	if h.ChunkID > math.MaxUint64-uint64(h.Records) {
		return fmt.Errorf("fragment assembly: chunk %d with %d records overflows the offset space", h.ChunkID, h.Records)
	}
	if loc.Segment == "" {
		return fmt.Errorf("fragment assembly: chunk %d has no segment file", h.ChunkID)
	}
	if loc.Size != h.Size() {
		return fmt.Errorf("fragment assembly: chunk %d in %s: location size %d, header says %d", h.ChunkID, loc.Segment, loc.Size, h.Size())
	}
	if loc.Position < SegmentHeaderSize {
		return fmt.Errorf("fragment assembly: chunk %d in %s at position %d, inside the segment header", h.ChunkID, loc.Segment, loc.Position)
	}
	if obj := ObjectHeaderSize + a.cur.Size + uint64(loc.Size) + IndexRecordSize*uint64(len(a.cur.Chunks)+1); obj > math.MaxUint32 {
		return fmt.Errorf("fragment assembly: chunk %d would make a %d-byte object, beyond what 32-bit index positions address", h.ChunkID, obj)
	}
	if len(a.cur.Chunks) == 0 {
		return nil
	}
	if h.ChunkID != a.cur.NextOffset {
		return fmt.Errorf("fragment assembly: chunk %d does not follow offset %d", h.ChunkID, a.cur.NextOffset)
	}
	last := a.cur.Spans[len(a.cur.Spans)-1]
	if last.Segment == loc.Segment {
		if loc.Position != last.End {
			return fmt.Errorf("fragment assembly: chunk %d at position %d of %s, expected %d (chunks of a segment are back to back)", h.ChunkID, loc.Position, loc.Segment, last.End)
		}
		return nil
	}
	if loc.Position != SegmentHeaderSize {
		return fmt.Errorf("fragment assembly: chunk %d opens segment %s at position %d, a rolled segment starts at %d", h.ChunkID, loc.Segment, loc.Position, SegmentHeaderSize)
	}
	return nil
}

// Cut seals the fragment gathered so far and starts an empty one. It returns false when
// there is nothing to cut. The returned description owns its slices.
func (a *Assembly) Cut() (Description, bool) {
	if len(a.cur.Chunks) == 0 {
		return Description{}, false
	}
	d := a.cur
	a.hint = len(d.Chunks)
	a.cur = Description{}
	return d, true
}

// Discard drops the fragment being assembled (after a reset) and returns how many chunks it held.
func (a *Assembly) Discard() int {
	n := len(a.cur.Chunks)
	a.cur = Description{}
	return n
}

// Snapshot is a copy of the in-progress fragment's summary for status reports; its slices
// are not copied and must not be changed.
func (a *Assembly) Snapshot() Description { return a.cur }
