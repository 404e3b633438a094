package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/manifest"
)

// POST /streams/{id}/await?offset=N|committed&timeout=D[&flush=false] waits until offset N
// of the stream is persisted (its fragment and a root referencing it are in S3, the
// manifest record naming that root is in etcd) and says so, or says why it will not be (a
// declared gap, a stopped stream) or could not be told in time. It flushes by default
// (actors.Node.Flush: the offset is cut and persisted at once, not at the idle cut): who
// asks wants it in S3 now; flush=false only waits.

// Bounds of the await's timeout parameter.
const (
	DefaultAwaitTimeout = 30 * time.Second
	MaxAwaitTimeout     = 10 * time.Minute
)

// Error classes of an await answer (AwaitResult.ErrorClass): what a script branches on.
const (
	AwaitInGap         = "in_gap"         // 409: the offset lies in a declared gap, lost for good
	AwaitUndecided     = "undecided"      // 503: a group object could not be read to tell; ask again
	AwaitStreamStopped = "stream_stopped" // 410: the stream stopped (deleted, deposed, removed)
	AwaitUnknownStream = "unknown_stream" // 404: the node does not run the stream
	AwaitTimeout       = "timeout"        // 504: not persisted within the timeout; ask again
	AwaitUnavailable   = "unavailable"    // 503: the node or its admin server is stopping
	AwaitBadRequest    = "bad_request"    // 400: a parameter is wrong (the message names it)
	AwaitInternal      = "internal"       // 500: anything else
)

// AwaitResult is the answer to an await, whatever its outcome: Persisted, or ErrorClass and
// Error saying why not.
type AwaitResult struct {
	Stream string `json:"stream"`
	// Asked is the offset parameter as given; Offset the offset waited for (committed
	// resolved to the last committed offset when the request came).
	Asked  string `json:"asked"`
	Offset uint64 `json:"offset"`
	// NothingCommitted is set when committed was asked of a stream whose log has no
	// committed chunk: nothing to wait for, the answer is persisted at once.
	NothingCommitted bool `json:"nothing_committed,omitempty"`
	Persisted        bool `json:"persisted"`
	// PersistedNext is the node's persisted next offset right after a persisted answer (at
	// least Offset+1), from its manifest cache; 0 when unknown.
	PersistedNext uint64  `json:"persisted_next,omitempty"`
	WaitedSeconds float64 `json:"waited_seconds"`
	ErrorClass    string  `json:"error_class,omitempty"`
	Error         string  `json:"error,omitempty"`
	Retry         bool    `json:"retry,omitempty"` // asking again may get another answer
}

// awaitRequest is an await's validated parameters.
type awaitRequest struct {
	asked     string
	offset    uint64
	committed bool // offset=committed: resolve when the request is served
	timeout   time.Duration
	flush     bool // hurry the offset (the default)
}

// parseAwait validates the query of an await; errors name the parameter.
func parseAwait(q url.Values) (awaitRequest, error) {
	var a awaitRequest
	a.asked = q.Get("offset")
	switch v := a.asked; {
	case !q.Has("offset") || v == "":
		return a, fmt.Errorf("%w: offset: required (an offset such as 1234, or committed for the last committed offset)", errBadRequest)
	case v == "committed" || v == "last":
		a.committed = true
	default:
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return a, fmt.Errorf("%w: offset %q: want an offset such as 1234, or committed", errBadRequest, v)
		}
		a.offset = n
	}
	a.flush = true
	if v := q.Get("flush"); q.Has("flush") {
		f, err := strconv.ParseBool(v)
		if err != nil {
			return a, fmt.Errorf("%w: flush %q: want true or false", errBadRequest, v)
		}
		a.flush = f
	}
	a.timeout = DefaultAwaitTimeout
	if v := q.Get("timeout"); q.Has("timeout") {
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			return a, fmt.Errorf("%w: timeout %q: want a duration such as 30s", errBadRequest, v)
		case d <= 0:
			return a, fmt.Errorf("%w: timeout %q: must be above zero", errBadRequest, v)
		case d > MaxAwaitTimeout:
			return a, fmt.Errorf("%w: timeout %q: at most %v (ask again to wait longer)", errBadRequest, v, MaxAwaitTimeout)
		}
		a.timeout = d
	}
	return a, nil
}

// awaitOutcome classifies an await's error: the HTTP status, the error class and whether
// asking again may help.
func awaitOutcome(err error) (code int, class string, retry bool) {
	switch {
	case errors.Is(err, errBadRequest):
		return http.StatusBadRequest, AwaitBadRequest, false
	case errors.Is(err, actors.ErrOffsetInGap):
		return http.StatusConflict, AwaitInGap, false
	case errors.Is(err, actors.ErrAwaitUndecided):
		return http.StatusServiceUnavailable, AwaitUndecided, true
	case errors.Is(err, actors.ErrStreamStopped):
		return http.StatusGone, AwaitStreamStopped, false
	case errors.Is(err, actors.ErrUnknownStream), errors.Is(err, manifest.ErrInvalidStreamID):
		return http.StatusNotFound, AwaitUnknownStream, false
	case errors.Is(err, actors.ErrNodeStopped), errors.Is(err, errAdminClosing):
		return http.StatusServiceUnavailable, AwaitUnavailable, true
	case errors.Is(err, errAwaitTimeout):
		return http.StatusGatewayTimeout, AwaitTimeout, true
	}
	return http.StatusInternalServerError, AwaitInternal, false
}

