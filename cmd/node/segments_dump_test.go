package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const realDir = "../../segments/testdata/rabbitmq-3.10.8-amqp"

func dump(t *testing.T, args ...string) (code int, lines []map[string]any, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(append([]string{"segments", "dump"}, args...), &out, &errb)
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	return code, lines, errb.String()
}

func keys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func copyDir(t *testing.T, src string) string {
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

func TestDumpRealDirectory(t *testing.T) {
	code, lines, stderr := dump(t, realDir)
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if len(lines) != 457 {
		t.Fatalf("%d lines, want 456 chunks and a summary", len(lines))
	}
	chunkKeys := []string{"bloom_size", "chunk_id", "crc_ok", "data_len", "entries", "epoch", "position", "records", "segment", "size", "timestamp", "trailer_len", "type"}
	types := map[string]int{}
	var next float64
	for i, m := range lines[:456] {
		if !slices.Equal(keys(m), chunkKeys) {
			t.Fatalf("line %d keys %v", i, keys(m))
		}
		if m["crc_ok"] != true || m["chunk_id"].(float64) != next {
			t.Fatalf("line %d: %v", i, m)
		}
		next += m["records"].(float64)
		types[m["type"].(string)]++
	}
	if types["user"] != 450 || types["tracking_snapshot"] != 6 {
		t.Fatalf("types %v", types)
	}
	first := lines[0]
	if first["segment"] != "00000000000000000000.segment" || first["position"].(float64) != 8 || first["size"].(float64) != 2557 ||
		first["entries"].(float64) != 9 || first["data_len"].(float64) != 2466 || first["trailer_len"].(float64) != 43 || first["epoch"].(float64) != 1 {
		t.Fatalf("first chunk %v", first)
	}
	sum := lines[456]
	if !slices.Equal(keys(sum), []string{"bytes", "chunks", "first_offset", "next_offset", "segments", "summary"}) {
		t.Fatalf("summary keys %v", keys(sum))
	}
	if sum["summary"] != true || sum["first_offset"].(float64) != 0 || sum["next_offset"].(float64) != 25006 ||
		sum["chunks"].(float64) != 456 || sum["segments"].(float64) != 7 || sum["bytes"].(float64) != 6891361 {
		t.Fatalf("summary %v", sum)
	}
}

func TestDumpBadCRC(t *testing.T) {
	dir := copyDir(t, realDir)
	seg := filepath.Join(dir, "00000000000000003699.segment")
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[8+48+10] ^= 0xff // inside the data of the segment's first chunk, id 3699
	if err := os.WriteFile(seg, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, lines, stderr := dump(t, dir)
	if code != 1 || !strings.Contains(stderr, "CRC") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if len(lines) != 457 || lines[456]["summary"] != true {
		t.Fatalf("%d lines", len(lines))
	}
	bad := 0
	for _, m := range lines[:456] {
		if m["crc_ok"] == false {
			bad++
			if m["chunk_id"].(float64) != 3699 {
				t.Fatalf("chunk %v reported bad", m["chunk_id"])
			}
		}
	}
	if bad != 1 {
		t.Fatalf("%d chunks reported bad", bad)
	}
}

func TestDumpBadInput(t *testing.T) {
	truncated := copyDir(t, realDir)
	last := filepath.Join(truncated, "00000000000000022366.segment")
	if err := os.Truncate(last, 5000); err != nil {
		t.Fatal(err)
	}
	badIndex := copyDir(t, realDir)
	idx := filepath.Join(badIndex, "00000000000000007576.index")
	f, err := os.OpenFile(idx, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0xff}, 8+29+7) // second record's chunk id
	f.Close()
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, []byte("x"), 0o644)
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"truncated segment", []string{truncated}, []string{"00000000000000022366.segment", "position", "truncated"}},
		{"index disagrees", []string{badIndex}, []string{"00000000000000007576.index", "byte 37"}},
		{"not a directory", []string{file}, []string{file, "not a directory"}},
		{"missing", []string{filepath.Join(t.TempDir(), "nope")}, []string{"nope"}},
		{"empty directory", []string{t.TempDir()}, []string{"not a stream directory"}},
		{"no argument", nil, []string{"usage"}},
		{"two arguments", []string{realDir, realDir}, []string{"usage"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, lines, stderr := dump(t, c.args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2", code)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Fatalf("stderr %q does not name %q", stderr, w)
				}
			}
			for _, m := range lines {
				if m["summary"] == true {
					t.Fatal("a summary after an error")
				}
			}
		})
	}
	var out, errb bytes.Buffer
	if code := run([]string{"nonsense"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "usage") {
		t.Fatalf("unknown command: exit %d, %q", code, errb.String())
	}
}
