package read

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/streamtier/streamtier/actors/internal/actortest"
)

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

// TestBudgetKeepsBuffersWarm: a node's budget keeps its range buffers for WarmFor after
// the last reader closed: a reader that opens within it reuses them (and the drop is off);
// once the period passes with no reader they go. A budget without KeepWarm drops them at
// once, and Close drops them with the drop still armed.
func TestBudgetKeepsBuffersWarm(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	root := sys.Root
	r1, r2 := actor.NewPID("nonhost", "r1"), actor.NewPID("nonhost", "r2")
	const size = 1 << 20
	fill := func(b *Budget) {
		b.bufs.put(b.bufs.get(size, size))
	}

	cold := NewBudget(8 << 20)
	cold.join(root, r1)
	fill(cold)
	cold.leave(r1)
	if cold.bufs.freeBytes != 0 {
		t.Fatalf("a budget without KeepWarm kept %d bytes after its last reader", cold.bufs.freeBytes)
	}

	clock := actortest.NewManualClock()
	b := NewBudget(8 << 20)
	b.KeepWarm(clock, WarmFor)
	b.join(root, r1)
	fill(b)
	b.leave(r1)
	clock.Advance(WarmFor - time.Millisecond)
	if b.bufs.freeBytes != size {
		t.Fatalf("%d bytes kept just before the warm period ended, want %d", b.bufs.freeBytes, size)
	}
	b.join(root, r2) // within the period: the buffer is reused, the drop is off
	if got := b.bufs.get(size, size); b.bufs.reuses.Load() != 1 {
		t.Fatalf("the next reader allocated a fresh buffer (%d reuses)", b.bufs.reuses.Load())
	} else {
		b.bufs.put(got)
	}
	clock.Advance(time.Hour)
	if b.bufs.freeBytes != size {
		t.Fatalf("dropped while a reader is open: %d bytes kept", b.bufs.freeBytes)
	}
	b.leave(r2)
	clock.Advance(WarmFor)
	if b.bufs.freeBytes != 0 {
		t.Fatalf("%d bytes kept a warm period after the last reader", b.bufs.freeBytes)
	}

	b.join(root, r1)
	fill(b)
	b.leave(r1)
	b.Close()
	if b.bufs.freeBytes != 0 || b.stopDrop != nil {
		t.Fatalf("after Close: %d bytes kept, drop armed %t", b.bufs.freeBytes, b.stopDrop != nil)
	}
}
