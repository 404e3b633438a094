// Package netport draws loopback ports for servers that are found again at the same address
// after a restart: the embedded etcd and S3 endpoint a data directory remembers, and the
// members of a test cluster that stop and start.
//
// A port handed out by the kernel (port 0) comes from its ephemeral range, and once the
// server stops, any other process's bind(0) or outgoing connection can take it before the
// server starts again ("address already in use"). A port drawn below that range is taken
// only by a process that asks for it by number.
package netport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
)

// rangeFile is where Linux says which ports it hands out for port 0 and outgoing connections.
const rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// Listen holds a free TCP port on host, drawn at random below the kernel's ephemeral range.
func Listen(host string) (net.Listener, error) {
	low, high := Range()
	const tries = 1000
	var last error
	for range tries {
		port := low + rand.IntN(high-low)
		l, err := net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(port)))
		if err == nil {
			return l, nil
		}
		last = err // taken (or not ours to take): draw another
	}
	return nil, fmt.Errorf("netport: no free port on %s in [%d,%d) after %d tries: %w", host, low, high, tries, last)
}

// Free draws a port like Listen and releases it, for a server in another process that
// binds the address itself.
func Free(host string) (string, error) {
	l, err := Listen(host)
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Range is where ports are drawn: [10000, the ephemeral range's first port), or
// [10000, 32768) when the kernel does not say (Linux's default range starts at 32768).
func Range() (low, high int) {
	low, high = 10000, 32768
	b, err := os.ReadFile(rangeFile)
	if err != nil {
		return low, high
	}
	var first, last int
	if _, err := fmt.Sscan(string(b), &first, &last); err == nil && first > low+1000 {
		high = first
	}
	return low, high
}
