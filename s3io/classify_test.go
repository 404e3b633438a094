package s3io_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	smithy "github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/segments"
)

// sdkResponse builds the error chain the SDK returns for an S3 error response.
func sdkResponse(status int, code string) error {
	var inner error = &smithy.GenericAPIError{Code: code, Message: "test"}
	if code == "" {
		inner = fmt.Errorf("no error body")
	}
	return &smithy.OperationError{ServiceID: "S3", OperationName: "PutObject", Err: &awshttp.ResponseError{
		ResponseError: &smithyhttp.ResponseError{
			Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
			Err:      inner,
		},
		RequestID: "r",
	}}
}

// sdkSend builds the error chain the SDK returns when no response arrived: a send error in
// a response error of status 0, inside the HTTP client's url.Error.
func sdkSend(err error) error {
	return &smithy.OperationError{ServiceID: "S3", OperationName: "PutObject", Err: &awshttp.ResponseError{
		ResponseError: &smithyhttp.ResponseError{
			Response: &smithyhttp.Response{Response: &http.Response{}},
			Err:      &smithyhttp.RequestSendError{Err: &url.Error{Op: "Put", URL: "http://127.0.0.1/b/k", Err: err}},
		},
	}}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestClassify(t *testing.T) {
	opErr := func(op string, errno syscall.Errno) error {
		return &net.OpError{Op: op, Net: "tcp", Err: os.NewSyscallError(op, errno)}
	}
	chunkErr := &fragment.ChunkCheckError{Segment: "00000000000000000000.segment", ChunkID: 7, Position: 8, Reason: "data CRC"}
	for _, tc := range []struct {
		name string
		err  error
		want s3io.Class
	}{
		{"nil", nil, s3io.ClassNone},

		{"500 InternalError", sdkResponse(500, "InternalError"), s3io.ClassRetriable},
		{"502 without body", sdkResponse(502, ""), s3io.ClassRetriable},
		{"503 SlowDown", sdkResponse(503, "SlowDown"), s3io.ClassRetriable},
		{"504", sdkResponse(504, "GatewayTimeout"), s3io.ClassRetriable},
		{"429 throttling", sdkResponse(429, "TooManyRequestsException"), s3io.ClassRetriable},
		{"408", sdkResponse(408, ""), s3io.ClassRetriable},
		{"400 RequestTimeout", sdkResponse(400, "RequestTimeout"), s3io.ClassRetriable},
		{"400 SlowDown code", sdkResponse(400, "SlowDown"), s3io.ClassRetriable},
		{"403 AccessDenied", sdkResponse(403, "AccessDenied"), s3io.ClassNonTransient},
		{"403 signature", sdkResponse(403, "SignatureDoesNotMatch"), s3io.ClassNonTransient},
		{"400 BadDigest", sdkResponse(400, "BadDigest"), s3io.ClassNonTransient},
		{"400 InvalidRequest", sdkResponse(400, "InvalidRequest"), s3io.ClassNonTransient},
		{"404 NoSuchKey", sdkResponse(404, "NoSuchKey"), s3io.ClassNonTransient},
		{"404 NoSuchBucket", sdkResponse(404, "NoSuchBucket"), s3io.ClassNonTransient},
		{"409", sdkResponse(409, "BucketNotEmpty"), s3io.ClassNonTransient},
		{"412", sdkResponse(412, "PreconditionFailed"), s3io.ClassNonTransient},
		{"416", sdkResponse(416, "InvalidRange"), s3io.ClassNonTransient},
		{"301 unexpected", sdkResponse(301, "PermanentRedirect"), s3io.ClassNonTransient},
		{"200 undecodable", sdkResponse(200, ""), s3io.ClassNonTransient},
		{"200 body cut short", fmt.Errorf("decode: %w", sdkSend(io.ErrUnexpectedEOF)), s3io.ClassRetriable},
		{"api error without status", &smithy.GenericAPIError{Code: "Weird"}, s3io.ClassNonTransient},

		{"connection refused", sdkSend(opErr("dial", syscall.ECONNREFUSED)), s3io.ClassRetriable},
		{"connection reset", sdkSend(opErr("read", syscall.ECONNRESET)), s3io.ClassRetriable},
		{"broken pipe", sdkSend(opErr("write", syscall.EPIPE)), s3io.ClassRetriable},
		{"server closed (EOF)", sdkSend(io.EOF), s3io.ClassRetriable},
		{"truncated body", fmt.Errorf("get: read body: %w", io.ErrUnexpectedEOF), s3io.ClassRetriable},
		{"i/o timeout", sdkSend(timeoutErr{}), s3io.ClassRetriable},
		{"dns", sdkSend(&net.DNSError{Err: "no such host", Name: "s3.invalid"}), s3io.ClassRetriable},
		{"other send failure", sdkSend(errors.New("http2: something")), s3io.ClassRetriable},
		{"deadline", sdkSend(context.DeadlineExceeded), s3io.ClassRetriable},
		{"unknown CA", sdkSend(&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), s3io.ClassNonTransient},
		{"wrong host in certificate", sdkSend(x509.HostnameError{Host: "x"}), s3io.ClassNonTransient},

		{"canceled", sdkSend(context.Canceled), s3io.ClassCanceled},
		{"canceled plain", fmt.Errorf("put: %w", context.Canceled), s3io.ClassCanceled},

		{"segment gone", fmt.Errorf("put fragment: %w", segments.ErrSegmentGone), s3io.ClassSegmentGone},
		{"segment gone inside a send error", sdkSend(fmt.Errorf("body: %w", segments.ErrSegmentGone)), s3io.ClassSegmentGone},
		{"corrupt local chunk inside a send error", sdkSend(chunkErr), s3io.ClassNonTransient},
		{"corrupt local chunk with a reset", fmt.Errorf("%w (request: %v)", chunkErr, sdkSend(opErr("write", syscall.ECONNRESET))), s3io.ClassNonTransient},
		{"local read error", fmt.Errorf("%w: %w", s3io.ErrLocalRead, syscall.EIO), s3io.ClassNonTransient},
		{"corrupt object", fmt.Errorf("fragment: %w", fragment.ErrCorrupt), s3io.ClassNonTransient},
		{"streamed body changed in transit", fmt.Errorf("put: %w (request: send failed)", s3io.ErrBodyMismatch), s3io.ClassRetriable},
		{"bad description", fmt.Errorf("%w: no chunks", fragment.ErrBadDescription), s3io.ClassNonTransient},
		{"invalid argument", fmt.Errorf("%w: empty key", s3io.ErrInvalidArgument), s3io.ClassNonTransient},
		{"anything else", errors.New("something unexpected"), s3io.ClassNonTransient},
	} {
		if got := s3io.Classify(tc.err); got != tc.want {
			t.Errorf("%s: Classify = %v, want %v (%v)", tc.name, got, tc.want, tc.err)
		}
		if got := s3io.IsRetriable(tc.err); got != (tc.want == s3io.ClassRetriable) {
			t.Errorf("%s: IsRetriable = %v", tc.name, got)
		}
	}
	// Busy: the store answered and asks again; no answer is not busy, nor is a refusal.
	for _, busy := range []error{sdkResponse(500, "InternalError"), sdkResponse(503, "SlowDown"), sdkResponse(502, ""),
		sdkResponse(429, "TooManyRequestsException"), sdkResponse(400, "RequestTimeout")} {
		if !s3io.IsBusy(busy) {
			t.Errorf("IsBusy(%v) = false", busy)
		}
	}
	for _, notBusy := range []error{nil, sdkSend(opErr("dial", syscall.ECONNREFUSED)), sdkSend(&net.DNSError{Err: "no such host", Name: "s3.invalid"}),
		sdkSend(timeoutErr{}), sdkResponse(403, "AccessDenied"), sdkResponse(404, "NoSuchBucket"), errors.New("something")} {
		if s3io.IsBusy(notBusy) {
			t.Errorf("IsBusy(%v) = true", notBusy)
		}
	}
	if !s3io.IsNotFound(sdkResponse(404, "NoSuchKey")) || !s3io.IsNotFound(sdkResponse(404, "")) || s3io.IsNotFound(sdkResponse(403, "AccessDenied")) || s3io.IsNotFound(sdkSend(io.EOF)) {
		t.Error("IsNotFound disagrees with the statuses")
	}
	for c := s3io.ClassNone; c <= s3io.ClassCanceled; c++ {
		if c.String() == "unknown" {
			t.Errorf("class %d has no name", c)
		}
	}
}
