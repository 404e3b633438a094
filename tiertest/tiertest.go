// Package tiertest writes a stream's remote tier by hand, exactly as the remote-format spec
// lays it out (fragment objects from a real osiris log, group objects from rebalancing, a
// root object, the anchor and the manifest record in etcd), so that tests of the tools that
// read a bucket (garbage collection, verify, status) know every object and every reference.
package tiertest

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
)

// Env is where a stream is written: a bucket, etcd, and the key prefix.
type Env struct {
	Store     *s3io.Store
	Meta      *metadata.Store
	KeyPrefix string
}

// Spec describes the stream to write.
type Spec struct {
	Stream       string
	Dir          string // the local log directory to create (a new temporary one when empty)
	Seed         uint64
	Chunks       int   // chunks in the log (default 40)
	FragmentSize int64 // fragment target size in chunk bytes (default 8 KiB)
	Rebalance    int   // rebalance threshold M; 0 never groups
	Epoch        uint64
	// KeyVersion is the layout of fragment and group keys: 2 (the default) carries Epoch,
	// 1 is the layout of earlier buckets (<off20>-<uid16>, no epoch).
	KeyVersion int
	// FormatVersion 1 writes the root and group objects as earlier buckets hold them
	// (version field 1, no gap entries); 0 or 2 writes the current version 2.
	FormatVersion int
	// RetainBytes, when set, applies remote retention with this max_bytes after the first
	// persist and persists again; DeleteDropped then says whether the objects it drops and
	// the superseded root are deleted (as the reaper would) or left behind as orphans.
	RetainBytes   uint64
	DeleteDropped bool
	// Unpersisted, when set, leaves the log's last Unpersisted fragments out of the
	// persisted manifest: they are uploaded after the last persist (so they start at or
	// above its next offset and are newer than its root), as a writer whose persist has not
	// come yet leaves them. Stream.Pending lists them; Persist persists them.
	Unpersisted int
}

// Pending is a fragment uploaded and not yet persisted.
type Pending struct {
	Entry manifest.Entry
	Next  uint64 // where the fragment ends
	Key   string
}

// Stream is what Write wrote.
type Stream struct {
	ID       string
	Dir      string
	Chunks   []s3test.LogChunk
	Manifest manifest.Manifest // the persisted manifest
	Record   metadata.ManifestRecord
	Revision int64
	RootKey  string
	// Live are the keys the persisted manifest references (root, groups, live fragments);
	// Left are keys written and not referenced any more (dropped by retention and not
	// deleted, superseded root). Every key in the bucket for this stream is in one of them or
	// in Pending.
	Live []string
	Left []string
	// Keys maps every fragment and group entry written to its key.
	Keys map[manifest.Entry]string
	// Pending are the fragments uploaded but not persisted (Spec.Unpersisted), in order.
	Pending []Pending
	Epoch   uint64
}

// KeyOf is the key of the object e names (written by Write), or "" when Write wrote none.
func (s Stream) KeyOf(e manifest.Entry) string { return s.Keys[e] }

// ObjectKey is the key of the object e of stream names as a writer at epoch makes it, in
// layout version 1 (no epoch) or 2.
func ObjectKey(keyPrefix, stream string, e manifest.Entry, epoch uint64, version int) string {
	if version == 1 {
		return manifest.EntryListPrefix(keyPrefix, stream, e) + fmt.Sprintf("%016x.%s", e.UID, e.Kind)
	}
	if e.Kind == manifest.KindFragment {
		return manifest.FragmentKey(keyPrefix, stream, e.FirstOffset, epoch, e.UID)
	}
	return manifest.GroupKey(keyPrefix, stream, e.Kind, e.FirstOffset, epoch, e.UID)
}

// UID draws a random object uid, as writers do.
func UID() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:])
}

