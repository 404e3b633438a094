package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/streamtier/streamtier/manifest"
)

// Client talks to a running node's admin server, for the `node` commands.
type Client struct {
	Base string       // http://host:port
	HTTP *http.Client // default: a client with a 10 s timeout
}

// APIError is an error answer of the admin server.
type APIError struct {
	Status  int
	Message string
}

// Error is the server's message with the HTTP status.
func (e *APIError) Error() string { return fmt.Sprintf("%s (HTTP %d)", e.Message, e.Status) }

// ErrNotFound marks a 404 answer: an unknown stream.
var ErrNotFound = errors.New("not found")

// Unwrap makes a 404 match ErrNotFound.
func (e *APIError) Unwrap() error {
	if e.Status == http.StatusNotFound {
		return ErrNotFound
	}
	return nil
}

func (c Client) do(ctx context.Context, method, path string, out any) error {
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.Base, "/")+path, nil)
	if err != nil {
		return fmt.Errorf("admin request %s %s: %w", method, path, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("admin server %s: %w", c.Base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("admin server %s: read answer: %w", c.Base, err)
	}
	if resp.StatusCode/100 != 2 {
		var eb errorBody
		if json.Unmarshal(body, &eb) != nil || eb.Error == "" {
			eb.Error = strings.TrimSpace(string(body))
		}
		return &APIError{Status: resp.StatusCode, Message: eb.Error}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("admin server %s: %s: bad answer: %w", c.Base, path, err)
	}
	return nil
}

// Healthy asks /healthz.
func (c Client) Healthy(ctx context.Context) error { return c.do(ctx, http.MethodGet, "/healthz", nil) }

// Status reads /status.
func (c Client) Status(ctx context.Context) (Report, error) {
	var r Report
	err := c.do(ctx, http.MethodGet, "/status", &r)
	return r, err
}

// Stream reads one stream's status.
func (c Client) Stream(ctx context.Context, id string) (StreamReport, error) {
	var r StreamReport
	err := c.do(ctx, http.MethodGet, "/streams/"+url.PathEscape(id), &r)
	return r, err
}

// Cut asks the node to cut the stream's current fragment now.
func (c Client) Cut(ctx context.Context, id string) (ActionResult, error) {
	var r ActionResult
	err := c.do(ctx, http.MethodPost, "/streams/"+url.PathEscape(id)+"/cut", &r)
	return r, err
}

// Truncate asks the node to truncate the remote tier of a stream whose local log shares no
// chunk with it (status phase "diverged").
func (c Client) Truncate(ctx context.Context, id string) (ActionResult, error) {
	var r ActionResult
	err := c.do(ctx, http.MethodPost, "/streams/"+url.PathEscape(id)+"/truncate", &r)
	return r, err
}

// Retention asks the node to evaluate the stream's remote retention now; with a policy it
// first sets the stream's policy.
func (c Client) Retention(ctx context.Context, id string, p *manifest.Policy) (ActionResult, error) {
	path := "/streams/" + url.PathEscape(id) + "/retention"
	if p != nil {
		q := url.Values{}
		q.Set("max_bytes", fmt.Sprint(p.MaxBytes))
		q.Set("max_age", (time.Duration(p.MaxAgeMillis) * time.Millisecond).String())
		path += "?" + q.Encode()
	}
	var r ActionResult
	err := c.do(ctx, http.MethodPost, path, &r)
	return r, err
}
