package s3io

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/segments"
)

// PutInfo reports a fragment upload.
type PutInfo struct {
	Key        string
	ObjectSize int64  // bytes uploaded: 8 + S + 20 x chunks
	CRC32      uint32 // whole-object CRC-32 sent in x-amz-checksum-crc32 and verified by the server
	ETag       string
	// ChunkBytesRead counts bytes read from segment files while streaming (S when it succeeds).
	ChunkBytesRead int64
	// CRCBytesRead counts bloom filter and trailer bytes read before the PUT to compute the CRC.
	CRCBytesRead int64
	Duration     time.Duration
}

// crcBufSize bounds the buffer used to read bloom filters and trailers for the CRC.
const crcBufSize = 16 << 10

// fragmentUpload is a fragment ready to stream: its segment files open and its object CRC
// known. Splitting preparation from sending lets a test corrupt a file in between.
type fragmentUpload struct {
	d        fragment.Description
	files    map[string]segmentFile
	crc      uint32
	crcBytes int64
}

func (u *fragmentUpload) close() {
	for _, f := range u.files {
		f.Close()
	}
}

// PutFragment uploads the fragment d of the stream directory dir as the object key with one
// whole-object PUT: "OSIF"+version, the chunk bytes read once from the segment files in
// bounded pieces, then the index records. Content-Length is 8 + S + 20 x chunks and the
// CRC-32 of the whole object, computed beforehand from the chunk headers' data CRCs and the
// few bytes around them, is sent up front for the server to verify. While bytes stream,
// every chunk header and data CRC is checked against d; a mismatch aborts the request, so a
// corrupt chunk never lands in S3. A deleted segment is ClassSegmentGone (segments.ErrSegmentGone).
// An aborted request stores no whole object, but a server may keep what it received of it
// under key, even after PutFragment returned: keys are never reused (a fresh uid per
// attempt), so that is garbage no manifest names, for gc.
func (s *Store) PutFragment(ctx context.Context, key, dir string, d fragment.Description) (PutInfo, error) {
	if err := checkKey(key); err != nil {
		return PutInfo{}, err
	}
	u, err := s.prepareFragment(dir, d)
	if err != nil {
		return PutInfo{}, fmt.Errorf("put fragment s3://%s/%s: %w", s.cfg.Bucket, key, err)
	}
	defer u.close()
	return s.sendFragment(ctx, key, u)
}

// prepareFragment checks d, opens its segment files and computes the object CRC.
func (s *Store) prepareFragment(dir string, d fragment.Description) (*fragmentUpload, error) {
	if err := fragment.CheckDescription(d); err != nil {
		return nil, err
	}
	u := &fragmentUpload{d: d, files: map[string]segmentFile{}}
	for _, sp := range d.Spans {
		if _, ok := u.files[sp.Segment]; ok {
			continue
		}
		f, err := s.openSegment(dir, sp.Segment)
		if err != nil {
			u.close()
			if errors.Is(err, segments.ErrSegmentGone) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %w", ErrLocalRead, err)
		}
		u.files[sp.Segment] = f
	}
	buf := make([]byte, crcBufSize)
	crc, err := fragment.ObjectCRC(d, func(seg string, off, n int64, crc uint32) (uint32, error) {
		for n > 0 {
			p := buf[:min(n, int64(len(buf)))]
			if err := readFull(u.files[seg], seg, p, off); err != nil {
				return 0, err
			}
			u.crcBytes += int64(len(p))
			crc = crc32.Update(crc, crc32.IEEETable, p)
			off += int64(len(p))
			n -= int64(len(p))
		}
		return crc, nil
	})
	if err != nil {
		u.close()
		return nil, err
	}
	u.crc = crc
	return u, nil
}

// readFull reads len(p) bytes of segment seg at off. A segment that ends early was cut short
// under the upload: its range is gone locally, like a deleted segment.
func readFull(f segmentFile, seg string, p []byte, off int64) error {
	n, err := f.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return fmt.Errorf("segment %s ends before byte %d: %w", seg, off+int64(len(p)), segments.ErrSegmentGone)
	}
	return fmt.Errorf("%w %s at %d: %w", ErrLocalRead, seg, off, err)
}

