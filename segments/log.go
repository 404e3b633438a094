package segments

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamtier/streamtier/chunk"
)

// Defaults of the rolling limits, as osiris has them.
const (
	DefaultMaxSegmentBytes  = 500_000_000
	DefaultMaxSegmentChunks = 256_000
)

// DefaultIdleClose is how long a Log keeps its active segment and index files open after
// the last append: a log nobody writes holds no file descriptor (docs/performance.md, Scale).
const DefaultIdleClose = 10 * time.Second

// ErrClosed is returned by a Log, or a Reader of it, after Close.
var ErrClosed = errors.New("log closed")

// ErrLocked is returned (wrapped, with the lock file's path) by Open when another Log holds
// the directory: one in another process, or one this process opened and has not closed.
// Two writers on one directory would each recover, append and delete segments under the
// other; Close releases the lock, and so does the death of the process.
var ErrLocked = errors.New("stream directory in use by another process or another open Log (close it first)")

// LockFileName is the file in a stream directory whose flock says a Log has it open for
// appending. A read-only Log (follow mode) neither creates nor takes it: it follows a
// writer that may hold it.
const LockFileName = "streamtier.lock"

// Options configures a Log. The zero value means the defaults.
type Options struct {
	// MaxSegmentBytes rolls to a new segment before a chunk is written once the active
	// segment (file header included) has reached this size. At most math.MaxUint32.
	MaxSegmentBytes int64
	// MaxSegmentChunks rolls to a new segment once the active one holds this many chunks.
	MaxSegmentChunks int
	// FirstOffset is the chunk id of the first chunk of a new, empty log (a replica or a
	// stream whose earlier offsets live elsewhere). Ignored when the directory has segments.
	FirstOffset uint64
	// IdleClose is how long the active segment and index files stay open after the last
	// append (or Sync); they are synced, closed, and reopened by the next Append. 0 means
	// DefaultIdleClose; a negative value keeps them open until Close.
	IdleClose time.Duration
	// ReadOnly opens the directory as a follower of a writer in another process (follow
	// mode): Open creates, writes and truncates nothing and leaves an incomplete tail out of
	// the view instead of repairing it; Refresh extends the view; Append is ErrReadOnly.
	// The rolling limits, FirstOffset and IdleClose do not apply.
	ReadOnly bool
}

func (o Options) withDefaults() (Options, error) {
	if o.IdleClose == 0 {
		o.IdleClose = DefaultIdleClose
	}
	if o.MaxSegmentBytes == 0 {
		o.MaxSegmentBytes = DefaultMaxSegmentBytes
	}
	if o.MaxSegmentChunks == 0 {
		o.MaxSegmentChunks = DefaultMaxSegmentChunks
	}
	if o.MaxSegmentBytes < 0 || o.MaxSegmentBytes > math.MaxUint32 {
		return o, fmt.Errorf("options: MaxSegmentBytes %d: want 1 to %d", o.MaxSegmentBytes, uint32(math.MaxUint32))
	}
	if o.MaxSegmentChunks < 0 {
		return o, fmt.Errorf("options: MaxSegmentChunks %d: want at least 1", o.MaxSegmentChunks)
	}
	return o, nil
}

// segment is the in-memory account of one segment/index pair.
type segment struct {
	name    string // segment file name
	first   uint64 // chunk id in the name, the id of its first chunk
	next    uint64 // one past the last offset of its last chunk (first when empty)
	size    int64  // segment file size, file header included
	chunks  int
	firstTS int64
	lastTS  int64
	lastID  uint64 // chunk id of its last chunk (when chunks > 0)
	lastPos int64  // position of its last chunk (when chunks > 0)
}

func (s *segment) info(active bool) SegmentInfo {
	return SegmentInfo{
		Name: s.name, FirstOffset: s.first, NextOffset: s.next, Size: s.size, Chunks: s.chunks,
		FirstTimestamp: s.firstTS, LastTimestamp: s.lastTS, Active: active,
	}
}

// SegmentInfo describes one segment of the log.
type SegmentInfo struct {
	Name           string // segment file name, e.g. "00000000000000003699.segment"
	FirstOffset    uint64 // chunk id of its first chunk (the number in the name)
	NextOffset     uint64 // one past its last offset; equals FirstOffset when it is empty
	Size           int64  // segment file size in bytes, file header included
	Chunks         int
	FirstTimestamp int64 // of its first chunk, ms; 0 when empty
	LastTimestamp  int64 // of its last chunk, ms; 0 when empty
	Active         bool  // the last segment, the one the writer appends to
}

// span is a written chunk's [id, next) range, kept to resolve commits without I/O.
type span struct{ id, next uint64 }

