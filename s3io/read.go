package s3io

import (
	"context"
	"fmt"

	"github.com/streamtier/streamtier/fragment"
)

// FragmentObject is a whole fragment object read back and verified.
type FragmentObject struct {
	Key    string
	Bytes  []byte          // the object, header to index
	Layout fragment.Layout // chunk region size S and chunks, every data CRC checked
}

// ReadFragment GETs a whole fragment object and verifies it: header, chunk walk, index
// records against the chunks, every chunk's data CRC. A corrupt object is
// ClassNonTransient (fragment.ErrCorrupt). It holds the object in memory: for verification
// and tests; consumers read ranges.
func (s *Store) ReadFragment(ctx context.Context, key string) (FragmentObject, error) {
	b, err := s.get(ctx, OpGetObject, s.cfg.TransferTimeout, key, nil)
	if err != nil {
		return FragmentObject{}, err
	}
	layout, err := fragment.ParseObject(b)
	if err != nil {
		return FragmentObject{}, fmt.Errorf("fragment s3://%s/%s: %w", s.cfg.Bucket, key, err)
	}
	return FragmentObject{Key: key, Bytes: b, Layout: layout}, nil
}

// FragmentRange is a run of whole chunks read from a fragment object and verified.
type FragmentRange struct {
	Key    string
	Offset int64                  // object position of the first chunk header
	Bytes  []byte                 // the chunks, byte for byte
	Chunks []fragment.LayoutChunk // positions are object positions
}

// ReadFragmentRange GETs n bytes at object position off, which must start at a chunk
// header and end at a chunk boundary (positions come from the index), and verifies each
// chunk's header, data CRC and id continuity.
func (s *Store) ReadFragmentRange(ctx context.Context, key string, off, n int64) (FragmentRange, error) {
	if off < fragment.ObjectHeaderSize || n <= 0 {
		return FragmentRange{}, fmt.Errorf("%w: fragment range of %d bytes at %d of s3://%s/%s", ErrInvalidArgument, n, off, s.cfg.Bucket, key)
	}
	rng := fmt.Sprintf("bytes=%d-%d", off, off+n-1)
	b, err := s.get(ctx, OpGetRange, s.cfg.TransferTimeout, key, &rng)
	if err != nil {
		return FragmentRange{}, err
	}
	if int64(len(b)) != n {
		return FragmentRange{}, fmt.Errorf("%w: fragment s3://%s/%s range %s: got %d bytes", ErrInvalidArgument, s.cfg.Bucket, key, rng, len(b))
	}
	chunks, err := fragment.WalkChunks(b, off)
	if err != nil {
		return FragmentRange{}, fmt.Errorf("fragment s3://%s/%s: %w", s.cfg.Bucket, key, err)
	}
	return FragmentRange{Key: key, Offset: off, Bytes: b, Chunks: chunks}, nil
}

// ReadFragmentIndex GETs and validates the index of a fragment object whose chunk region
// holds size bytes (the manifest entry's S). objectLen is the object's length; 0 asks the
// server with a HEAD first.
func (s *Store) ReadFragmentIndex(ctx context.Context, key string, objectLen int64, size uint64) ([]fragment.IndexRecord, error) {
	if objectLen == 0 {
		info, err := s.Head(ctx, key)
		if err != nil {
			return nil, err
		}
		objectLen = info.Size
	}
	idxLen := objectLen - fragment.ObjectHeaderSize - int64(size)
	if idxLen <= 0 || idxLen%fragment.IndexRecordSize != 0 {
		return nil, fmt.Errorf("fragment s3://%s/%s: %w: object of %d bytes cannot hold a chunk region of %d and an index", s.cfg.Bucket, key, fragment.ErrCorrupt, objectLen, size)
	}
	b, err := s.GetRange(ctx, key, objectLen-idxLen, idxLen)
	if err != nil {
		return nil, err
	}
	recs, err := fragment.ParseIndex(b, objectLen, size)
	if err != nil {
		return nil, fmt.Errorf("fragment s3://%s/%s: %w", s.cfg.Bucket, key, err)
	}
	return recs, nil
}
