package s3io_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// benchTarget is the fragment size of the benchmarks: the default target.
const benchTarget = 64 << 20

// benchLog writes n fragments' worth of load into dir with the real local log and load
// generator, drains it with the real reader and cuts it with the real assembly.
func benchLog(b *testing.B, dir string, n int, minData, maxData int) []fragment.Description {
	b.Helper()
	log, err := segments.Open(dir, segments.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer log.Close()
	gen, err := loadgen.New(loadgen.Config{Seed: 42, MinDataBytes: minData, MaxDataBytes: maxData, TrackingEvery: 100})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := loadgen.Write(context.Background(), log, gen, loadgen.Limit{Bytes: int64(n)*benchTarget + 1<<20}, loadgen.WriteOptions{Commit: true}); err != nil {
		b.Fatal(err)
	}
	if err := log.Sync(); err != nil {
		b.Fatal(err)
	}
	r, err := log.NewReader(log.FirstOffset())
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	asm, err := fragment.NewAssembly(benchTarget)
	if err != nil {
		b.Fatal(err)
	}
	var frags []fragment.Description
	for len(frags) < n {
		h, loc, err := r.Next()
		if err != nil {
			b.Fatalf("drain after %d fragments: %v", len(frags), err)
		}
		cut, err := asm.Add(h, loc)
		if err != nil {
			b.Fatal(err)
		}
		if cut {
			d, _ := asm.Cut()
			frags = append(frags, d)
		}
	}
	return frags
}

// byteCounter counts bytes read through segment files opened by a store.
type byteCounter struct{ n atomic.Int64 }

type countedReaderAt struct {
	r io.ReaderAt
	c *byteCounter
}

func (c countedReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.c.n.Add(int64(n))
	return n, err
}

func (c *byteCounter) wrap(st *s3io.Store) {
	s3io.WrapSegments(st, func(_ string, r io.ReaderAt) io.ReaderAt { return countedReaderAt{r, c} })
}

// deleteKeys removes benchmark objects (outside the timed region) so the server's disk
// does not fill.
func deleteKeys(b *testing.B, st *s3io.Store, keys ...string) {
	b.Helper()
	if failed, err := st.DeleteObjects(context.Background(), keys); err != nil || len(failed) > 0 {
		b.Fatalf("delete: %v %v", err, failed)
	}
}

// BenchmarkUpload64MiB compares, against the same server in the same run, the streaming
// fragment upload with a PutObject of the same bytes from memory (same request shape:
// CRC-32 header, unsigned payload) and with the SDK's default handling of a seekable
// file body (which reads the body once to checksum it and once to send it).
//
//	go test -run '^$' -bench Upload64MiB -benchtime 8x ./s3io/
func BenchmarkUpload64MiB(b *testing.B) {
	for _, tls := range []bool{false, true} {
		name := "http"
		if tls {
			name = "https"
		}
		b.Run(name, func(b *testing.B) { benchUpload(b, tls) })
	}
}

func benchUpload(b *testing.B, tls bool) {
	srv := s3test.Start(b, s3test.Options{TLS: tls})
	cfg := srv.Config()
	cfg.RequestTimeout = time.Minute
	st := newStore(b, cfg)
	dir := b.TempDir()
	d := benchLog(b, dir, 1, 0, 0)[0]
	size := d.ObjectSize()
	ctx := context.Background()

	b.Run("fragment", func(b *testing.B) {
		var counter byteCounter
		counter.wrap(st)
		b.SetBytes(size)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			key := fmt.Sprintf("bench/fragment/%d", i)
			if _, err := st.PutFragment(ctx, key, dir, d); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			deleteKeys(b, st, key)
			b.StartTimer()
		}
		b.ReportMetric(float64(counter.n.Load())/float64(int64(b.N)*size), "read/uploaded-byte")
		b.ReportMetric(float64(counter.n.Load())/float64(int64(b.N)*int64(d.Size)), "read/chunk-byte")
		b.ReportMetric(float64(len(d.Chunks)), "chunks")
	})

	b.Run("memory", func(b *testing.B) {
		obj, err := s3test.ExpectedObject(dir, d)
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(size)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			key := fmt.Sprintf("bench/memory/%d", i)
			if err := st.PutObject(ctx, key, obj); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			deleteKeys(b, st, key)
			b.StartTimer()
		}
	})

	b.Run("sdk-default-seekable-file", func(b *testing.B) {
		obj, err := s3test.ExpectedObject(dir, d)
		if err != nil {
			b.Fatal(err)
		}
		path := filepath.Join(b.TempDir(), "object")
		if err := os.WriteFile(path, obj, 0o644); err != nil {
			b.Fatal(err)
		}
		obj = nil
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		var counter byteCounter
		client := s3io.RawClient(st)
		b.SetBytes(size)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			key := fmt.Sprintf("bench/sdk/%d", i)
			body := &countingReadSeeker{r: io.NewSectionReader(f, 0, size), c: &counter}
			if _, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(st.Bucket()), Key: aws.String(key), Body: body}); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			deleteKeys(b, st, key)
			b.StartTimer()
		}
		b.ReportMetric(float64(counter.n.Load())/float64(int64(b.N)*size), "read/uploaded-byte")
	})
}

