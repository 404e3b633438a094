package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/actors/read"
	"github.com/streamtier/streamtier/gc"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/s3io"
)

// Check is a readiness check: a backend the node needs, and how to ask it.
type Check struct {
	Name  string
	Check func(ctx context.Context) error
}

// Options configure the admin server.
type Options struct {
	Node    Node
	NodeID  string
	Started time.Time
	S3      *s3io.Metrics // may be nil
	// Bucket, when set, is the periodic bucket probe: status and metrics show its last
	// outcome, and /readyz's "s3_bucket" check reads it instead of asking S3 itself.
	Bucket *s3io.BucketProbe
	// GC, when set, is the automatic garbage collection: status and metrics show its sweeps.
	GC *gc.Sweeper
	// Prices is the price table of the cost projection; nil means DefaultPrices.
	Prices             *Prices
	Etcd               *EtcdMetrics  // may be nil
	Ready              []Check       // /readyz runs them all, each bounded by ReadyTimeout
	ReadyTimeout       time.Duration // default 2 s
	RebalanceThreshold int           // to count the fragments below groups in /status
	Cluster            ClusterSource // set in cluster mode: /status then has a "cluster" part
	Reads              ReadOpener    // opens readers for GET /streams/{id}/read; nil: not served
	// Faults, when set, lists the node's fatal failures outside the actors (an embedded
	// server that stopped): /status shows them, /metrics counts them, /readyz fails.
	Faults func() []Fault
	Log    zerolog.Logger
}

// Server is a running admin HTTP server.
type Server struct {
	opts     Options
	ln       net.Listener
	srv      *http.Server
	done     chan error
	registry *prometheus.Registry
	once     sync.Once
	// closing ends when Close begins: awaits in flight answer then instead of holding the
	// shutdown for up to their timeout.
	closing     context.Context
	stopClosing context.CancelFunc
}

// Start listens on addr (host:port; port 0 picks a free one) and serves the admin API
// until Close.
func Start(addr string, o Options) (*Server, error) {
	if o.Node == nil {
		return nil, errors.New("admin: a node is required")
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 2 * time.Second
	}
	if o.Started.IsZero() {
		o.Started = time.Now()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin: listen on %s (setting admin_addr): %w", addr, err)
	}
	s := &Server{opts: o, ln: ln, done: make(chan error, 1), registry: prometheus.NewRegistry()}
	s.closing, s.stopClosing = context.WithCancel(context.Background())
	// The node's own series are gathered per scrape beside the per-stream ones (metrics).
	s.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { s.done <- s.srv.Serve(ln) }() // owned by s: Close ends it
	return s, nil
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is the server's base URL.
func (s *Server) URL() string { return "http://" + s.Addr() }

// Close stops accepting requests, waits for those in flight (bounded by ctx) and returns
// once the server goroutine has ended.
func (s *Server) Close(ctx context.Context) error {
	var err error
	s.once.Do(func() {
		s.stopClosing()
		err = s.srv.Shutdown(ctx)
		if serr := <-s.done; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
			err = serr
		}
	})
	if err != nil {
		return fmt.Errorf("admin: close: %w", err)
	}
	return nil
}

// Handler is the admin API; tests may serve it on their own listener.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", s.status)
	mux.HandleFunc("GET /streams/{id}", s.stream)
	mux.HandleFunc("POST /streams/{id}/cut", s.cut)
	mux.HandleFunc("POST /streams/{id}/truncate", s.truncate)
	mux.HandleFunc("POST /streams/{id}/retention", s.retention)
	mux.HandleFunc("GET /streams/{id}/read", s.read)
	mux.HandleFunc("POST /streams/{id}/await", s.await)
	mux.Handle("GET /metrics", metricsHandler(s.opts, s.registry, s.opts.Log))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", s.ready)
	return mux
}

// errorBody is the JSON body of every error answer.
type errorBody struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v) // the client went away if this fails; nothing to do about it
}

func writeError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, actors.ErrUnknownStream), errors.Is(err, manifest.ErrInvalidStreamID):
		code = http.StatusNotFound
	case errors.Is(err, actors.ErrNodeStopped), errors.Is(err, read.ErrUnavailable):
		code = http.StatusServiceUnavailable
	case errors.Is(err, errBadRequest), errors.Is(err, read.ErrOffsetAhead):
		code = http.StatusBadRequest
	case errors.Is(err, actors.ErrStreamStarting):
		code = http.StatusConflict
	}
	writeJSON(w, code, errorBody{Error: err.Error()})
}

var errBadRequest = errors.New("bad request")

// Report builds the node's status report now.
func (s *Server) Report(ctx context.Context) Report {
	rep := BuildReport(s.input(ctx), time.Now())
	if s.opts.Cluster != nil {
		c := BuildClusterReport(s.opts.Cluster.Status(), s.opts.Cluster.Stats())
		rep.Cluster = &c
	}
	return rep
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Report(r.Context()))
}

