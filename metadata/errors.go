package metadata

import (
	"context"
	"errors"
	"net"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrInvalidArgument marks bad input refused before any I/O (a record that cannot be
// persisted, a bad placement or member, a negative revision).
var ErrInvalidArgument = errors.New("invalid argument")

// ErrCorruptRecord marks a value read from etcd that does not decode; the error names the key.
var ErrCorruptRecord = errors.New("corrupt metadata record")

// ErrStaleEpoch marks a placement whose epoch is below the one already stored.
var ErrStaleEpoch = errors.New("stale epoch")

// IsRetriable reports whether err is transient: the same request may succeed later without
// anyone changing anything (etcd unreachable or restarting, no leader, leader changed, request
// timed out, too many requests, caller's deadline exceeded). Bad input, corrupt records, a
// deleted stream, permission and authentication failures, compaction, and a caller's
// cancellation are not.
//
// A retriable error from a write means the outcome is unknown: the write may have applied.
// Classification uses gRPC codes and typed errors, never message text:
//
//	context.DeadlineExceeded, codes.DeadlineExceeded      retriable
//	codes.Unavailable (no leader, leader changed, stopped, timeouts, connection refused)
//	                                                       retriable
//	codes.ResourceExhausted (too many requests, no space)  retriable
//	codes.Aborted                                          retriable
//	etcdserver "not leader" (FailedPrecondition)           retriable
//	net.Error from a dial                                  retriable
//	context.Canceled, codes.Canceled                       not retriable (someone gave up)
//	every other code and every other error                 not retriable
func IsRetriable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrCorruptRecord) || errors.Is(err, ErrStaleEpoch) || errors.Is(err, ErrStreamDeleted) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, rpctypes.ErrNotLeader) || errors.Is(err, rpctypes.ErrGRPCNotLeader) {
		return true
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return retriableCode(ee.Code())
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return retriableCode(st.Code())
	}
	var ne net.Error
	return errors.As(err, &ne)
}

func retriableCode(c codes.Code) bool {
	switch c {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted:
		return true
	}
	return false
}
