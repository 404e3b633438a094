// Package tiertest writes a stream's remote tier by hand, exactly as the remote-format spec
// lays it out (fragment objects from a real osiris log, group objects from rebalancing, a
// root object, the anchor and the manifest record in etcd), so that tests of the tools that
// read a bucket (garbage collection, verify, status) know every object and every reference.
package tiertest

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"streamtier/manifest"
	"streamtier/metadata"
	"streamtier/s3io"
	"streamtier/s3io/s3test"
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
	// RetainBytes, when set, applies remote retention with this max_bytes after the first
	// persist and persists again; DeleteDropped then says whether the objects it drops and
	// the superseded root are deleted (as the reaper would) or left behind as orphans.
	RetainBytes   uint64
	DeleteDropped bool
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
	// deleted, superseded root). Every key in the bucket for this stream is in one of them.
	Live []string
	Left []string
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
	st := Stream{ID: spec.Stream, Dir: spec.Dir, Chunks: chunks}
	live := map[string]bool{}
	m := manifest.Empty()
	for _, d := range s3test.Describe(chunks, spec.FragmentSize) {
		e := manifest.Entry{FirstOffset: d.FirstOffset, FirstTimestamp: d.FirstTimestamp, LastTimestamp: d.LastTimestamp, Size: d.Size, UID: UID(), Kind: manifest.KindFragment}
		key := manifest.EntryKey(env.KeyPrefix, spec.Stream, e)
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
			gkey := manifest.EntryKey(env.KeyPrefix, spec.Stream, r.Group(uid))
			if err := env.Store.PutObject(ctx, gkey, r.Object()); err != nil {
				t.Fatalf("tiertest: put group: %v", err)
			}
			live[gkey] = true
			if m, err = m.Apply(r.Edit(m, uid)); err != nil {
				t.Fatalf("tiertest: apply rebalance: %v", err)
			}
		}
	}
	rootKey, rev := persist(ctx, t, env, spec, m, 0)
	live[rootKey] = true
	if spec.RetainBytes > 0 {
		fetch := Fetcher(ctx, env, spec.Stream)
		r, err := manifest.EvaluateRetentionWith(m, manifest.Policy{MaxBytes: spec.RetainBytes}, time.Now().UnixMilli(), fetch)
		if err != nil {
			t.Fatalf("tiertest: retention: %v", err)
		}
		if r.Changed {
			if m, err = m.Apply(r.Edit); err != nil {
				t.Fatalf("tiertest: apply retention: %v", err)
			}
			newRoot, newRev := persist(ctx, t, env, spec, m, rev)
			rev = newRev
			dropped := []string{rootKey}
			for _, e := range r.Delete {
				es, err := manifest.CollectForDelete(e, r.DeleteFrom, fetch)
				if err != nil {
					t.Fatalf("tiertest: collect: %v", err)
				}
				for _, x := range es {
					dropped = append(dropped, manifest.EntryKey(env.KeyPrefix, spec.Stream, x))
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
	// Fragments inside a group that retention cut into are not referenced any more, but
	// stay in the bucket until their group goes: they are garbage, as the spec says.
	referenced, err := Referenced(ctx, env, spec.Stream, m, rootKey)
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

func persist(ctx context.Context, t testing.TB, env Env, spec Spec, m manifest.Manifest, rev int64) (string, int64) {
	t.Helper()
	uid := UID()
	key := manifest.RootKey(env.KeyPrefix, spec.Stream, spec.Epoch, uid)
	if err := env.Store.PutObject(ctx, key, manifest.EncodeRoot(m)); err != nil {
		t.Fatalf("tiertest: put root: %v", err)
	}
	rec := metadata.ManifestRecord{Epoch: spec.Epoch, RootUID: uid, FirstOffset: m.FirstOffset, NextOffset: m.NextOffset, TotalSize: m.TotalSize, FirstTimestamp: m.FirstTimestamp}
	res, err := env.Meta.Persist(ctx, spec.Stream, spec.Epoch, rev, rec)
	if err != nil || res.Outcome != metadata.PersistOK {
		t.Fatalf("tiertest: persist: %+v %v", res, err)
	}
	return key, res.Revision
}

// Fetcher reads group objects of stream from the bucket.
func Fetcher(ctx context.Context, env Env, stream string) manifest.GroupFetcher {
	return func(e manifest.Entry) ([]manifest.Entry, error) {
		b, err := env.Store.GetObject(ctx, manifest.EntryKey(env.KeyPrefix, stream, e))
		if err != nil {
			return nil, err
		}
		_, children, err := manifest.DecodeGroup(b)
		return children, err
	}
}

// Referenced computes, independently of the code under test, the keys m references: the
// root, every group holding live offsets, every live fragment.
func Referenced(ctx context.Context, env Env, stream string, m manifest.Manifest, rootKey string) (map[string]bool, error) {
	out := map[string]bool{rootKey: true}
	fetch := Fetcher(ctx, env, stream)
	var walk func(es []manifest.Entry, end uint64) error
	walk = func(es []manifest.Entry, end uint64) error {
		for i, e := range es {
			eEnd := end
			if i+1 < len(es) {
				eEnd = es[i+1].FirstOffset
			}
			if eEnd <= m.FirstOffset {
				continue
			}
			out[manifest.EntryKey(env.KeyPrefix, stream, e)] = true
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
