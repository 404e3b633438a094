package netport

import (
	"net"
	"strconv"
	"testing"
)

// TestListenBelowTheEphemeralRange: a drawn port lies where the kernel never hands one out
// on its own, and holding ports keeps them distinct.
func TestListenBelowTheEphemeralRange(t *testing.T) {
	low, high := Range()
	if low >= high {
		t.Fatalf("empty range [%d,%d)", low, high)
	}
	seen := map[int]bool{}
	for range 20 {
		l, err := Listen("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		_, num, err := net.SplitHostPort(l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(num)
		if err != nil {
			t.Fatal(err)
		}
		if n < low || n >= high {
			t.Errorf("port %d outside [%d,%d)", n, low, high)
		}
		if seen[n] {
			t.Errorf("port %d drawn twice while held", n)
		}
		seen[n] = true
	}
}

// TestFreeReleases: the address Free returns can be bound by whoever asked for it.
func TestFreeReleases(t *testing.T) {
	addr, err := Free("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("bind the freed %s: %v", addr, err)
	}
	l.Close()
}
