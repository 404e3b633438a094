package tests

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/gc"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// env is one test's world: a real etcd, a real S3 server (optionally behind the fault
// injector) and a node running on them.
type env struct {
	t     *testing.T
	etcd  *metadata.Embedded
	meta  *metadata.Store
	s3srv *s3test.Server
	inj   *s3test.Injector
	s3cfg s3io.Config
	store *s3io.Store
	node  *actors.Node
	cfg   actors.Config
}

type envOptions struct {
	faults bool // put the fault injector between the node and S3
	node   actors.Config
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	e := &env{t: t}
	e.etcd = etcdtest.Start(t)
	e.meta = etcdtest.Store(t, e.etcd)
	e.s3srv = s3test.Start(t, s3test.Options{})
	e.s3cfg = e.s3srv.NewBucket(t)
	if o.faults {
		e.inj = s3test.NewInjector(t, e.s3srv)
		cfg := e.inj.Config()
		cfg.Bucket = e.s3cfg.Bucket
		e.s3cfg = cfg
	}
	ctx := context.Background()
	var err error
	if e.store, err = s3io.NewStore(ctx, e.s3cfg); err != nil {
		t.Fatalf("s3 store: %v", err)
	}
	e.cfg = o.node
	e.cfg.Logger = testLogger(t.Name())
	e.startNode()
	return e
}

func (e *env) startNode() {
	e.t.Helper()
	n, err := actors.Start(context.Background(), e.cfg, e.store, e.meta)
	if err != nil {
		e.t.Fatalf("start node: %v", err)
	}
	e.node = n
	e.t.Cleanup(func() { e.stopNode() })
}

func (e *env) stopNode() {
	if e.node == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.node.Stop(ctx); err != nil {
		e.t.Errorf("stop node: %v", err)
	}
	e.node = nil
}

// genLog writes a deterministic load into a new log in dir and commits all of it.
func genLog(t testing.TB, dir string, cfg loadgen.Config, limit loadgen.Limit, opts segments.Options) *segments.Log {
	t.Helper()
	lg, err := segments.Open(dir, opts)
	if err != nil {
		t.Fatalf("open log: %v", err)
	}
	t.Cleanup(func() { lg.Close() })
	g, err := loadgen.New(cfg)
	if err != nil {
		t.Fatalf("loadgen: %v", err)
	}
	if _, err := loadgen.Write(context.Background(), lg, g, limit, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatalf("write load: %v", err)
	}
	return lg
}

// remote reads the persisted manifest of stream through etcd and S3.
func (e *env) remote(stream string) (manifest.Manifest, metadata.ManifestRecord, int64) {
	e.t.Helper()
	ctx := context.Background()
	var rec metadata.ManifestRecord
	var rev int64
	var body []byte
	for attempt := 1; ; attempt++ {
		var found bool
		var err error
		rec, rev, found, err = e.meta.ReadManifest(ctx, stream)
		if err != nil || !found {
			e.t.Fatalf("read manifest record of %s: found=%t err=%v", stream, found, err)
		}
		body, err = e.store.GetObject(ctx, rec.RootKey(prefix(e.cfg), stream))
		if err == nil {
			break
		}
		// A writer persisting meanwhile replaces the root and the reaper deletes the old
		// one: read the record again; a missing root the record still names is a failure.
		if _, now, _, rerr := e.meta.ReadManifest(ctx, stream); !s3io.IsNotFound(err) || rerr != nil || now == rev || attempt == 10 {
			e.t.Fatalf("get root of %s (revision %d): %v", stream, rev, err)
		}
	}
	m, err := manifest.DecodeRoot(body)
	if err != nil {
		e.t.Fatalf("decode root of %s: %v", stream, err)
	}
	if m.NextOffset != rec.NextOffset || m.FirstOffset != rec.FirstOffset || m.TotalSize != rec.TotalSize || m.FirstTimestamp != rec.FirstTimestamp {
		e.t.Fatalf("root and etcd record of %s disagree: root [%d,%d) size %d ts %d, record [%d,%d) size %d ts %d",
			stream, m.FirstOffset, m.NextOffset, m.TotalSize, m.FirstTimestamp, rec.FirstOffset, rec.NextOffset, rec.TotalSize, rec.FirstTimestamp)
	}
	return m, rec, rev
}

func prefix(c actors.Config) string {
	if c.KeyPrefix == "" {
		return manifest.DefaultKeyPrefix
	}
	return c.KeyPrefix
}

// locate finds the key of the object en of stream names (entries do not carry the
// uploader's epoch), failing the test when it cannot.
func (e *env) locate(stream string, en manifest.Entry) string {
	e.t.Helper()
	key, err := e.store.LocateEntry(context.Background(), prefix(e.cfg), stream, en)
	if err != nil {
		e.t.Fatalf("locate %s %s at %d: %v", stream, en.Kind, en.FirstOffset, err)
	}
	return key
}

func (e *env) fetcher(stream string) manifest.GroupFetcher {
	return func(en manifest.Entry) ([]manifest.Entry, error) {
		key, err := e.store.LocateEntry(context.Background(), prefix(e.cfg), stream, en)
		if err != nil {
			return nil, err
		}
		body, err := e.store.GetObject(context.Background(), key)
		if err != nil {
			return nil, err
		}
		_, children, err := manifest.DecodeGroup(body)
		return children, err
	}
}

