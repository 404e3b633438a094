package read

import "testing"

// TestReadBufsClasses: a range takes the smallest class that holds it (the range size
// halved down to 64 KiB), a range above the range size is not pooled, a buffer that comes
// back is reused for a range of its class only, and the free lists hold at most the limit.
func TestReadBufsClasses(t *testing.T) {
	const size = 4 << 20
	for _, c := range []struct{ n, want int64 }{
		{1, 64 << 10}, {64 << 10, 64 << 10}, {64<<10 + 1, 128 << 10}, {1 << 20, 1 << 20},
		{3 << 20, 4 << 20}, {4 << 20, 4 << 20}, {4<<20 + 1, 0},
	} {
		if got := class(size, c.n); got != c.want {
			t.Errorf("class(%d, %d) = %d, want %d", size, c.n, got, c.want)
		}
	}
	p := newReadBufs(8 << 20)
	a := p.get(size, 100<<10)
	if len(a) != 100<<10 || cap(a) != 128<<10 {
		t.Fatalf("get 100 KiB: len %d cap %d, want 100 KiB in a 128 KiB buffer", len(a), cap(a))
	}
	p.put(a)
	if b := p.get(size, 3<<20); cap(b) != 4<<20 || p.reuses.Load() != 0 {
		t.Fatalf("a 3 MiB range took a %d-byte buffer, %d reuses: want a fresh 4 MiB one", cap(b), p.reuses.Load())
	}
	if b := p.get(size, 70<<10); &b[:1][0] != &a[:1][0] || p.reuses.Load() != 1 {
		t.Fatalf("a 70 KiB range did not reuse the 128 KiB buffer")
	}
	for range 3 {
		p.put(make([]byte, 4<<20))
	}
	if p.freeBytes > 8<<20 {
		t.Fatalf("free lists hold %d bytes, limit %d", p.freeBytes, 8<<20)
	}
}
