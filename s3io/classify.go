package s3io

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"syscall"

	smithy "github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/segments"
)

// Class is what the caller should do about an error from this package. Classify is the only
// place that decides it; the upload core maps classes onto its retry policies.
type Class int

// Error classes.
const (
	// ClassNone is the class of a nil error.
	ClassNone Class = iota
	// ClassRetriable: 5xx, SlowDown/throttling, timeouts, connection resets and refusals,
	// truncated bodies. Retry at once, then with short backoff.
	ClassRetriable
	// ClassNonTransient: 403, 400, BadDigest, other 4xx, unexpected statuses, corrupt local
	// chunks or objects, local read failures. Retry only after a long delay; it needs a fix.
	ClassNonTransient
	// ClassSegmentGone: a segment behind the upload was deleted (or cut short) locally; the
	// range is gone here and the core resets to the oldest local offset.
	ClassSegmentGone
	// ClassCanceled: the caller's context was canceled; nobody is waiting for the result.
	ClassCanceled
)

// String names the class for logs and metric labels.
func (c Class) String() string {
	switch c {
	case ClassNone:
		return "none"
	case ClassRetriable:
		return "retriable"
	case ClassNonTransient:
		return "non_transient"
	case ClassSegmentGone:
		return "segment_gone"
	case ClassCanceled:
		return "canceled"
	}
	return "unknown"
}

// NumClasses counts the classes; it sizes per-class counters.
const NumClasses = int(ClassCanceled) + 1

// ErrLocalRead marks a failure to read a segment file other than its deletion (an I/O error).
var ErrLocalRead = errors.New("read segment")

// retriableCodes are S3 error codes that say "try again" whatever their HTTP status (S3 sends
// RequestTimeout with a 400, for instance).
var retriableCodes = map[string]bool{
	"SlowDown":                       true,
	"Throttling":                     true,
	"ThrottlingException":            true,
	"ThrottledException":             true,
	"RequestThrottled":               true,
	"RequestThrottledException":      true,
	"TooManyRequestsException":       true,
	"RequestLimitExceeded":           true,
	"BandwidthLimitExceeded":         true,
	"RequestTimeout":                 true,
	"RequestTimeoutException":        true,
	"InternalError":                  true,
	"ServiceUnavailable":             true,
	"PriorRequestNotComplete":        true,
	"TransactionInProgressException": true,
}

// Classify decides what an error from this package means for the caller. Local conditions
// are checked first (a failing body read surfaces from the HTTP client wrapped as a send
// error), then cancellation, then the S3 response, then the transport.
func Classify(err error) Class {
	if err == nil {
		return ClassNone
	}
	if errors.Is(err, segments.ErrSegmentGone) {
		return ClassSegmentGone
	}
	if errors.Is(err, ErrBodyMismatch) {
		return ClassRetriable // bytes changed in transit: a new read may well be right
	}
	if errors.Is(err, fragment.ErrCorrupt) || errors.Is(err, ErrLocalRead) ||
		errors.Is(err, fragment.ErrBadDescription) || errors.Is(err, ErrInvalidArgument) {
		return ClassNonTransient
	}
	if errors.Is(err, context.Canceled) {
		return ClassCanceled
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ClassRetriable
	}

	// Certificate problems will not heal by themselves.
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var certErr x509.CertificateInvalidError
	var verifyErr *tls.CertificateVerificationError
	if errors.As(err, &unknownCA) || errors.As(err, &hostErr) || errors.As(err, &certErr) || errors.As(err, &verifyErr) {
		return ClassNonTransient
	}

	// An S3 response with an error status (the SDK also wraps send failures in a response
	// error, with status 0: those are not responses).
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && retriableCodes[apiErr.ErrorCode()] {
		return ClassRetriable
	}
	if status := responseStatus(err); status != 0 {
		switch {
		case status >= 500, status == 429, status == 408:
			return ClassRetriable
		case status >= 400:
			return ClassNonTransient
		case isTransport(err):
			return ClassRetriable // a 2xx whose body was cut short while decoding
		default:
			return ClassNonTransient // a status the SDK could not accept: unexpected
		}
	}
	if apiErr != nil {
		return ClassNonTransient
	}

	// No response: connection-level failures are worth retrying.
	if isTransport(err) {
		return ClassRetriable
	}
	var sendErr *smithyhttp.RequestSendError
	if errors.As(err, &sendErr) {
		return ClassRetriable
	}
	return ClassNonTransient
}

// isTransport reports connection-level failures: resets, refusals, broken pipes, timeouts,
// bodies that ended early.
func isTransport(err error) bool {
	for _, e := range []error{syscall.ECONNRESET, syscall.ECONNREFUSED, syscall.ECONNABORTED, syscall.EPIPE,
		syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH, io.ErrUnexpectedEOF, io.EOF} {
		if errors.Is(err, e) {
			return true
		}
	}
	var opErr *net.OpError
	var dnsErr *net.DNSError
	if errors.As(err, &opErr) || errors.As(err, &dnsErr) {
		return true
	}
	// Not any net.Error: *url.Error is one and wraps everything the HTTP client returns.
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}

// responseStatus is the HTTP status of the S3 response err carries, 0 when none arrived.
func responseStatus(err error) int {
	var respErr *smithyhttp.ResponseError
	if !errors.As(err, &respErr) || respErr.Response == nil || respErr.Response.Response == nil {
		return 0
	}
	return respErr.Response.StatusCode
}

// IsRetriable reports whether err is worth retrying at once (ClassRetriable).
func IsRetriable(err error) bool { return Classify(err) == ClassRetriable }

// IsBusy reports whether err is the store's answer asking to be tried again (a 5xx, 429,
// SlowDown and the other throttling codes), as opposed to no answer at all: a caller that
// must fail fast on a wrong endpoint can still ride out a busy one.
func IsBusy(err error) bool {
	if Classify(err) != ClassRetriable {
		return false
	}
	var apiErr smithy.APIError
	return responseStatus(err) != 0 || errors.As(err, &apiErr)
}

// IsNotFound reports whether err says the object or bucket does not exist (404, or
// ErrNotFound from LocateEntry). It informs readers (a missing root object, a bucket to
// create); it does not change the class.
func IsNotFound(err error) bool {
	if errors.Is(err, ErrNotFound) || responseStatus(err) == 404 {
		return true
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode() {
		case "NoSuchKey", "NotFound", "NoSuchBucket":
			return true
		}
	}
	return false
}