// verifyRemote walks the persisted manifest of stream and checks that every offset in
// [first, next) is in exactly one fragment object whose chunks are byte for byte those of
// the reference log. It returns the manifest and the number of fragments.
func (e *env) verifyRemote(stream string, ref *segments.Log) (manifest.Manifest, int) {
	e.t.Helper()
	m, rec, _ := e.remote(stream)
	fetch := e.fetcher(stream)
	if err := manifest.CheckTree(m, fetch); err != nil {
		e.t.Fatalf("manifest tree of %s: %v", stream, err)
	}
	if len(m.Entries) == 0 {
		return m, 0
	}
	rd, err := ref.NewReader(m.FirstOffset)
	if err != nil {
		e.t.Fatalf("reference reader at %d: %v", m.FirstOffset, err)
	}
	defer rd.Close()
	it := manifest.Iterate(m, m.FirstOffset, fetch)
	next, frags := uint64(0), 0
	for {
		fr, ok, err := it.Next()
		if err != nil {
			e.t.Fatalf("iterate %s: %v", stream, err)
		}
		if !ok {
			break
		}
		frags++
		key := e.locate(stream, fr.Entry)
		if k, err := manifest.ParseKey(prefix(e.cfg), key); err != nil || k.KeyVersion != 2 || k.Epoch > rec.Epoch {
			e.t.Fatalf("fragment key %s: want a version 2 key of an epoch up to the record's %d (%+v, %v)", key, rec.Epoch, k, err)
		}
		obj, err := e.store.ReadFragment(context.Background(), key)
		if err != nil {
			e.t.Fatalf("read fragment at %d: %v", fr.Entry.FirstOffset, err)
		}
		if frags > 1 && fr.Entry.FirstOffset != next {
			e.t.Fatalf("fragment at %d does not follow the previous one ending at %d", fr.Entry.FirstOffset, next)
		}
		for _, ch := range obj.Layout.Chunks {
			h, loc, err := rd.Next()
			if err != nil {
				e.t.Fatalf("reference log at chunk %d: %v", ch.Header.ChunkID, err)
			}
			want, _, err := ref.ReadChunk(loc)
			if err != nil {
				e.t.Fatalf("reference chunk %d: %v", h.ChunkID, err)
			}
			got := obj.Bytes[ch.Position : ch.Position+int64(len(want))]
			if h.ChunkID != ch.Header.ChunkID || !bytes.Equal(got, want) {
				e.t.Fatalf("fragment at %d: chunk %d differs from the local log's chunk %d", fr.Entry.FirstOffset, ch.Header.ChunkID, h.ChunkID)
			}
			next = h.NextID()
		}
		if next != fr.End {
			e.t.Fatalf("fragment at %d ends at %d, manifest says %d", fr.Entry.FirstOffset, next, fr.End)
		}
	}
	if next != m.NextOffset {
		e.t.Fatalf("fragments end at %d, manifest next offset is %d", next, m.NextOffset)
	}
	return m, frags
}

// await waits for offset of stream to be persisted, failing the test after d.
func (e *env) await(stream string, offset uint64, d time.Duration) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := e.node.AwaitOffset(ctx, stream, offset); err != nil {
		st, serr := e.node.Status(context.Background(), stream)
		e.t.Fatalf("await offset %d of %s: %v (status: %+v %v)", offset, stream, err, st, serr)
	}
}

// objectKeys lists every object under stream's prefix.
func (e *env) objectKeys(stream string) map[string]bool {
	e.t.Helper()
	keys := map[string]bool{}
	err := e.store.List(context.Background(), manifest.StreamPrefix(prefix(e.cfg), stream), func(o s3io.ObjectInfo) error {
		keys[o.Key] = true
		return nil
	})
	if err != nil {
		e.t.Fatalf("list %s: %v", stream, err)
	}
	return keys
}

func isStopped(err error) bool { return errors.Is(err, actors.ErrStreamStopped) }

// testLogger discards logs unless STREAMTIER_TEST_LOG is set, then writes them readably.
func testLogger(name string) zerolog.Logger {
	if os.Getenv("STREAMTIER_TEST_LOG") == "" {
		return zerolog.Nop()
	}
	level := zerolog.InfoLevel
	if os.Getenv("STREAMTIER_TEST_LOG") == "debug" {
		level = zerolog.DebugLevel
	}
	return zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05.000"}).Level(level).With().Timestamp().Str("test", name).Logger()
}

// referencedKeys lists every object the persisted manifest of stream references (the root,
// every group holding live offsets, every live fragment), as garbage collection sees it.
func (e *env) referencedKeys(stream string) map[string]bool {
	e.t.Helper()
	_, rec, _ := e.remote(stream)
	keys, err := gc.References(context.Background(), e.store, prefix(e.cfg), stream, rec)
	if err != nil {
		e.t.Fatalf("references of %s: %v", stream, err)
	}
	return keys
}

func sameKeys(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}