// Write writes the stream's log, fragments, groups, root and etcd records, and fails t on
// any error.
func Write(t testing.TB, env Env, spec Spec) Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if spec.Chunks == 0 {
		spec.Chunks = 40
	}
	if spec.FragmentSize == 0 {
		spec.FragmentSize = 8 << 10
	}
	if spec.Epoch == 0 {
		spec.Epoch = 1
	}
	if spec.KeyVersion == 0 {
		spec.KeyVersion = 2
	}
	if spec.Dir == "" {
		spec.Dir = filepath.Join(t.TempDir(), spec.Stream)
	}
	if env.KeyPrefix == "" {
		env.KeyPrefix = manifest.DefaultKeyPrefix
	}
	if err := os.MkdirAll(spec.Dir, 0o755); err != nil {
		t.Fatalf("tiertest: %v", err)
	}
	chunks, err := s3test.WriteLog(spec.Dir, s3test.LogSpec{Seed: spec.Seed, Chunks: spec.Chunks, MinData: 500, MaxData: 3000, MaxTrailer: 40, SegmentBytes: 30_000})
	if err != nil {
		t.Fatalf("tiertest: write log: %v", err)
	}
	if err := env.Meta.Anchor(ctx, spec.Stream); err != nil {
		t.Fatalf("tiertest: anchor: %v", err)
	}
	st := Stream{ID: spec.Stream, Dir: spec.Dir, Chunks: chunks, Keys: map[manifest.Entry]string{}, Epoch: spec.Epoch}
	keyOf := func(e manifest.Entry) string {
		k := ObjectKey(env.KeyPrefix, spec.Stream, e, spec.Epoch, spec.KeyVersion)
		st.Keys[e] = k
		return k
	}
	live := map[string]bool{}
	m := manifest.Empty()
	descs := s3test.Describe(chunks, spec.FragmentSize)
	if spec.Unpersisted >= len(descs) {
		t.Fatalf("tiertest: %d unpersisted fragments of %d: at least one must be persisted", spec.Unpersisted, len(descs))
	}
	later := descs[len(descs)-spec.Unpersisted:]
	for _, d := range descs[:len(descs)-spec.Unpersisted] {
		e := manifest.Entry{FirstOffset: d.FirstOffset, FirstTimestamp: d.FirstTimestamp, LastTimestamp: d.LastTimestamp, Size: d.Size, UID: UID(), Kind: manifest.KindFragment}
		key := keyOf(e)
		if _, err := env.Store.PutFragment(ctx, key, spec.Dir, d); err != nil {
			t.Fatalf("tiertest: put fragment %s: %v", key, err)
		}
		live[key] = true
		edit, err := manifest.AppendEdit(m, e, d.NextOffset)
		if err != nil {
			t.Fatalf("tiertest: append edit: %v", err)
		}
		if m, err = m.Apply(edit); err != nil {
			t.Fatalf("tiertest: apply: %v", err)
		}
		for spec.Rebalance > 0 {
			r, ok := manifest.FindRebalance(m, spec.Rebalance)
			if !ok {
				break
			}
			uid := UID()
			gkey := keyOf(r.Group(uid))
			if err := env.Store.PutObject(ctx, gkey, withVersion(r.Object(), spec.FormatVersion)); err != nil {
				t.Fatalf("tiertest: put group: %v", err)
			}
			live[gkey] = true
			if m, err = m.Apply(r.Edit(m, uid)); err != nil {
				t.Fatalf("tiertest: apply rebalance: %v", err)
			}
		}
	}
	rootKey, rev := persist(ctx, t, env, spec.Stream, spec.Epoch, m, 0, spec.FormatVersion)
	live[rootKey] = true
	if spec.RetainBytes > 0 {
		fetch := fetcher(ctx, env, st.Keys)
		r, err := manifest.EvaluateRetentionWith(m, manifest.Policy{MaxBytes: spec.RetainBytes}, time.Now().UnixMilli(), fetch)
		if err != nil {
			t.Fatalf("tiertest: retention: %v", err)
		}
		if r.Changed {
			if m, err = m.Apply(r.Edit); err != nil {
				t.Fatalf("tiertest: apply retention: %v", err)
			}
			newRoot, newRev := persist(ctx, t, env, spec.Stream, spec.Epoch, m, rev, spec.FormatVersion)
			rev = newRev
			dropped := []string{rootKey}
			for _, e := range r.Delete {
				es, err := manifest.CollectForDelete(e, r.DeleteFrom, fetch)
				if err != nil {
					t.Fatalf("tiertest: collect: %v", err)
				}
				for _, x := range es {
					dropped = append(dropped, st.Keys[x])
				}
			}
			for _, k := range dropped {
				delete(live, k)
			}
			if spec.DeleteDropped {
				if failed, err := env.Store.DeleteObjects(ctx, dropped); err != nil || len(failed) > 0 {
					t.Fatalf("tiertest: delete dropped: %v %v", failed, err)
				}
			} else {
				st.Left = append(st.Left, dropped...)
			}
			live[newRoot] = true
			rootKey = newRoot
		}
	}
	for _, d := range later {
		e := manifest.Entry{FirstOffset: d.FirstOffset, FirstTimestamp: d.FirstTimestamp, LastTimestamp: d.LastTimestamp, Size: d.Size, UID: UID(), Kind: manifest.KindFragment}
		key := keyOf(e)
		if _, err := env.Store.PutFragment(ctx, key, spec.Dir, d); err != nil {
			t.Fatalf("tiertest: put fragment %s: %v", key, err)
		}
		st.Pending = append(st.Pending, Pending{Entry: e, Next: d.NextOffset, Key: key})
	}
	// Fragments inside a group that retention cut into are not referenced any more, but
	// stay in the bucket until their group goes: they are garbage, as the spec says.
	referenced, err := referencedKeys(ctx, env, st.Keys, m, rootKey)
	if err != nil {
		t.Fatalf("tiertest: referenced: %v", err)
	}
	for k := range live {
		if !referenced[k] {
			st.Left = append(st.Left, k)
		}
	}
	for k := range referenced {
		st.Live = append(st.Live, k)
	}
	rec, gotRev, found, err := env.Meta.ReadManifest(ctx, spec.Stream)
	if err != nil || !found || gotRev != rev {
		t.Fatalf("tiertest: read back record: found %t rev %d (want %d): %v", found, gotRev, rev, err)
	}
	st.Manifest, st.Record, st.Revision, st.RootKey = m, rec, rev, rootKey
	return st
}

