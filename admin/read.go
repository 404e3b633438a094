package admin

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/streamtier/streamtier/actors/read"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/segments"
)

// ReadOpener opens cross-tier readers: a node (writer streams) or a cluster node (writer
// and replica streams).
type ReadOpener interface {
	OpenReader(ctx context.Context, stream string, from read.From) (*read.Reader, error)
}

// GET /streams/{id}/read?from=SPEC&to=OFFSET&follow=1 streams a reader's items as frames
// (see writeFrame): an info frame, one frame per item, then an end or an error frame.
// Without follow the read stops at the committed next offset the reader opened at.

// Frame kinds of the read stream.
const (
	frameInfo  byte = 0xf0 // body: ReadInfo as JSON
	frameEnd   byte = 0xf1 // no body: the read ended as asked
	frameError byte = 0xff // body: the error message
)

// frameHeaderSize is the size of a frame header: kind, tier, offset, end, body length.
const frameHeaderSize = 1 + 1 + 8 + 8 + 4

// ReadInfo is the first frame of a read: where it started and where it stops.
type ReadInfo struct {
	Stream     string         `json:"stream"`
	Start      uint64         `json:"start"`
	Attached   *read.Attached `json:"attached,omitempty"`
	NextAtOpen uint64         `json:"next_at_open"`
	Stop       uint64         `json:"stop,omitempty"` // 0: follows until the client goes away
}

func writeFrame(w io.Writer, kind, tier byte, off, end uint64, body []byte) error {
	var h [frameHeaderSize]byte
	h[0], h[1] = kind, tier
	binary.BigEndian.PutUint64(h[2:], off)
	binary.BigEndian.PutUint64(h[10:], end)
	binary.BigEndian.PutUint32(h[18:], uint32(len(body)))
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	_, err := w.Write(body)
	return err
}

func (s *Server) read(w http.ResponseWriter, r *http.Request) {
	if s.opts.Reads == nil {
		writeJSON(w, http.StatusNotImplemented, errorBody{Error: "this admin server cannot open readers"})
		return
	}
	serveRead(w, r, s.opts.Reads)
}

// ReadHandler serves GET /streams/{id}/read (the route must name {id}) through o, exactly
// as the admin server does: for HTTP servers of their own (tests/clusternode) that read
// through a Cluster.
func ReadHandler(o ReadOpener) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { serveRead(w, r, o) }
}

func serveRead(w http.ResponseWriter, r *http.Request, o ReadOpener) {
	id := r.PathValue("id")
	if err := manifest.ValidateStreamID(id); err != nil {
		writeError(w, err)
		return
	}
	q := r.URL.Query()
	from, err := read.ParseFrom(q.Get("from"))
	if err != nil {
		writeError(w, fmt.Errorf("%w: %w", errBadRequest, err))
		return
	}
	var to uint64
	if v := q.Get("to"); v != "" {
		if to, err = strconv.ParseUint(v, 10, 64); err != nil {
			writeError(w, fmt.Errorf("%w: to=%q: want an offset", errBadRequest, v))
			return
		}
	}
	follow := q.Get("follow") == "1" || q.Get("follow") == "true"
	ctx := r.Context()
	rd, err := o.OpenReader(ctx, id, from)
	if err != nil {
		writeError(w, err)
		return
	}
	defer rd.Close()
	stop := to
	if !follow && (stop == 0 || stop > rd.NextAtOpen) {
		stop = rd.NextAtOpen
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 256<<10)
	rc := http.NewResponseController(w)
	info, _ := json.Marshal(ReadInfo{Stream: id, Start: rd.Start, Attached: rd.Attached, NextAtOpen: rd.NextAtOpen, Stop: stop})
	if writeFrame(bw, frameInfo, 0, 0, 0, info) != nil {
		return
	}
	for stop == 0 || rd.Position() < stop {
		if follow && bw.Buffered() > 0 {
			if bw.Flush() != nil || rc.Flush() != nil {
				return
			}
		}
		it, err := rd.Next(ctx)
		if err != nil {
			if ctx.Err() == nil {
				writeFrame(bw, frameError, 0, 0, 0, []byte(err.Error()))
				bw.Flush()
			}
			return
		}
		if stop > 0 && it.Offset >= stop {
			break
		}
		if writeFrame(bw, byte(it.Kind), byte(it.Tier), it.Offset, it.End, it.Chunk) != nil {
			return
		}
	}
	if writeFrame(bw, frameEnd, 0, 0, 0, nil) == nil {
		bw.Flush()
	}
}

