package metadata_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
)

func TestIsRetriable(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("persist s1: %w", err) }
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"deadline", context.DeadlineExceeded, true},
		{"wrapped deadline", wrap(context.DeadlineExceeded), true},
		{"caller canceled", wrap(context.Canceled), false},
		{"grpc unavailable", status.Error(codes.Unavailable, "connection refused"), true},
		{"grpc deadline", status.Error(codes.DeadlineExceeded, "x"), true},
		{"grpc resource exhausted", status.Error(codes.ResourceExhausted, "x"), true},
		{"grpc aborted", status.Error(codes.Aborted, "x"), true},
		{"grpc canceled", status.Error(codes.Canceled, "client connection is closing"), false},
		{"grpc invalid argument", status.Error(codes.InvalidArgument, "x"), false},
		{"grpc permission denied", status.Error(codes.PermissionDenied, "x"), false},
		{"grpc unauthenticated", status.Error(codes.Unauthenticated, "x"), false},
		{"grpc out of range", status.Error(codes.OutOfRange, "x"), false},
		{"grpc data loss", status.Error(codes.DataLoss, "x"), false},
		{"etcd no leader", wrap(rpctypes.ErrNoLeader), true},
		{"etcd leader changed", wrap(rpctypes.ErrLeaderChanged), true},
		{"etcd not leader", wrap(rpctypes.ErrNotLeader), true},
		{"etcd timeout", wrap(rpctypes.ErrTimeout), true},
		{"etcd stopped", wrap(rpctypes.ErrStopped), true},
		{"etcd too many requests", wrap(rpctypes.ErrTooManyRequests), true},
		{"etcd compacted", wrap(rpctypes.ErrCompacted), false},
		{"etcd auth failed", wrap(rpctypes.ErrAuthFailed), false},
		{"etcd permission denied", wrap(rpctypes.ErrPermissionDenied), false},
		{"etcd corrupt", wrap(rpctypes.ErrCorrupt), false},
		{"grpc-side etcd error", wrap(rpctypes.ErrGRPCLeaderChanged), true},
		{"dial error", wrap(&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("refused")}), true},
		{"corrupt record", wrap(metadata.ErrCorruptRecord), false},
		{"invalid argument", wrap(metadata.ErrInvalidArgument), false},
		{"stale epoch", wrap(metadata.ErrStaleEpoch), false},
		{"invalid stream id", wrap(manifest.ErrInvalidStreamID), false},
		{"plain error", errors.New("something"), false},
	} {
		if got := metadata.IsRetriable(tc.err); got != tc.want {
			t.Errorf("%s: IsRetriable(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