// Persist persists st's pending fragments (none is fine: the manifest is persisted again)
// under a new root at st.Epoch, as the writer's next persist would, and updates st: the
// previous root joins Left, the pending fragments and the new root Live.
func Persist(t testing.TB, env Env, st *Stream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if env.KeyPrefix == "" {
		env.KeyPrefix = manifest.DefaultKeyPrefix
	}
	m := st.Manifest
	for _, p := range st.Pending {
		edit, err := manifest.AppendEdit(m, p.Entry, p.Next)
		if err != nil {
			t.Fatalf("tiertest: append edit: %v", err)
		}
		if m, err = m.Apply(edit); err != nil {
			t.Fatalf("tiertest: apply: %v", err)
		}
	}
	rootKey, rev := persist(ctx, t, env, st.ID, st.Epoch, m, st.Revision, 0)
	referenced, err := referencedKeys(ctx, env, st.Keys, m, rootKey)
	if err != nil {
		t.Fatalf("tiertest: referenced: %v", err)
	}
	st.Left = append(st.Left, st.RootKey)
	st.Live = nil
	for k := range referenced {
		st.Live = append(st.Live, k)
	}
	rec, gotRev, found, err := env.Meta.ReadManifest(ctx, st.ID)
	if err != nil || !found || gotRev != rev {
		t.Fatalf("tiertest: read back record: found %t rev %d (want %d): %v", found, gotRev, rev, err)
	}
	st.Manifest, st.Record, st.Revision, st.RootKey, st.Pending = m, rec, rev, rootKey, nil
}

func persist(ctx context.Context, t testing.TB, env Env, stream string, epoch uint64, m manifest.Manifest, rev int64, version int) (string, int64) {
	t.Helper()
	uid := UID()
	key := manifest.RootKey(env.KeyPrefix, stream, epoch, uid)
	if err := env.Store.PutObject(ctx, key, withVersion(manifest.EncodeRoot(m), version)); err != nil {
		t.Fatalf("tiertest: put root: %v", err)
	}
	rec := metadata.ManifestRecord{Epoch: epoch, RootUID: uid, FirstOffset: m.FirstOffset, NextOffset: m.NextOffset, TotalSize: m.TotalSize, FirstTimestamp: m.FirstTimestamp}
	res, err := env.Meta.Persist(ctx, stream, epoch, rev, rec)
	if err != nil || res.Outcome != metadata.PersistOK {
		t.Fatalf("tiertest: persist: %+v %v", res, err)
	}
	return key, res.Revision
}

// fetcher reads group objects from the bucket, by the keys Write gave them.
func fetcher(ctx context.Context, env Env, keys map[manifest.Entry]string) manifest.GroupFetcher {
	return func(e manifest.Entry) ([]manifest.Entry, error) {
		key, ok := keys[e]
		if !ok {
			return nil, fmt.Errorf("tiertest: no object written for %+v", e)
		}
		b, err := env.Store.GetObject(ctx, key)
		if err != nil {
			return nil, err
		}
		_, children, err := manifest.DecodeGroup(b)
		return children, err
	}
}

// referencedKeys computes, independently of the code under test, the keys m references:
// the root, every group holding live offsets, every live fragment.
func referencedKeys(ctx context.Context, env Env, keys map[manifest.Entry]string, m manifest.Manifest, rootKey string) (map[string]bool, error) {
	out := map[string]bool{rootKey: true}
	fetch := fetcher(ctx, env, keys)
	var walk func(es []manifest.Entry, end uint64) error
	walk = func(es []manifest.Entry, end uint64) error {
		for i, e := range es {
			eEnd := end
			if i+1 < len(es) {
				eEnd = es[i+1].FirstOffset
			}
			if eEnd <= m.FirstOffset || e.IsGap() {
				continue
			}
			out[keys[e]] = true
			if e.Kind != manifest.KindFragment {
				children, err := fetch(e)
				if err != nil {
					return err
				}
				if err := walk(children, eEnd); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return out, walk(m.Entries, m.NextOffset)
}

// withVersion rewrites an encoded root or group object as format version 1 when version is
// 1 (the version field after the magic, and the trailing CRC-32): the bytes earlier
// buckets hold. Objects holding gap entries cannot be version 1.
func withVersion(b []byte, version int) []byte {
	if version != 1 {
		return b
	}
	b = append([]byte(nil), b...)
	binary.BigEndian.PutUint32(b[4:8], 1)
	n := len(b) - 4
	binary.BigEndian.PutUint32(b[n:], crc32.ChecksumIEEE(b[:n]))
	return b
}
