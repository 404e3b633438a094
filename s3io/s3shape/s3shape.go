// Package s3shape is a TCP proxy that makes a fast S3 endpoint (the embedded one on
// loopback, or any other) behave more like a distant one: it holds the first byte of each
// response until a latency has passed since the request's last byte (time to first byte),
// and it limits every connection to a rate in each direction (what one connection to real S3
// carries, tens of MB/s). Benchmarks put it in front of the endpoint for the node and the
// baseline alike, so both see the same S3.
//
// It works on bytes, not on HTTP: a response is the first bytes the server sends after the
// client sent some, which is exact for HTTP/1.1 without pipelining (what the S3 client does).
// An interim "100 Continue" (the client's Expect header on large PUTs) is passed at once and
// not counted as the response: real S3 answers it within a round trip, and the latency
// belongs to the final response, after the body.
//
// The decisions are pure functions (pace, hold) of the connection's state and the clock;
// the proxy's goroutines only move bytes and wait. Every goroutine belongs to the proxy and
// ends at Close, which also ends the waits.
package s3shape

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Config is how the proxy shapes traffic; zero values shape nothing.
type Config struct {
	// Latency is held before the first byte of each response, counted from the last byte
	// of its request reaching the proxy.
	Latency time.Duration
	// ConnRate is the most bytes per second one connection carries in each direction
	// (requests and responses paced separately); 0 means unlimited.
	ConnRate int64
}

// Validate refuses negative values.
func (c Config) Validate() error {
	if c.Latency < 0 {
		return fmt.Errorf("s3shape: latency %v is negative", c.Latency)
	}
	if c.ConnRate < 0 {
		return fmt.Errorf("s3shape: connection rate %d is negative", c.ConnRate)
	}
	return nil
}

// Stats counts what went through the proxy since Start.
type Stats struct {
	Conns     uint64 // client connections accepted
	Responses uint64 // responses held for the latency (interim 100 Continue not counted)
	BytesUp   uint64 // client to server
	BytesDown uint64 // server to client
}

// Proxy is a running shaping proxy.
type Proxy struct {
	cfg    Config
	target string
	ln     net.Listener
	done   chan struct{} // closed by Close: every wait ends

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup

	accepted, responses, up, down atomic.Uint64
}

// Start listens on a loopback port and forwards each connection to target (host:port).
func Start(target string, cfg Config) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("s3shape: listen: %w", err)
	}
	p := &Proxy{cfg: cfg, target: target, ln: ln, done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Stats reports the counters.
func (p *Proxy) Stats() Stats {
	return Stats{Conns: p.accepted.Load(), Responses: p.responses.Load(), BytesUp: p.up.Load(), BytesDown: p.down.Load()}
}

// Close stops accepting, closes every connection (both sides), ends every wait and
// returns once every goroutine of the proxy has ended. A second call does nothing.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	err := p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// track registers c to be closed by Close; false when the proxy is closed already.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed (Close), or the listener failed: no new connections either way
		}
		p.accepted.Add(1)
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// link is one client connection and its server connection: when the client last sent a
// byte, and whether the server has answered since (turn: the next server bytes begin a
// response).
type link struct {
	lastUp atomic.Int64 // unix nanoseconds
	turn   atomic.Bool
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	server, err := net.DialTimeout("tcp", p.target, 10*time.Second)
	if err != nil {
		return // the client sees its connection closed, as with an endpoint that is down
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	var l link
	var inner sync.WaitGroup
	inner.Add(2)
	go func() { // owned by serve: client to server
		defer inner.Done()
		p.copy(server, client, &l, true)
	}()
	go func() { // owned by serve: server to client
		defer inner.Done()
		p.copy(client, server, &l, false)
	}()
	inner.Wait()
}

// copy moves bytes from src to dst, paced, holding responses (server to client) for the
// latency. When src ends it half-closes dst, so the other direction can finish; an error
// closes both.
func (p *Proxy) copy(dst, src net.Conn, l *link, up bool) {
	buf := make([]byte, 32<<10)
	var next time.Time // the pacer's schedule
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			now := time.Now()
			if !up && l.turn.Swap(false) {
				if until, held := hold(buf[:n], time.Unix(0, l.lastUp.Load()), p.cfg.Latency); held {
					p.responses.Add(1)
					if !p.wait(until) {
						return
					}
				} else {
					l.turn.Store(true) // an interim answer: the response is still to come
				}
				now = time.Now()
			}
			var w time.Duration
			next, w = pace(next, now, n, p.cfg.ConnRate)
			if w > 0 && !p.wait(now.Add(w)) {
				return
			}
			if up {
				// Before the write: the server may answer before Write returns, and its
				// response must find the turn set and the request's time, or it passes
				// unheld (it did, under load).
				l.lastUp.Store(time.Now().UnixNano())
				l.turn.Store(true)
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				dst.Close()
				src.Close() // the other direction ends too
				return
			}
			if up {
				p.up.Add(uint64(n))
			} else {
				p.down.Add(uint64(n))
			}
		}
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					tc.CloseWrite()
					return
				}
			}
			dst.Close()
			return
		}
	}
}

// wait blocks until t or Close; false at Close.
func (p *Proxy) wait(t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return true
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-p.done:
		return false
	}
}

// slack is how far the pacer lets a connection run ahead of its schedule before it waits:
// fewer, longer waits (a timer per 32 KiB read would cost more than it shapes) at the same
// average rate.
const slack = 2 * time.Millisecond

// pace schedules n bytes at rate bytes/s on a connection whose schedule stood at next: it
// returns the new schedule and how long to wait before sending them (0: send now). A
// connection idle past its schedule starts again from now (no credit for idle time).
func pace(next, now time.Time, n int, rate int64) (time.Time, time.Duration) {
	if rate <= 0 {
		return next, 0
	}
	if next.Before(now) {
		next = now
	}
	next = next.Add(time.Duration(float64(n) / float64(rate) * float64(time.Second)))
	if ahead := next.Sub(now); ahead > slack {
		return next, ahead
	}
	return next, 0
}

// interim is how an HTTP/1.1 interim answer begins.
var interim = []byte("HTTP/1.1 1")

// hold says whether the first bytes the server sends after a request, first, begin its
// response, and until when they are held: latency after the request's last byte (lastUp).
// An interim answer (1xx: 100 Continue) is not held: the response comes after it.
func hold(first []byte, lastUp time.Time, latency time.Duration) (time.Time, bool) {
	if bytes.HasPrefix(first, interim) {
		return time.Time{}, false
	}
	return lastUp.Add(latency), true
}