// ReadQuery is what Client.Read asks for.
type ReadQuery struct {
	From   string // first, last, next, an offset or @TIME
	To     uint64 // 0: up to the committed next offset (or forever with Follow)
	Follow bool
}

// ErrReadTruncated marks a read stream that ended without its end frame.
var ErrReadTruncated = errors.New("read stream ended early")

// Read streams a reader's items from a running node, calling info once and then item for
// every item, in order; each chunk is verified (CRC) before it is handed on. It returns when
// the read ends (nil), fn fails, ctx ends or the node reports an error.
func (c Client) Read(ctx context.Context, id string, q ReadQuery, info func(ReadInfo) error, item func(read.Item) error) error {
	v := url.Values{}
	if q.From != "" {
		v.Set("from", q.From)
	}
	if q.To > 0 {
		v.Set("to", strconv.FormatUint(q.To, 10))
	}
	if q.Follow {
		v.Set("follow", "1")
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{} // a read may last: bounded by ctx, not by a client timeout
	}
	path := "/streams/" + url.PathEscape(id) + "/read?" + v.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(c.Base, "/")+path, nil)
	if err != nil {
		return fmt.Errorf("admin request %s: %w", path, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("admin server %s: %w", c.Base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var eb errorBody
		if json.Unmarshal(body, &eb) != nil || eb.Error == "" {
			eb.Error = strings.TrimSpace(string(body))
		}
		return &APIError{Status: resp.StatusCode, Message: eb.Error}
	}
	br := bufio.NewReaderSize(resp.Body, 256<<10)
	var h [frameHeaderSize]byte
	for {
		if _, err := io.ReadFull(br, h[:]); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("read %s: %w: %v", id, ErrReadTruncated, err)
		}
		kind, tier := h[0], h[1]
		off, end := binary.BigEndian.Uint64(h[2:]), binary.BigEndian.Uint64(h[10:])
		body := make([]byte, binary.BigEndian.Uint32(h[18:]))
		if _, err := io.ReadFull(br, body); err != nil {
			return fmt.Errorf("read %s: %w: %v", id, ErrReadTruncated, err)
		}
		switch kind {
		case frameEnd:
			return nil
		case frameError:
			return fmt.Errorf("read %s: the node says: %s", id, body)
		case frameInfo:
			var ri ReadInfo
			if err := json.Unmarshal(body, &ri); err != nil {
				return fmt.Errorf("read %s: bad info frame: %w", id, err)
			}
			if info != nil {
				if err := info(ri); err != nil {
					return err
				}
			}
			continue
		}
		it := read.Item{Kind: read.ItemKind(kind), Tier: read.Tier(tier), Offset: off, End: end}
		if it.Kind == read.ItemChunk {
			hd, err := segments.VerifyChunk(body)
			if err != nil {
				return fmt.Errorf("read %s: chunk at %d: %w", id, off, err)
			}
			if hd.ChunkID != off || hd.NextID() != end {
				return fmt.Errorf("read %s: frame [%d, %d) holds chunk [%d, %d)", id, off, end, hd.ChunkID, hd.NextID())
			}
			it.Header, it.Chunk = hd, body
		}
		if err := item(it); err != nil {
			return err
		}
	}
}