var (
	errAwaitTimeout = errors.New("not persisted within the timeout")
	errAdminClosing = errors.New("the admin server is closing")
)

func (s *Server) await(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	started := time.Now()
	res := AwaitResult{Stream: id, Asked: r.URL.Query().Get("offset")}
	answer := func(err error) {
		res.WaitedSeconds = time.Since(started).Seconds()
		if err == nil {
			res.Persisted = true
			if p, ok := s.opts.Node.Cached(id); ok && p.Manifest.NextOffset > res.Offset {
				res.PersistedNext = p.Manifest.NextOffset
			}
			writeJSON(w, http.StatusOK, res)
			return
		}
		code, class, retry := awaitOutcome(err)
		res.ErrorClass, res.Error, res.Retry = class, err.Error(), retry
		if class == AwaitUndecided || class == AwaitUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		writeJSON(w, code, res)
	}
	if err := s.known(id); err != nil {
		answer(err)
		return
	}
	a, err := parseAwait(r.URL.Query())
	if err != nil {
		answer(err)
		return
	}
	res.Offset = a.offset
	if a.committed {
		next, err := s.opts.Node.CommittedNext(id)
		if err != nil {
			answer(err)
			return
		}
		if next == 0 {
			res.NothingCommitted = true
			answer(nil)
			return
		}
		res.Offset = next - 1
	}
	ctx, cancel := context.WithTimeoutCause(r.Context(), a.timeout, errAwaitTimeout)
	defer cancel()
	stop := context.AfterFunc(s.closing, func() { cancel() })
	defer stop()
	if a.flush {
		err = s.opts.Node.Flush(ctx, id, res.Offset)
	} else {
		err = s.opts.Node.AwaitOffset(ctx, id, res.Offset)
	}
	switch {
	case err == nil:
	case r.Context().Err() != nil:
		return // the client went away: nobody to answer
	case s.closing.Err() != nil:
		err = fmt.Errorf("await offset %d of %s: %w", res.Offset, id, errAdminClosing)
	case errors.Is(context.Cause(ctx), errAwaitTimeout) && errors.Is(err, context.DeadlineExceeded):
		// (a real answer, in a gap or stopped, that came as the timeout fired keeps its class)
		err = fmt.Errorf("offset %d of %s: %w of %v (ask again to wait longer)", res.Offset, id, errAwaitTimeout, a.timeout)
	}
	if err != nil {
		s.opts.Log.Debug().Str("stream", id).Uint64("offset", res.Offset).Err(err).Msg("admin: await_offset not persisted")
	}
	answer(err)
}

// AwaitQuery is what Client.Await asks for.
type AwaitQuery struct {
	Offset  string        // an offset or committed
	Timeout time.Duration // 0: the server's default (30 s)
	// NoFlush only waits: the offset is persisted when the node's own rules say (the idle
	// cut, the persist threshold or interval) rather than at once.
	NoFlush bool
}

// AwaitError is an await that did not answer persisted: the server's answer, with its HTTP
// status. Class is one of the Await* error classes ("" when the answer was not an await
// answer, e.g. a proxy's).
type AwaitError struct {
	Status int
	Result AwaitResult
}

// Error is the server's reason with the class and the HTTP status.
func (e *AwaitError) Error() string {
	return fmt.Sprintf("%s: %s (HTTP %d)", e.Result.ErrorClass, e.Result.Error, e.Status)
}

// Await asks a running node to wait until an offset of stream id is persisted. A persisted
// answer returns the result and nil; any other answer an *AwaitError with its class; a
// server that cannot be reached a plain error. ctx should outlast q.Timeout.
func (c Client) Await(ctx context.Context, id string, q AwaitQuery) (AwaitResult, error) {
	v := url.Values{}
	v.Set("offset", q.Offset)
	if q.NoFlush {
		v.Set("flush", "false")
	}
	if q.Timeout > 0 {
		v.Set("timeout", q.Timeout.String())
	}
	hc := c.HTTP
	if hc == nil {
		wait := q.Timeout
		if wait <= 0 {
			wait = DefaultAwaitTimeout
		}
		hc = &http.Client{Timeout: wait + 10*time.Second}
	}
	path := "/streams/" + url.PathEscape(id) + "/await?" + v.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.Base, "/")+path, nil)
	if err != nil {
		return AwaitResult{}, fmt.Errorf("admin request %s: %w", path, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return AwaitResult{}, fmt.Errorf("admin server %s: %w", c.Base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return AwaitResult{}, fmt.Errorf("admin server %s: read answer: %w", c.Base, err)
	}
	var res AwaitResult
	jerr := json.Unmarshal(body, &res)
	if resp.StatusCode == http.StatusOK && jerr == nil && res.Persisted {
		return res, nil
	}
	if jerr != nil || res.Error == "" {
		res.Error = strings.TrimSpace(string(body))
	}
	return res, &AwaitError{Status: resp.StatusCode, Result: res}
}
