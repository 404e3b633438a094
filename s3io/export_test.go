package s3io

import (
	"context"
	"io"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"streamtier/fragment"
)

// PutFragmentPaused is PutFragment with a hook between its two phases: after the segment
// files are open and the object CRC is computed, before any byte is sent.
func PutFragmentPaused(s *Store, ctx context.Context, key, dir string, d fragment.Description, between func()) (PutInfo, error) {
	u, err := s.prepareFragment(dir, d)
	if err != nil {
		return PutInfo{}, err
	}
	defer u.close()
	between()
	return s.sendFragment(ctx, key, u)
}

// WrapSegments makes the store read every segment file through wrap (to count bytes).
func WrapSegments(s *Store, wrap func(name string, r io.ReaderAt) io.ReaderAt) {
	open := s.openSegment
	s.openSegment = func(dir, name string) (segmentFile, error) {
		f, err := open(dir, name)
		if err != nil {
			return nil, err
		}
		return wrapped{ReaderAt: wrap(name, f), Closer: f}, nil
	}
}

type wrapped struct {
	io.ReaderAt
	io.Closer
}

// RawClient is the store's SDK client, for baselines that bypass the store.
func RawClient(s *Store) *s3.Client { return s.client }
