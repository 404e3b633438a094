package s3shape

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// The pacer: unlimited sends at once; at a rate, a connection may run up to the slack ahead
// of its schedule, then waits for it; an idle connection earns no credit.
func TestPace(t *testing.T) {
	if next, w := pace(time.Time{}, t0, 1<<20, 0); w != 0 || !next.IsZero() {
		t.Fatalf("unlimited: wait %v, schedule %v", w, next)
	}
	// 1 MB/s: 1000 bytes are 1 ms, under the slack: sent at once.
	next, w := pace(time.Time{}, t0, 1000, 1_000_000)
	if w != 0 || next != t0.Add(time.Millisecond) {
		t.Fatalf("1 ms of bytes: wait %v, schedule %v", w, next.Sub(t0))
	}
	// 2000 more at the same instant: 3 ms ahead, past the slack: wait all of it.
	next, w = pace(next, t0, 2000, 1_000_000)
	if w != 3*time.Millisecond || next != t0.Add(3*time.Millisecond) {
		t.Fatalf("3 ms ahead: wait %v, schedule %v", w, next.Sub(t0))
	}
	// Idle for a second: the schedule restarts from now.
	later := t0.Add(time.Second)
	next, w = pace(next, later, 1000, 1_000_000)
	if w != 0 || next != later.Add(time.Millisecond) {
		t.Fatalf("after idle: wait %v, schedule %v", w, next.Sub(later))
	}
	// Over many sends the schedule is the rate exactly: 100 x 32 KiB at 64 MB/s.
	next = time.Time{}
	for range 100 {
		next, _ = pace(next, t0, 32<<10, 64_000_000)
	}
	if got, want := next.Sub(t0), time.Duration(float64(100*32<<10)/64e6*float64(time.Second)); got < want-time.Microsecond || got > want+time.Microsecond {
		t.Fatalf("schedule after 100 sends %v, want %v", got, want)
	}
}

// A response is held until the latency after its request's last byte; an interim 100
// Continue is not held.
func TestHold(t *testing.T) {
	if until, held := hold([]byte("HTTP/1.1 200 OK\r\n"), t0, 40*time.Millisecond); !held || until != t0.Add(40*time.Millisecond) {
		t.Fatalf("200: held %v until %v", held, until)
	}
	if _, held := hold([]byte("HTTP/1.1 100 Continue\r\n\r\n"), t0, 40*time.Millisecond); held {
		t.Fatal("100 Continue held")
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []Config{{Latency: -1}, {ConnRate: -1}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
		if _, err := Start("127.0.0.1:1", c); err == nil {
			t.Errorf("%+v started", c)
		}
	}
}

// start runs a proxy in front of an HTTP server whose handler answers GET /n with n bytes
// and PUT with the body's length, closed at the test's end.
func start(t *testing.T, cfg Config) (*Proxy, *http.Client) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprint(w, n)
			return
		}
		var n int
		fmt.Sscanf(strings.TrimPrefix(r.URL.Path, "/"), "%d", &n)
		w.Write(make([]byte, n))
	}))
	t.Cleanup(srv.Close)
	p, err := Start(strings.TrimPrefix(srv.URL, "http://"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil && !strings.Contains(err.Error(), "closed") {
			t.Errorf("close: %v", err)
		}
	})
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return p, &http.Client{Transport: tr}
}

// Requests pass unchanged both ways, each response is held at least the latency (a lower
// bound: what the proxy adds; nothing is asserted about how fast the machine is), and
// several requests on one kept-alive connection are each held.
func TestLatencyPerResponse(t *testing.T) {
	const latency = 30 * time.Millisecond
	p, cli := start(t, Config{Latency: latency})
	for i := range 3 {
		began := time.Now()
		resp, err := cli.Get("http://" + p.Addr() + "/1000")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if len(body) != 1000 {
			t.Fatalf("request %d: %d bytes", i, len(body))
		}
		if took := time.Since(began); took < latency {
			t.Fatalf("request %d answered after %v, before the latency %v", i, took, latency)
		}
	}
	if st := p.Stats(); st.Responses != 3 || st.Conns != 1 {
		t.Fatalf("stats %+v: want 3 responses held on 1 connection", st)
	}
}

// Each direction of a connection is paced: 512 KiB up and 512 KiB down at 4 MB/s take at
// least 1/8 s each way (lower bounds again), and the bytes arrive whole.
func TestConnRateBothDirections(t *testing.T) {
	const rate, size = 4_000_000, 512 << 10
	p, cli := start(t, Config{ConnRate: rate})
	min := time.Duration(float64(size)/rate*float64(time.Second)) - 2*slack
	began := time.Now()
	req, _ := http.NewRequest(http.MethodPut, "http://"+p.Addr()+"/x", bytes.NewReader(make([]byte, size)))
	resp, err := cli.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(got) != fmt.Sprint(size) {
		t.Fatalf("server received %s bytes, want %d", got, size)
	}
	if took := time.Since(began); took < min {
		t.Fatalf("upload of %d bytes took %v, under %v at %d B/s", size, took, min, rate)
	}
	began = time.Now()
	resp, err = cli.Get(fmt.Sprintf("http://%s/%d", p.Addr(), size))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if len(body) != size {
		t.Fatalf("download: %d bytes", len(body))
	}
	if took := time.Since(began); took < min {
		t.Fatalf("download of %d bytes took %v, under %v at %d B/s", size, took, min, rate)
	}
}

// With Expect: 100-continue the interim answer passes and only the final response is held
// (one response counted for the exchange).
func TestContinueNotHeld(t *testing.T) {
	p, _ := start(t, Config{Latency: 5 * time.Millisecond})
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "PUT /x HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n")
	rd := bufio.NewReader(c)
	line, err := rd.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("interim answer %q, %v", line, err)
	}
	rd.ReadString('\n') // the blank line ending it
	fmt.Fprint(c, "abc")
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "3" {
		t.Fatalf("body %q", body)
	}
	if st := p.Stats(); st.Responses != 1 {
		t.Fatalf("%d responses held, want 1 (the interim one passes)", st.Responses)
	}
}

// Close ends connections that are open and idle, and responses held for a latency far
// longer than the test: it returns, and goleak (TestMain) finds no goroutine left.
func TestCloseEndsConnectionsAndWaits(t *testing.T) {
	p, _ := start(t, Config{Latency: time.Hour})
	idle, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	held, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	fmt.Fprintf(held, "GET /10 HTTP/1.1\r\nHost: x\r\n\r\n")
	// The request reached the server once the proxy counted its bytes; wait for that by
	// reading: nothing comes back before Close (the response is held for an hour).
	closed := make(chan error, 1)
	go func() { // owned by the test: ends when the proxy closes the connection
		_, err := held.Read(make([]byte, 1))
		closed <- err
	}()
	if err := p.Close(); err != nil && !strings.Contains(err.Error(), "closed") {
		t.Fatal(err)
	}
	if err := <-closed; err == nil {
		t.Fatal("a byte of the held response came through")
	}
	if _, err := idle.Read(make([]byte, 1)); err == nil {
		t.Fatal("the idle connection is still open after Close")
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("the proxy still accepts after Close")
	}
}