// known checks the stream id and that the node runs the stream.
func (s *Server) known(id string) error {
	if err := manifest.ValidateStreamID(id); err != nil {
		return err
	}
	streams := s.opts.Node.Streams()
	sort.Strings(streams)
	if i := sort.SearchStrings(streams, id); i == len(streams) || streams[i] != id {
		return fmt.Errorf("stream %q: %w (this node runs %s)", id, actors.ErrUnknownStream, strings.Join(streams, ", "))
	}
	return nil
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := s.known(id); err != nil {
		writeError(w, err)
		return
	}
	for _, st := range s.Report(r.Context()).Streams {
		if st.Stream == id {
			writeJSON(w, http.StatusOK, st)
			return
		}
	}
	writeError(w, fmt.Errorf("stream %q: %w", id, actors.ErrUnknownStream))
}

// ActionResult is the answer to an operator action.
type ActionResult struct {
	Stream string `json:"stream"`
	Action string `json:"action"`
}

func (s *Server) cut(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	err := s.known(id)
	if err == nil {
		err = s.opts.Node.ForceCut(id)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	s.opts.Log.Info().Str("stream", id).Msg("admin: fragment cut requested")
	writeJSON(w, http.StatusOK, ActionResult{Stream: id, Action: "cut"})
}

// truncate is an operator's word for a stream whose local log shares no chunk with its remote
// tier: cut the remote tier back below the local log and tier from there. Refused otherwise.
func (s *Server) truncate(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	err := s.known(id)
	if err == nil {
		err = s.opts.Node.TruncateRemote(r.Context(), id)
	}
	if err != nil {
		s.opts.Log.Warn().Str("stream", id).Err(err).Msg("admin: truncate of the remote tier refused")
		writeError(w, err)
		return
	}
	s.opts.Log.Warn().Str("stream", id).Msg("admin: remote tier truncated on the operator's word")
	writeJSON(w, http.StatusOK, ActionResult{Stream: id, Action: "truncate"})
}

// retention evaluates remote retention now; with max_bytes and/or max_age in the query it
// first sets the stream's policy to them.
func (s *Server) retention(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := s.known(id); err != nil {
		writeError(w, err)
		return
	}
	q := r.URL.Query()
	action := "evaluate-retention"
	var err error
	if q.Has("max_bytes") || q.Has("max_age") {
		var p manifest.Policy
		if p, err = parsePolicy(q.Get("max_bytes"), q.Get("max_age")); err == nil {
			err = s.opts.Node.SetRetention(id, p)
			action = fmt.Sprintf("set-retention max_bytes=%d max_age_ms=%d", p.MaxBytes, p.MaxAgeMillis)
		}
	} else {
		err = s.opts.Node.EvaluateRetention(id)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	s.opts.Log.Info().Str("stream", id).Str("action", action).Msg("admin: retention requested")
	writeJSON(w, http.StatusOK, ActionResult{Stream: id, Action: action})
}

func parsePolicy(maxBytes, maxAge string) (manifest.Policy, error) {
	var p manifest.Policy
	if maxBytes != "" {
		var n uint64
		if _, err := fmt.Sscan(maxBytes, &n); err != nil {
			return p, fmt.Errorf("%w: max_bytes %q: want a byte count", errBadRequest, maxBytes)
		}
		p.MaxBytes = n
	}
	if maxAge != "" {
		d, err := time.ParseDuration(maxAge)
		if err != nil || d < 0 {
			return p, fmt.Errorf("%w: max_age %q: want a duration such as 24h", errBadRequest, maxAge)
		}
		p.MaxAgeMillis = d.Milliseconds()
	}
	return p, nil
}

// ReadyReport is the body of /readyz.
type ReadyReport struct {
	Ready  bool              `json:"ready"`
	Checks map[string]string `json:"checks"` // name -> "ok" or the error
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	rep := ReadyReport{Ready: true, Checks: map[string]string{}}
	if b := s.opts.Bucket; b != nil {
		h := b.Health()
		switch err := h.Err(); {
		case h.Outcome == s3io.ProbeUnknown:
			rep.Ready = false
			rep.Checks["s3_bucket"] = fmt.Sprintf("s3 bucket %s: not probed yet", h.Bucket)
		case err != nil:
			rep.Ready = false
			rep.Checks["s3_bucket"] = err.Error()
		default:
			rep.Checks["s3_bucket"] = "ok"
		}
	}
	for _, c := range s.opts.Ready {
		ctx, cancel := context.WithTimeout(r.Context(), s.opts.ReadyTimeout)
		err := c.Check(ctx)
		cancel()
		if err != nil {
			rep.Ready = false
			rep.Checks[c.Name] = err.Error()
			continue
		}
		rep.Checks[c.Name] = "ok"
	}
	if s.opts.Faults != nil {
		for _, f := range s.opts.Faults() {
			rep.Ready = false
			rep.Checks[f.Server] = f.Error
		}
	}
	code := http.StatusOK
	if !rep.Ready {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, rep)
}
