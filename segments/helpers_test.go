package segments

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/streamtier/streamtier/chunk"
)

// realDir is the RabbitMQ 3.10.8 stream directory (read-only).
const realDir = "testdata/rabbitmq-3.10.8-amqp"

// copyDir copies the files of src into a fresh temporary directory, writable.
func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// dirFiles returns every file of dir with its bytes, except the lock file (a writer's, not
// part of the osiris format).
func dirFiles(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range ents {
		if e.Name() == LockFileName {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}

// sameFiles fails unless the two directories hold the same files byte for byte.
func sameFiles(t testing.TB, want, got string) {
	t.Helper()
	w, g := dirFiles(t, want), dirFiles(t, got)
	if len(w) != len(g) {
		t.Fatalf("%s has %d files, %s has %d", want, len(w), got, len(g))
	}
	for name, wb := range w {
		gb, ok := g[name]
		if !ok {
			t.Fatalf("%s missing in %s", name, got)
		}
		if !bytes.Equal(wb, gb) {
			i := 0
			for i < len(wb) && i < len(gb) && wb[i] == gb[i] {
				i++
			}
			t.Fatalf("%s differs at byte %d (lengths %d and %d)", name, i, len(wb), len(gb))
		}
	}
}

// goldenChunk is one line of the listing an independent Python reader made of realDir.
type goldenChunk struct {
	segment          string
	position         int64
	chunkID          uint64
	typ              chunk.Type
	epoch            uint64
	timestamp        int64
	entries, records uint64
	dataLen, trailer uint64
	size             int64
	crc              uint32
}

func loadGolden(t testing.TB) []goldenChunk {
	t.Helper()
	f, err := os.Open("testdata/rabbitmq-3.10.8-amqp.chunks.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []goldenChunk
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Fields(line)
		if len(fs) != 12 {
			t.Fatalf("golden line %q", line)
		}
		n := func(i int) uint64 {
			v, err := strconv.ParseUint(fs[i], 10, 64)
			if err != nil {
				t.Fatalf("golden line %q field %d: %v", line, i, err)
			}
			return v
		}
		crc, err := strconv.ParseUint(fs[11], 16, 32)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, goldenChunk{segment: fs[0], position: int64(n(1)), chunkID: n(2), typ: chunk.Type(n(3)), epoch: n(4),
			timestamp: int64(n(5)), entries: n(6), records: n(7), dataLen: n(8), trailer: n(9), size: int64(n(10)), crc: uint32(crc)})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkGolden fails unless h and loc are what the golden line says.
func checkGolden(t testing.TB, g goldenChunk, h chunk.Header, loc chunk.Location) {
	t.Helper()
	if h.ChunkID != g.chunkID || h.Type != g.typ || h.Epoch != g.epoch || h.Timestamp != g.timestamp ||
		uint64(h.Entries) != g.entries || uint64(h.Records) != g.records || uint64(h.DataLen) != g.dataLen ||
		uint64(h.TrailerLen) != g.trailer || h.DataCRC != g.crc || h.BloomSize != 0 ||
		loc.Segment != g.segment || loc.Position != g.position || loc.Size != g.size {
		t.Fatalf("chunk %+v at %+v, golden %+v", h, loc, g)
	}
}

// userChunk is a small user chunk spec whose bodies encode i, for tests.
func userChunk(epoch uint64, ts int64, bodies ...string) ChunkSpec {
	es := make([]Entry, len(bodies))
	for i, b := range bodies {
		es[i] = SimpleEntry([]byte(b))
	}
	return ChunkSpec{Type: chunk.TypeUser, Epoch: epoch, Timestamp: ts, Entries: es}
}

// mustOpen opens dir or fails the test.
func mustOpen(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// appendN appends n chunks of one to three records with predictable bodies.
func appendN(t testing.TB, l *Log, n int, epoch uint64) []chunk.Header {
	t.Helper()
	var hs []chunk.Header
	for i := range n {
		bodies := make([]string, 1+i%3)
		for j := range bodies {
			bodies[j] = fmt.Sprintf("chunk-%d-record-%d-%s", i, j, strings.Repeat("x", i%50))
		}
		h, _, err := l.Append(userChunk(epoch, int64(1000+i), bodies...))
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	return hs
}
