package check

import (
	"fmt"
	"sort"
	"sync"

	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// ckptEvery is how many chunks lie between two saved generator states.
const ckptEvery = 256

// RefChunk is one chunk of the deterministic load: where it starts, how many offsets it
// uses, its size on disk and its timestamp.
type RefChunk struct {
	Offset  uint64
	Records uint32
	Size    uint32
	TS      int64
}

// End is one past its last offset.
func (c RefChunk) End() uint64 { return c.Offset + uint64(c.Records) }

// Reference is the expected content of one timeline of a stream: the chunks its load
// generator writes, in order, from its base offset (0 for a stream's first timeline). It extends itself on demand and can produce the exact bytes of any
// chunk from a saved generator state. It is safe for concurrent use.
type Reference struct {
	mu     sync.Mutex
	gen    *loadgen.Generator
	chunks []RefChunk
	ckpts  []loadgen.Generator // ckpts[i] is the generator before chunk i*ckptEvery
	base   uint64              // the first chunk's offset
	next   uint64
	sums   []uint64 // sums[i] = bytes of chunks[0:i]
}

// NewReference returns the reference of the load cfg describes, written from offset 0.
func NewReference(cfg loadgen.Config) (*Reference, error) {
	return NewReferenceAt(cfg, 0)
}

// NewReferenceAt returns the reference of the load cfg describes written from offset base
// on: a timeline that forks off another at base (a new leader's chunks).
func NewReferenceAt(cfg loadgen.Config, base uint64) (*Reference, error) {
	g, err := loadgen.New(cfg)
	if err != nil {
		return nil, err
	}
	return &Reference{gen: g, base: base, next: base, sums: []uint64{0}}, nil
}

// Base is the offset of the reference's first chunk.
func (r *Reference) Base() uint64 { return r.base }

// extend generates chunks until the reference reaches offset off (or holds n chunks).
func (r *Reference) extend(off uint64, n int) {
	for r.next < off || len(r.chunks) < n {
		if len(r.chunks)%ckptEvery == 0 {
			r.ckpts = append(r.ckpts, *r.gen) // a copy: Next reuses only scratch buffers
		}
		spec := r.gen.Next()
		b, h, err := segments.EncodeChunk(nil, spec, r.next)
		if err != nil {
			panic(fmt.Sprintf("check: encode reference chunk at %d: %v", r.next, err)) // the generator's own output
		}
		c := RefChunk{Offset: r.next, Records: h.Records, Size: uint32(len(b)), TS: h.Timestamp}
		r.chunks = append(r.chunks, c)
		r.sums = append(r.sums, r.sums[len(r.sums)-1]+uint64(c.Size))
		r.next = c.End()
	}
}

// Index is the index of the chunk starting exactly at off; ok is false when no chunk of the
// load starts there.
func (r *Reference) Index(off uint64) (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.extend(off+1, 0)
	i := sort.Search(len(r.chunks), func(i int) bool { return r.chunks[i].Offset >= off })
	return i, i < len(r.chunks) && r.chunks[i].Offset == off
}

// Chunk is chunk i of the load.
func (r *Reference) Chunk(i int) RefChunk {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.extend(0, i+1)
	return r.chunks[i]
}

// ChunkCovering is the chunk that holds offset off.
func (r *Reference) ChunkCovering(off uint64) RefChunk {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.extend(off+1, 0)
	i := sort.Search(len(r.chunks), func(i int) bool { return r.chunks[i].End() > off })
	return r.chunks[i]
}

// BytesBetween is the size on disk of the chunks that start in [from, to).
func (r *Reference) BytesBetween(from, to uint64) uint64 {
	if to <= from {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.extend(to, 0)
	i := sort.Search(len(r.chunks), func(i int) bool { return r.chunks[i].Offset >= from })
	j := sort.Search(len(r.chunks), func(i int) bool { return r.chunks[i].Offset >= to })
	return r.sums[j] - r.sums[i]
}

// Walk calls fn with chunk i and its expected bytes, then chunk i+1, and so on for n
// chunks or until fn returns an error, which Walk returns. The bytes are valid only during
// the call. The reference is locked meanwhile: saved generator states share scratch buffers.
func (r *Reference) Walk(i, n int, fn func(c RefChunk, want []byte) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.extend(0, i+n)
	g := r.ckpts[i/ckptEvery]
	for range i % ckptEvery {
		g.Next()
	}
	var buf []byte
	for k := i; k < i+n; k++ {
		c := r.chunks[k]
		b, _, err := segments.EncodeChunk(buf[:0], g.Next(), c.Offset)
		if err != nil {
			return fmt.Errorf("check: encode reference chunk at %d: %w", c.Offset, err)
		}
		buf = b
		if err := fn(c, b); err != nil {
			return err
		}
	}
	return nil
}

// Generator returns a generator positioned before chunk i, for a writer that resumes the
// load there. It shares scratch buffers with the reference's saved states: a reference
// that hands out generators must be used by one goroutine only (the writer's own).
func (r *Reference) Generator(i int) *loadgen.Generator {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.extend(0, i+1)
	g := r.ckpts[i/ckptEvery]
	g.Skip(int64(i % ckptEvery))
	return &g
}

// Chunks is how many chunks the reference has generated so far.
func (r *Reference) Chunks() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.chunks)
}