// sendFragment streams a prepared fragment in one PUT.
func (s *Store) sendFragment(ctx context.Context, key string, u *fragmentUpload) (PutInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.TransferTimeout)
	defer cancel()
	size := u.d.ObjectSize()
	body := newFragmentBody(u)
	start := time.Now()
	out, err := s.client.PutObject(ctx, s.putInput(key, body, size, u.crc), unsignedPayload)
	// The transport may still hold the body after an early answer: read its state under
	// lock. A body that failed locally (corrupt chunk, deleted or unreadable segment) is the
	// cause.
	st := body.state()
	err = streamedOutcome(out, err, st.phase == phaseDone, st.sent, size, u.crc, st.err)
	dur := time.Since(start)
	s.metrics.observe(OpPutFragment, key, dur, st.sent, err)
	info := PutInfo{Key: key, ObjectSize: size, CRC32: u.crc, ChunkBytesRead: st.read, CRCBytesRead: u.crcBytes, Duration: dur}
	if err != nil {
		return info, fmt.Errorf("put fragment s3://%s/%s (offsets %d-%d, %d bytes): %w", s.cfg.Bucket, key, u.d.FirstOffset, u.d.NextOffset, size, err)
	}
	info.ETag = aws.ToString(out.ETag)
	return info, nil
}

// Body phases.
const (
	phaseHeader = iota
	phaseChunks
	phaseIndex
	phaseDone
)

// fragmentBody is the PUT body of a fragment: an io.Reader (deliberately not seekable, so
// the SDK cannot read it twice) that fills the caller's buffer straight from the segment
// files with ReadAt and checks every chunk as it passes. It holds no buffer of its own.
type fragmentBody struct {
	mu     sync.Mutex // the transport's writer goroutine reads; sendFragment inspects
	u      *fragmentUpload
	phase  int
	hdr    []byte
	hdrOff int
	span   int
	pos    int64 // position in the current span's segment file
	verify *fragment.ChunkVerifier
	rec    int
	recBuf [fragment.IndexRecordSize]byte
	recOff int
	read   int64 // bytes read from segment files
	sent   int64 // bytes handed to the transport
	err    error
}

func newFragmentBody(u *fragmentUpload) *fragmentBody {
	return &fragmentBody{
		u:      u,
		hdr:    fragment.AppendObjectHeader(nil),
		pos:    u.d.Spans[0].Start,
		verify: fragment.NewChunkVerifier(u.d.Chunks),
	}
}

// bodyState is what sendFragment learns from the body after the request.
type bodyState struct {
	phase      int
	read, sent int64
	err        error
}

func (b *fragmentBody) state() bodyState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bodyState{phase: b.phase, read: b.read, sent: b.sent, err: b.err}
}

// Read fills p with the next body bytes. A local failure is sticky and returned without the
// bytes of the failing piece, so nothing that failed a check is handed to the transport.
func (b *fragmentBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return 0, b.err
	}
	n := 0
	for n < len(p) {
		switch b.phase {
		case phaseHeader:
			c := copy(p[n:], b.hdr[b.hdrOff:])
			b.hdrOff += c
			n += c
			if b.hdrOff == len(b.hdr) {
				b.phase = phaseChunks
			}
		case phaseChunks:
			sp := b.u.d.Spans[b.span]
			piece := p[n : n+int(min(int64(len(p)-n), sp.End-b.pos))]
			if err := readFull(b.u.files[sp.Segment], sp.Segment, piece, b.pos); err != nil {
				b.err = err
				return 0, err
			}
			b.read += int64(len(piece))
			if _, err := b.verify.Write(piece); err != nil {
				b.err = err
				return 0, err
			}
			b.pos += int64(len(piece))
			n += len(piece)
			if b.pos == sp.End {
				b.span++
				if b.span < len(b.u.d.Spans) {
					b.pos = b.u.d.Spans[b.span].Start
					continue
				}
				if err := b.verify.Done(); err != nil {
					b.err = err
					return 0, err
				}
				b.phase = phaseIndex
			}
		case phaseIndex:
			if b.recOff == 0 {
				fragment.AppendIndexRecord(b.recBuf[:0], b.u.d.Chunks[b.rec].IndexRecord())
			}
			c := copy(p[n:], b.recBuf[b.recOff:])
			b.recOff += c
			n += c
			if b.recOff == len(b.recBuf) {
				b.rec, b.recOff = b.rec+1, 0
				if b.rec == len(b.u.d.Chunks) {
					b.phase = phaseDone
				}
			}
		case phaseDone:
			b.sent += int64(n)
			if n == 0 {
				return 0, io.EOF
			}
			return n, nil
		}
	}
	b.sent += int64(n)
	return n, nil
}
