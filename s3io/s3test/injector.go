package s3test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/streamtier/streamtier/s3io"
)

// Fault is what the injector does to a matching request.
type Fault int

// Faults the injector can inject.
const (
	// FaultInternalError answers 500 InternalError without forwarding.
	FaultInternalError Fault = iota + 1
	// FaultSlowDown answers 503 SlowDown without forwarding.
	FaultSlowDown
	// FaultForbidden answers 403 AccessDenied without forwarding.
	FaultForbidden
	// FaultBadDigest answers 400 BadDigest without forwarding.
	FaultBadDigest
	// FaultDelay holds the request for Rule.Delay, then forwards it.
	FaultDelay
	// FaultResetRequest reads Rule.AfterBytes of the request body (default half), then
	// resets the connection (RST): the client sees a reset while it is still sending.
	FaultResetRequest
	// FaultResetResponse forwards the request, sends the response headers and
	// Rule.AfterBytes of the response body (default half), then resets the connection.
	FaultResetResponse
	// FaultTruncateResponse is FaultResetResponse with a clean close (FIN) instead of a
	// reset: the body ends before its Content-Length.
	FaultTruncateResponse
	// FaultDropResponse forwards the request (the server acts on it) and closes the
	// connection without answering: the result never arrives.
	FaultDropResponse
	// FaultCorruptBody flips one bit of the request body at Rule.AfterBytes (default the
	// middle) on its way to the server, which then sees a bad checksum.
	FaultCorruptBody
	// FaultCorruptResponse forwards the request and flips one bit of the response body at
	// Rule.AfterBytes (default the middle) on its way back: a GET that returns other bytes
	// than the object holds, headers intact.
	FaultCorruptResponse
	// FaultIgnoreChecksum strips the x-amz-checksum-* headers from the request and signs it
	// again, so the server neither verifies nor reports a checksum: an S3-compatible server
	// that ignores the header. The body passes unchanged.
	FaultIgnoreChecksum
	// FaultIgnoreConditions strips If-None-Match and If-Match from the request and signs it
	// again: an S3-compatible server that ignores conditional writes.
	FaultIgnoreConditions
	// FaultKeepPartial forwards a request whose body arrives whole; when the client aborts
	// the request before its body is whole, it stores what arrived under the request's key
	// as a complete, shorter object and sends its size on Rule.Kept: a server that commits
	// an aborted PUT (versitygw's posix backend sometimes does, at times after the client
	// has given up).
	FaultKeepPartial
)

// String names the fault.
func (f Fault) String() string {
	switch f {
	case FaultInternalError:
		return "500 InternalError"
	case FaultSlowDown:
		return "503 SlowDown"
	case FaultForbidden:
		return "403 AccessDenied"
	case FaultBadDigest:
		return "400 BadDigest"
	case FaultDelay:
		return "delay"
	case FaultResetRequest:
		return "reset mid-request-body"
	case FaultResetResponse:
		return "reset mid-response-body"
	case FaultTruncateResponse:
		return "truncated response body"
	case FaultDropResponse:
		return "dropped response"
	case FaultCorruptBody:
		return "corrupt request body"
	case FaultCorruptResponse:
		return "corrupt response body"
	case FaultIgnoreChecksum:
		return "checksum header ignored"
	case FaultIgnoreConditions:
		return "conditional headers ignored"
	case FaultKeepPartial:
		return "aborted request kept"
	}
	return "fault(" + strconv.Itoa(int(f)) + ")"
}

// Rule says which requests get a fault: Method ("" for any), KeyRegexp (matched against
// the object key of a path-style request, "" for any; bucket-level requests have key "") and
// QueryRegexp (matched against the raw query, "" for any: `prefix=[^&]*root-` picks listings
// of roots) select them, Count limits how many (0: every one).
type Rule struct {
	Method      string
	KeyRegexp   string
	QueryRegexp string
	Fault       Fault
	Count       int
	Delay       time.Duration // FaultDelay
	AfterBytes  int64         // resets, truncation, corruption: bytes let through first
	// Hit, when set, receives the method and key of each request the rule fires on (without
	// blocking: give it room), so a test can act while a delayed request is held.
	Hit chan<- string
	// Kept, for FaultKeepPartial, receives the size of each partial object stored (without
	// blocking: give it room), so a test can wait until the server has kept it.
	Kept chan<- int64
}

