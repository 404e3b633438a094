package s3io

import (
	"context"
	"io"
	"net/http"

	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/streamtier/streamtier/fragment"
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

// NewRecordingStore is NewStore whose every request, as signed and about to be sent, is
// handed to record with its operation name.
func NewRecordingStore(ctx context.Context, c Config, record func(op string, h http.Header, method, path string)) (*Store, error) {
	mw := middleware.FinalizeMiddlewareFunc("record", func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
		if req, ok := in.Request.(*smithyhttp.Request); ok {
			record(middleware.GetOperationName(ctx), req.Header.Clone(), req.Method, req.URL.Path)
		}
		return next.HandleFinalize(ctx, in)
	})
	return newStore(ctx, c, func(st *middleware.Stack) error { return st.Finalize.Add(mw, middleware.After) })
}