// maxRecent bounds the chunks remembered above the committed offset; older ones are
// resolved from the index files if a commit ever names them.
const maxRecent = 1 << 16

// Log is an osiris-format stream directory open for appending. It is safe for concurrent
// use by one writer (Append), the broker's commits, retention and many Readers. Only one
// Log may have a directory open for appending at a time: Open takes a lock file in it
// (LockFileName) and refuses a second with ErrLocked until Close.
type Log struct {
	dir  string
	opts Options

	mu       sync.Mutex
	segs     []*segment // oldest first; the last one is active
	segFile  *os.File   // active segment, written with WriteAt; nil while idle-closed
	idxFile  *os.File   // active index; nil while idle-closed
	lastUse  time.Time  // of the active files, for the idle close
	idle     *time.Timer
	idleHook func() // tests: called (mu held) after an idle close
	nextID   uint64
	last     chunk.Header
	hasLast  bool
	broken   error // a failed write left the active files unknown; reopen to recover
	closed   bool
	lock     *dirLock // the directory's lock while open for appending; nil read-only
	commit   commitState
	retainMu sync.Mutex // serialises ApplyRetention (and Refresh)
	// followed and followErr are the outcome of the last Refresh of a read-only log.
	followed  FollowState
	followErr error

	// visible is the committed next offset capped at what is written: a chunk whose id is
	// below it may be read. firstSeg is the first chunk id of the oldest segment; a reader
	// in an older segment has lost it to retention. Both let readers avoid the mutex.
	visible   atomic.Uint64
	firstSeg  atomic.Uint64
	closedFlg atomic.Bool
}

// Open opens the stream directory dir for appending, creating it (and a first, empty
// segment) if needed, and recovers from a crash: see recover.go for what is repaired. Unless
// IdleClose is negative, the active files are closed once recovered and opened by the first
// append: an open log nobody writes holds no descriptor.
func Open(dir string, opts Options) (*Log, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("open log %s: %w", dir, err)
	}
	if opts.ReadOnly {
		return openReadOnly(dir, opts)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("open log %s: %w", dir, err)
	}
	l := &Log{dir: dir, opts: opts, lock: lock}
	if err := l.load(); err != nil {
		return nil, errors.Join(fmt.Errorf("open log %s: %w", dir, err), l.closeFiles(false), lock.unlock())
	}
	l.firstSeg.Store(l.segs[0].first)
	if opts.IdleClose >= 0 {
		// Recovery needed the active files; the first append reopens them. A node opening ten
		// thousand logs at start must not hold two descriptors for each until they idle out.
		// No sync: recovery only truncates, and a truncation lost in a crash is redone by
		// the next Open.
		if err := l.closeFiles(false); err != nil {
			return nil, errors.Join(fmt.Errorf("open log %s: %w", dir, err), lock.unlock())
		}
	}
	return l, nil
}

// touch marks the active files used now and arms the idle close; called with mu held
// while they are open.
func (l *Log) touch() {
	if l.opts.IdleClose < 0 {
		return
	}
	l.lastUse = time.Now()
	if l.idle == nil {
		l.idle = time.AfterFunc(l.opts.IdleClose, l.idleClose)
	}
}

// idleClose runs on the idle timer: it closes the active files once they have not been
// used for IdleClose, or re-arms for the rest of the wait. A timer is no goroutine while it
// waits, so an idle log costs neither a goroutine nor a descriptor.
func (l *Log) idleClose() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.segFile == nil {
		l.idle = nil
		return
	}
	if rest := l.opts.IdleClose - time.Since(l.lastUse); rest > 0 {
		l.idle.Reset(rest)
		return
	}
	l.idle = nil
	if err := l.closeFiles(true); err != nil && l.broken == nil {
		// A failed fsync may have lost appended data: like a failed write, the active files
		// are unknown until the log is reopened (recovery truncates what is not whole).
		l.broken = err
	}
	if l.idleHook != nil {
		l.idleHook()
	}
}

// closeFiles closes the active files (syncing them first when sync is set); called with mu
// held. The files are forgotten even when closing fails.
func (l *Log) closeFiles(sync bool) error {
	if l.segFile == nil {
		return nil
	}
	var errs []error
	for _, f := range []*os.File{l.segFile, l.idxFile} {
		if sync {
			if err := f.Sync(); err != nil {
				errs = append(errs, fmt.Errorf("sync %s: %w", f.Name(), err))
			}
		}
		if err := f.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", f.Name(), err))
		}
	}
	l.segFile, l.idxFile = nil, nil
	return errors.Join(errs...)
}