type rule struct {
	Rule
	re, query *regexp.Regexp
	left      int // -1: unlimited
}

// Injector is a reverse proxy in front of a Server that injects faults by rule. Requests
// that match no rule pass through unchanged (the Host header is kept, so signatures hold).
type Injector struct {
	t         testing.TB // nil for a proxy from NewProxy
	srv       *Server
	front     *httptest.Server
	proxy     *httputil.ReverseProxy
	transport *http.Transport
	upstream  *url.URL
	done      chan struct{} // closed on Close: held requests let go
	closeOnce sync.Once

	mu    sync.Mutex
	rules []*rule
	hits  int
}

// NewInjector starts a proxy in front of srv (TLS when srv is, with the same CA) and stops
// it on t.Cleanup.
func NewInjector(t testing.TB, srv *Server) *Injector {
	t.Helper()
	i, err := NewProxy(srv)
	if err != nil {
		t.Fatal(err)
	}
	i.t = t
	t.Cleanup(i.Close)
	return i
}

// NewProxy starts an injector in front of srv as NewInjector does, for programs that have
// no testing.TB: the caller stops it with Close, and adds rules with AddRule.
func NewProxy(srv *Server) (*Injector, error) {
	up, err := url.Parse(srv.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("s3test: server endpoint: %w", err)
	}
	i := &Injector{srv: srv, upstream: up, done: make(chan struct{})}
	i.transport = &http.Transport{TLSClientConfig: srv.tlsConfig(), MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second}
	quiet := log.New(io.Discard, "", 0)
	i.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(up)
			pr.Out.Host = pr.In.Host // the signature covers the host the client used
		},
		Transport:     i.transport,
		FlushInterval: -1,
		ErrorLog:      quiet,
	}
	i.front = httptest.NewUnstartedServer(i)
	i.front.Config.ErrorLog = quiet
	if srv.ca != nil {
		i.front.TLS = &tls.Config{Certificates: []tls.Certificate{srv.ca.Leaf}}
		i.front.StartTLS()
	} else {
		i.front.Start()
	}
	return i, nil
}

// Close stops the proxy: held requests are let go and client connections closed. Calling
// it again does nothing.
func (i *Injector) Close() {
	i.closeOnce.Do(func() {
		close(i.done)
		i.front.CloseClientConnections()
		i.front.Close()
		i.transport.CloseIdleConnections()
	})
}

// Endpoint is the proxy's base URL.
func (i *Injector) Endpoint() string { return i.front.URL }

// Config is an s3io configuration for the server's bucket through the proxy.
func (i *Injector) Config() s3io.Config { return i.srv.configFor(i.front.URL, i.srv.Bucket) }

// Add appends a rule; rules are tried in order and the first live match applies. A bad key
// pattern fails the test.
func (i *Injector) Add(r Rule) {
	if i.t != nil {
		i.t.Helper()
	}
	if err := i.AddRule(r); err != nil {
		if i.t == nil {
			panic(err) // a proxy from NewProxy: use AddRule
		}
		i.t.Fatal(err)
	}
}

// AddRule appends a rule as Add does, returning a bad key pattern as an error.
func (i *Injector) AddRule(r Rule) error {
	re, err := regexp.Compile(r.KeyRegexp)
	if err != nil {
		return fmt.Errorf("s3test: rule key pattern %q: %w", r.KeyRegexp, err)
	}
	query, err := regexp.Compile(r.QueryRegexp)
	if err != nil {
		return fmt.Errorf("s3test: rule query pattern %q: %w", r.QueryRegexp, err)
	}
	left := r.Count
	if left == 0 {
		left = -1
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	i.rules = append(i.rules, &rule{Rule: r, re: re, query: query, left: left})
	return nil
}

// Clear removes every rule.
func (i *Injector) Clear() {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.rules = nil
}

// Hits is how many faults were injected so far.
func (i *Injector) Hits() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.hits
}