// countingReadSeeker counts bytes read through a seekable body.
type countingReadSeeker struct {
	r *io.SectionReader
	c *byteCounter
}

func (c *countingReadSeeker) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.c.n.Add(int64(n))
	return n, err
}

func (c *countingReadSeeker) Seek(off int64, whence int) (int64, error) {
	return c.r.Seek(off, whence)
}

// BenchmarkUploadInterleaved alternates one fragment upload and one in-memory PutObject of
// the same 64 MiB per iteration, so both see the same server and machine state, and
// reports their throughputs and ratio.
//
//	go test -run '^$' -bench UploadInterleaved -benchtime 10x ./s3io/
func BenchmarkUploadInterleaved(b *testing.B) {
	for _, tls := range []bool{false, true} {
		name := "http"
		if tls {
			name = "https"
		}
		b.Run(name, func(b *testing.B) { benchInterleaved(b, tls) })
	}
}

func benchInterleaved(b *testing.B, tls bool) {
	srv := s3test.Start(b, s3test.Options{TLS: tls})
	cfg := srv.Config()
	cfg.RequestTimeout = time.Minute
	st := newStore(b, cfg)
	dir := b.TempDir()
	d := benchLog(b, dir, 1, 0, 0)[0]
	obj, err := s3test.ExpectedObject(dir, d)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var fragTime, memTime time.Duration
	b.SetBytes(2 * d.ObjectSize())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		fk, mk := fmt.Sprintf("bench/i/f%d", i), fmt.Sprintf("bench/i/m%d", i)
		// Alternate which goes first, so neither always follows a delete.
		first, second := func() error { _, err := st.PutFragment(ctx, fk, dir, d); return err }, func() error { return st.PutObject(ctx, mk, obj) }
		ft, mt := &fragTime, &memTime
		if i%2 == 1 {
			first, second, ft, mt = second, first, mt, ft
		}
		t0 := time.Now()
		if err := first(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := second(); err != nil {
			b.Fatal(err)
		}
		*ft += t1.Sub(t0)
		*mt += time.Since(t1)
		b.StopTimer()
		deleteKeys(b, st, fk, mk)
		b.StartTimer()
	}
	mb := float64(d.ObjectSize()) * float64(b.N) / 1e6
	b.ReportMetric(mb/fragTime.Seconds(), "fragment-MB/s")
	b.ReportMetric(mb/memTime.Seconds(), "memory-MB/s")
	b.ReportMetric(memTime.Seconds()/fragTime.Seconds(), "fragment/memory")
}

// BenchmarkConcurrentUploadRSS runs 4 concurrent 64 MiB fragment uploads and reports the
// process's peak resident set during them (VmHWM, reset through /proc/self/clear_refs just
// before) and the peak Go heap in use (sampled). Run it on its own so no other benchmark's
// buffers are resident:
//
//	go test -run '^$' -bench ConcurrentUploadRSS -benchtime 3x ./s3io/
func BenchmarkConcurrentUploadRSS(b *testing.B) {
	for _, tls := range []bool{false, true} {
		name := "http"
		if tls {
			name = "https"
		}
		b.Run(name, func(b *testing.B) { benchRSS(b, tls) })
	}
}

func benchRSS(b *testing.B, tls bool) {
	const parallel = 4
	srv := s3test.Start(b, s3test.Options{TLS: tls})
	cfg := srv.Config()
	cfg.RequestTimeout = time.Minute
	st := newStore(b, cfg)
	dir := b.TempDir()
	frags := benchLog(b, dir, parallel, 0, 0)
	ctx := context.Background()

	runtime.GC()
	debug.FreeOSMemory()
	before := procStatusKiB(b, "VmRSS")
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Skipf("cannot reset the peak RSS counter: %v", err)
	}
	stop := make(chan struct{})
	var peakHeap atomic.Uint64
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() { // owned by this benchmark: stops when stop closes
		defer sampler.Done()
		var ms runtime.MemStats
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peakHeap.Load() {
				peakHeap.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	var total int64
	for _, d := range frags {
		total += d.ObjectSize()
	}
	b.SetBytes(total)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var wg sync.WaitGroup
		errs := make([]error, parallel)
		for p, d := range frags {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[p] = st.PutFragment(ctx, fmt.Sprintf("bench/rss/%d-%d", i, p), dir, d)
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		for p := range frags {
			deleteKeys(b, st, fmt.Sprintf("bench/rss/%d-%d", i, p))
		}
		b.StartTimer()
	}
	b.StopTimer()
	close(stop)
	sampler.Wait()
	b.ReportMetric(float64(procStatusKiB(b, "VmHWM"))/1024, "peak-RSS-MiB")
	b.ReportMetric(float64(before)/1024, "RSS-before-MiB")
	b.ReportMetric(float64(peakHeap.Load())/(1<<20), "peak-heap-inuse-MiB")
}

// procStatusKiB reads a "Vm..." line of /proc/self/status, in KiB.
func procStatusKiB(b *testing.B, field string) int64 {
	b.Helper()
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skipf("no /proc/self/status: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kib
		}
	}
	b.Fatalf("%s not in /proc/self/status", field)
	return 0
}