// openFiles reopens the active segment and index for writing after an idle close; called
// with mu held. Running out of descriptors here is an error matching syscall.EMFILE (or
// ENFILE) with errors.Is: the append fails, nothing is written, a later one may succeed.
func (l *Log) openFiles() error {
	if l.segFile != nil {
		l.touch()
		return nil
	}
	seg := l.segs[len(l.segs)-1]
	sf, err := os.OpenFile(filepath.Join(l.dir, seg.name), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("reopen active segment: %w", err)
	}
	xf, err := os.OpenFile(filepath.Join(l.dir, IndexName(seg.first)), os.O_RDWR, 0)
	if err != nil {
		return errors.Join(fmt.Errorf("reopen active index: %w", err), sf.Close())
	}
	l.segFile, l.idxFile = sf, xf
	l.touch()
	return nil
}

// OpenFiles is how many file descriptors the Log itself holds now: 2 while its active
// files are open, 0 while idle-closed (readers hold their own).
func (l *Log) OpenFiles() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.segFile == nil {
		return 0
	}
	return 2
}

// WriteError is the write failure that broke the log (appends refused until it is
// reopened), nil when none: status reports it, classified (ENOSPC, EMFILE, ...).
func (l *Log) WriteError() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.broken
}

// Dir is the stream directory.
func (l *Log) Dir() string { return l.dir }

// Close syncs and closes the active files. Readers then get ErrClosed and unfired commit
// listeners fire, so that nobody waits for a log that is gone.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	l.closedFlg.Store(true)
	l.commit.fireAll()
	if l.idle != nil {
		l.idle.Stop()
		l.idle = nil
	}
	if err := errors.Join(l.closeFiles(true), l.lock.unlock()); err != nil {
		return fmt.Errorf("close log %s: %w", l.dir, err)
	}
	return nil
}

// Sync flushes the active segment and index to stable storage. Appends do not sync on
// their own: like osiris, the log relies on replication for durability.
func (l *Log) Sync() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if l.segFile == nil {
		return nil // the idle close synced them
	}
	if err := l.segFile.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", l.segFile.Name(), err)
	}
	if err := l.idxFile.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", l.idxFile.Name(), err)
	}
	return nil
}

// FirstOffset is the chunk id of the first chunk of the oldest segment (NextOffset when
// the log holds no chunk).
func (l *Log) FirstOffset() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.segs[0].first
}

// NextOffset is the offset the next appended chunk will get: one past the last offset written.
func (l *Log) NextOffset() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nextID
}

// LastChunk is the header of the last chunk written, false when the log holds none.
func (l *Log) LastChunk() (chunk.Header, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last, l.hasLast
}

// LastChunkID is the chunk id of the last chunk written, false when the log holds none.
func (l *Log) LastChunkID() (uint64, bool) {
	h, ok := l.LastChunk()
	return h.ChunkID, ok
}

// Epoch is the epoch of the last chunk written (0 when the log holds none). Appends must
// not go below it.
func (l *Log) Epoch() uint64 {
	h, _ := l.LastChunk()
	return h.Epoch
}

// Segments describes the segments, oldest first; the last one is active.
func (l *Log) Segments() []SegmentInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]SegmentInfo, len(l.segs))
	for i, s := range l.segs {
		out[i] = s.info(i == len(l.segs)-1)
	}
	return out
}

// chunkBufs recycles encoding buffers of modest size between appends.
var chunkBufs = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledChunk bounds the buffers kept in chunkBufs.
const maxPooledChunk = 4 << 20