func (i *Injector) match(method, key, query string) (Rule, bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, r := range i.rules {
		if r.left == 0 || (r.Method != "" && !strings.EqualFold(r.Method, method)) || !r.re.MatchString(key) || !r.query.MatchString(query) {
			continue
		}
		if r.left > 0 {
			r.left--
		}
		i.hits++
		if r.Hit != nil {
			select {
			case r.Hit <- method + " " + key:
			default:
			}
		}
		return r.Rule, true
	}
	return Rule{}, false
}

// objectKey is the key of a path-style request: the path after "/<bucket>/".
func objectKey(path string) string {
	path = strings.TrimPrefix(path, "/")
	if _, key, ok := strings.Cut(path, "/"); ok {
		return key
	}
	return ""
}

// ServeHTTP applies the first matching rule, or forwards the request.
func (i *Injector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rule, ok := i.match(r.Method, objectKey(r.URL.Path), r.URL.RawQuery)
	if !ok {
		i.proxy.ServeHTTP(w, r)
		return
	}
	half := func(n int64) int64 {
		if rule.AfterBytes > 0 {
			return rule.AfterBytes
		}
		return max(n/2, 0)
	}
	switch rule.Fault {
	case FaultInternalError:
		writeS3Error(w, r, http.StatusInternalServerError, "InternalError", "s3test: injected internal error")
	case FaultSlowDown:
		writeS3Error(w, r, http.StatusServiceUnavailable, "SlowDown", "s3test: injected slow down")
	case FaultForbidden:
		writeS3Error(w, r, http.StatusForbidden, "AccessDenied", "s3test: injected access denied")
	case FaultBadDigest:
		writeS3Error(w, r, http.StatusBadRequest, "BadDigest", "s3test: injected bad digest")
	case FaultDelay:
		timer := time.NewTimer(rule.Delay)
		defer timer.Stop()
		select {
		case <-timer.C:
			i.proxy.ServeHTTP(w, r)
		case <-r.Context().Done(): // the client gave up (seen once its body is read)
		case <-i.done:
		}
	case FaultResetRequest:
		io.CopyN(io.Discard, r.Body, half(r.ContentLength))
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			resetConn(conn)
		}
	case FaultResetResponse, FaultTruncateResponse:
		resp, body, err := i.forward(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		writeRawResponse(brw.Writer, resp, body, half(int64(len(body))))
		brw.Flush()
		if rule.Fault == FaultResetResponse {
			resetConn(conn)
		} else {
			conn.Close()
		}
	case FaultDropResponse:
		if _, _, err := i.forward(r); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	case FaultCorruptBody:
		r.Body = &flipReader{r: r.Body, at: half(r.ContentLength)}
		i.proxy.ServeHTTP(w, r)
	case FaultCorruptResponse:
		resp, body, err := i.forward(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if len(body) > 0 {
			body[min(half(int64(len(body))), int64(len(body))-1)] ^= 1
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		w.Write(body)
	case FaultKeepPartial:
		i.keepPartial(w, r, rule)
	case FaultIgnoreChecksum:
		if err := i.stripChecksum(r); err != nil {
			writeS3Error(w, r, http.StatusInternalServerError, "InternalError", "s3test: "+err.Error())
			return
		}
		i.proxy.ServeHTTP(w, r)
	case FaultIgnoreConditions:
		if err := i.stripHeaders(r, func(l string) bool { return l == "if-none-match" || l == "if-match" }); err != nil {
			writeS3Error(w, r, http.StatusInternalServerError, "InternalError", "s3test: "+err.Error())
			return
		}
		i.proxy.ServeHTTP(w, r)
	default:
		writeS3Error(w, r, http.StatusInternalServerError, "InternalError", "s3test: unknown fault "+rule.Fault.String())
	}
}

// keepPartial reads the request body; whole, it forwards the request; cut short by the
// client, it stores what arrived under the request's key with a request of its own (the
// client is gone: nothing answers it) and reports the size on rule.Kept.
func (i *Injector) keepPartial(w http.ResponseWriter, r *http.Request, rule Rule) {
	got, err := io.ReadAll(r.Body)
	if err == nil && (r.ContentLength < 0 || int64(len(got)) == r.ContentLength) {
		r.Body = io.NopCloser(bytes.NewReader(got))
		i.proxy.ServeHTTP(w, r)
		return
	}
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := s3io.NewStore(ctx, i.srv.configFor(i.srv.Endpoint, bucket))
	if err == nil {
		err = st.PutObject(ctx, key, got)
	}
	if err != nil {
		if i.t != nil {
			i.t.Errorf("s3test: keep the partial PUT of %s (%d bytes): %v", key, len(got), err)
		}
		return
	}
	if rule.Kept != nil {
		select {
		case rule.Kept <- int64(len(got)):
		default:
		}
	}
}

// stripChecksum removes the x-amz-checksum-* and x-amz-sdk-checksum-algorithm headers from
// r and signs it again (SigV4, UNSIGNED-PAYLOAD) over the headers the client signed but
// those, with the server's credentials.
func (i *Injector) stripChecksum(r *http.Request) error {
	return i.stripHeaders(r, func(l string) bool {
		return strings.HasPrefix(l, "x-amz-checksum-") || l == "x-amz-sdk-checksum-algorithm"
	})
}

// stripHeaders removes the headers whose lower-case name drop selects from r and signs it
// again over the headers the client signed but those.
func (i *Injector) stripHeaders(r *http.Request, drop func(lower string) bool) error {
	auth := r.Header.Get("Authorization")
	_, list, ok := strings.Cut(auth, "SignedHeaders=")
	if !ok {
		return fmt.Errorf("request without a SigV4 Authorization header")
	}
	list, _, _ = strings.Cut(list, ",")
	for k := range r.Header {
		if drop(strings.ToLower(k)) {
			r.Header.Del(k)
		}
	}
	signing := r.Clone(r.Context())
	signing.Header = http.Header{}
	for _, h := range strings.Split(list, ";") {
		if v, ok := r.Header[http.CanonicalHeaderKey(h)]; ok {
			signing.Header[http.CanonicalHeaderKey(h)] = v
		}
	}
	signing.URL.Scheme, signing.URL.Host = "http", r.Host
	creds := aws.Credentials{AccessKeyID: i.srv.AccessKey, SecretAccessKey: i.srv.SecretKey}
	if err := v4.NewSigner().SignHTTP(r.Context(), creds, signing, "UNSIGNED-PAYLOAD", "s3", Region, time.Now()); err != nil {
		return fmt.Errorf("sign again: %w", err)
	}
	r.Header.Set("Authorization", signing.Header.Get("Authorization"))
	r.Header.Set("X-Amz-Date", signing.Header.Get("X-Amz-Date"))
	return nil
}

// forward sends r to the server and reads the whole answer.
func (i *Injector) forward(r *http.Request) (*http.Response, []byte, error) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host = i.upstream.Scheme, i.upstream.Host
	out.Host = r.Host
	out.Header.Del("Connection")
	resp, err := i.transport.RoundTrip(out)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

// writeS3Error answers like S3 does, after reading the request body (a client still
// sending would otherwise see a reset rather than the answer).
func writeS3Error(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("x-amz-request-id", "s3test-fault")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
			`<Error><Code>%s</Code><Message>%s</Message><RequestId>s3test-fault</RequestId></Error>`, code, msg)
	}
}

// writeRawResponse writes resp's status and headers announcing all of body, then only the
// first n bytes of it.
func writeRawResponse(w *bufio.Writer, resp *http.Response, body []byte, n int64) {
	fmt.Fprintf(w, "HTTP/1.1 %s\r\n", resp.Status)
	h := resp.Header.Clone()
	h.Del("Transfer-Encoding")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Write(w)
	w.WriteString("\r\n")
	w.Write(body[:min(n, int64(len(body)))])
}

// resetConn closes a connection with a TCP reset instead of a FIN.
func resetConn(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if tcp, ok := c.(*net.TCPConn); ok {
		tcp.SetLinger(0)
	}
	c.Close()
}

// flipReader flips the low bit of the byte at offset at of the stream it wraps.
type flipReader struct {
	r   io.ReadCloser
	at  int64
	off int64
}

func (f *flipReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if f.at >= f.off && f.at < f.off+int64(n) {
		p[f.at-f.off] ^= 1
	}
	f.off += int64(n)
	return n, err
}

func (f *flipReader) Close() error { return f.r.Close() }