// Append writes one chunk at the end of the log and returns its header and location. It
// rolls to a new segment first when the active one has reached a limit. The epoch must not
// be lower than the last chunk's. The chunk is not readable before it is committed. The
// chunk is encoded (and its CRC computed) before the log's lock is taken.
func (l *Log) Append(spec ChunkSpec) (chunk.Header, chunk.Location, error) {
	bp := chunkBufs.Get().(*[]byte)
	raw, h, err := EncodeChunk((*bp)[:0], spec, 0)
	defer func() {
		if cap(raw) <= maxPooledChunk {
			*bp = raw[:0]
			chunkBufs.Put(bp)
		}
	}()
	if err != nil {
		return chunk.Header{}, chunk.Location{}, fmt.Errorf("append to %s: %w", l.dir, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return chunk.Header{}, chunk.Location{}, ErrClosed
	}
	if l.broken != nil {
		return chunk.Header{}, chunk.Location{}, fmt.Errorf("append to %s: an earlier write failed, reopen the log to recover: %w", l.dir, l.broken)
	}
	if l.hasLast && spec.Epoch < l.last.Epoch {
		return chunk.Header{}, chunk.Location{}, fmt.Errorf("append to %s: epoch %d is below the log's epoch %d", l.dir, spec.Epoch, l.last.Epoch)
	}
	h.ChunkID = l.nextID
	setChunkID(raw, h.ChunkID)
	return l.writeChunk(raw, h)
}

// writeChunk writes an encoded chunk and its index record, rolling first if needed. It
// reopens the active files first when the idle close has closed them; every write path
// comes through here.
func (l *Log) writeChunk(raw []byte, h chunk.Header) (chunk.Header, chunk.Location, error) {
	if l.opts.ReadOnly {
		return chunk.Header{}, chunk.Location{}, fmt.Errorf("append to %s: %w", l.dir, ErrReadOnly)
	}
	if err := l.openFiles(); err != nil {
		return chunk.Header{}, chunk.Location{}, fmt.Errorf("append to %s: %w", l.dir, err)
	}
	seg := l.segs[len(l.segs)-1]
	if seg.chunks > 0 && (seg.size >= l.opts.MaxSegmentBytes || seg.chunks >= l.opts.MaxSegmentChunks) {
		if err := l.roll(); err != nil {
			return chunk.Header{}, chunk.Location{}, fmt.Errorf("append to %s: %w", l.dir, err)
		}
		seg = l.segs[len(l.segs)-1]
	}
	pos := seg.size
	if pos > math.MaxUint32 {
		return chunk.Header{}, chunk.Location{}, fmt.Errorf("append to %s: segment %s position %d does not fit an index record", l.dir, seg.name, pos)
	}
	if _, err := l.segFile.WriteAt(raw, pos); err != nil {
		l.broken = err
		return chunk.Header{}, chunk.Location{}, fmt.Errorf("append to %s: write raw %d: %w", l.dir, h.ChunkID, err)
	}
	var rec [IndexRecordSize]byte
	AppendIndexRecord(rec[:0], IndexRecord{ChunkID: h.ChunkID, Timestamp: h.Timestamp, Epoch: h.Epoch, Position: uint32(pos), Type: h.Type})
	if _, err := l.idxFile.WriteAt(rec[:], FileHeaderSize+int64(seg.chunks)*IndexRecordSize); err != nil {
		l.broken = err
		return chunk.Header{}, chunk.Location{}, fmt.Errorf("append to %s: write index record of raw %d: %w", l.dir, h.ChunkID, err)
	}
	if seg.chunks == 0 {
		seg.firstTS = h.Timestamp
	}
	seg.chunks++
	seg.size += int64(len(raw))
	seg.next = h.NextID()
	seg.lastTS = h.Timestamp
	seg.lastID = h.ChunkID
	seg.lastPos = pos
	l.nextID = h.NextID()
	l.last, l.hasLast = h, true
	l.commit.written(h, l.nextID)
	l.publish()
	return h, chunk.Location{Segment: seg.name, Position: pos, Size: int64(len(raw))}, nil
}

// roll closes the active segment and starts a new one named after the next chunk id.
func (l *Log) roll() error {
	seg, idx, err := createSegment(l.dir, l.nextID)
	if err != nil {
		return err
	}
	err = l.closeFiles(false)
	l.segFile, l.idxFile = seg, idx
	l.segs = append(l.segs, &segment{name: SegmentName(l.nextID), first: l.nextID, next: l.nextID, size: FileHeaderSize})
	if err != nil {
		return fmt.Errorf("roll: %w", err)
	}
	return nil
}

// createSegment creates the segment file, then the index file, of a new empty segment,
// each holding only its file header, and returns them open for writing.
func createSegment(dir string, id uint64) (seg, idx *os.File, err error) {
	seg, err = createWithHeader(filepath.Join(dir, SegmentName(id)), segmentFileHeader)
	if err != nil {
		return nil, nil, err
	}
	idx, err = createWithHeader(filepath.Join(dir, IndexName(id)), indexFileHeader)
	if err != nil {
		return nil, nil, errors.Join(err, seg.Close())
	}
	return seg, idx, nil
}

func createWithHeader(path string, header []byte) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	if _, err := f.WriteAt(header, 0); err != nil {
		return nil, errors.Join(fmt.Errorf("write header of %s: %w", path, err), f.Close())
	}
	return f, nil
}

// publish stores what lock-free readers look at; called with mu held after any change.
func (l *Log) publish() {
	v := l.commit.next
	if v > l.nextID {
		v = l.nextID
	}
	l.visible.Store(v)
	l.commit.fire(v)
}

// segmentAt is the index in l.segs of the segment holding offset off (the last segment
// whose first chunk id is at most off). Called with mu held and off >= l.segs[0].first.
func (l *Log) segmentAt(off uint64) int {
	return sort.Search(len(l.segs), func(i int) bool { return l.segs[i].first > off }) - 1
}
