package metadata

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/manifest"
)

// ErrStreamDeleted marks a stream that has a tombstone: it was deleted, for good. Stream ids
// name one incarnation of a stream, so nothing may be written under a deleted id again.
var ErrStreamDeleted = errors.New("stream deleted")

// TombstoneVersion is the version of the tombstone document; a decoder refuses any other.
const TombstoneVersion = 1

// Tombstone is the permanent record DeleteStream leaves of a deleted stream: when it was
// deleted and what its records said just before (all zero when it had never persisted).
type Tombstone struct {
	Stream     string
	DeletedAt  time.Time // UTC, millisecond precision
	Revision   int64     // the manifest record's last Version (0: never persisted)
	Epoch      uint64    // the last stored epoch (0: none)
	NextOffset uint64    // the last record's next offset (0: none)
	// Pending marks a deletion that has fenced the stream but not yet removed its records
	// (the fields above are then provisional); the next DeleteStream completes it.
	Pending bool
}

type tombstoneJSON struct {
	Version    *int    `json:"version"`
	Stream     *string `json:"stream"`
	DeletedAt  *string `json:"deletedAt"`
	Revision   *int64  `json:"revision"`
	Epoch      *uint64 `json:"epoch"`
	NextOffset *uint64 `json:"nextOffset"`
	Pending    bool    `json:"pending,omitempty"`
}

// encodeTombstone renders t as stored: the deletion time as RFC 3339 with milliseconds, so
// that an operator reading the key with etcdctl sees a date.
func encodeTombstone(t Tombstone) ([]byte, error) {
	v := TombstoneVersion
	at := t.DeletedAt.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	return json.Marshal(tombstoneJSON{Version: &v, Stream: &t.Stream, DeletedAt: &at, Revision: &t.Revision, Epoch: &t.Epoch, NextOffset: &t.NextOffset, Pending: t.Pending})
}

// decodeTombstone decodes the value stored under key for stream, strictly (every field, no
// other, version 1, the right stream), wrapping any failure in ErrCorruptRecord.
func decodeTombstone(key, stream string, value []byte) (Tombstone, error) {
	fail := func(err error) (Tombstone, error) {
		return Tombstone{}, fmt.Errorf("%w: %s: tombstone: %w", ErrCorruptRecord, key, err)
	}
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.DisallowUnknownFields()
	var doc tombstoneJSON
	if err := dec.Decode(&doc); err != nil {
		return fail(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fail(errors.New("data after the document"))
	}
	switch {
	case doc.Version == nil || doc.Stream == nil || doc.DeletedAt == nil || doc.Revision == nil || doc.Epoch == nil || doc.NextOffset == nil:
		return fail(errors.New("a field is missing (version, stream, deletedAt, revision, epoch, nextOffset)"))
	case *doc.Version != TombstoneVersion:
		return fail(fmt.Errorf("version %d, this build reads version %d", *doc.Version, TombstoneVersion))
	case *doc.Stream != stream:
		return fail(fmt.Errorf("names stream %q", *doc.Stream))
	case *doc.Revision < 0:
		return fail(fmt.Errorf("negative revision %d", *doc.Revision))
	}
	at, err := time.Parse(time.RFC3339Nano, *doc.DeletedAt)
	if err != nil {
		return fail(err)
	}
	return Tombstone{Stream: stream, DeletedAt: at.UTC(), Revision: *doc.Revision, Epoch: *doc.Epoch, NextOffset: *doc.NextOffset, Pending: doc.Pending}, nil
}

// DeletedError is the error of an operation on a deleted stream (one with a tombstone). It
// matches ErrStreamDeleted; when the tombstone's value does not decode, the stream is
// deleted all the same, Tombstone holds only the stream id and Unreadable says why.
type DeletedError struct {
	Tombstone  Tombstone
	Unreadable error
}

func (e *DeletedError) Error() string {
	t := e.Tombstone
	if e.Unreadable != nil {
		return fmt.Sprintf("stream %s was deleted (its tombstone does not decode: %v)", t.Stream, e.Unreadable)
	}
	if t.Pending {
		return fmt.Sprintf("stream %s is being deleted since %s (fenced; run the deletion again if it was interrupted)",
			t.Stream, t.DeletedAt.Format(time.RFC3339))
	}
	return fmt.Sprintf("stream %s was deleted at %s (last revision %d, epoch %d, next offset %d)",
		t.Stream, t.DeletedAt.Format(time.RFC3339), t.Revision, t.Epoch, t.NextOffset)
}

// Unwrap lets errors.Is find ErrStreamDeleted (and ErrCorruptRecord for an unreadable tombstone).
func (e *DeletedError) Unwrap() []error {
	if e.Unreadable != nil {
		return []error{ErrStreamDeleted, e.Unreadable}
	}
	return []error{ErrStreamDeleted}
}

// deletedError builds the DeletedError of a stored tombstone.
func deletedError(key, stream string, kv *mvccpb.KeyValue) *DeletedError {
	t, err := decodeTombstone(key, stream, kv.Value)
	if err != nil {
		return &DeletedError{Tombstone: Tombstone{Stream: stream}, Unreadable: err}
	}
	return &DeletedError{Tombstone: t}
}

// ReadTombstone reads the stream's tombstone; found is false for a stream never deleted.
func (s *Store) ReadTombstone(ctx context.Context, stream string) (t Tombstone, found bool, err error) {
	if err := manifest.ValidateStreamID(stream); err != nil {
		return Tombstone{}, false, fmt.Errorf("read tombstone: %w", err)
	}
	key := TombstoneKey(s.prefix, stream)
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return Tombstone{}, false, fmt.Errorf("read tombstone %s: %w", stream, err)
	}
	if len(resp.Kvs) == 0 {
		return Tombstone{}, false, nil
	}
	t, err = decodeTombstone(key, stream, resp.Kvs[0].Value)
	if err != nil {
		return Tombstone{}, true, fmt.Errorf("read tombstone %s: %w", stream, err)
	}
	return t, true, nil
}

// ReadForResolution reads what a writer's resolution needs, in one etcd request: the
// manifest record (as ReadManifest) and the stream's tombstone. A tombstone wins over
// everything else: err is then a *DeletedError (errors.Is(err, ErrStreamDeleted)).
func (s *Store) ReadForResolution(ctx context.Context, stream string) (rec ManifestRecord, revision int64, found bool, err error) {
	if err := manifest.ValidateStreamID(stream); err != nil {
		return ManifestRecord{}, 0, false, fmt.Errorf("read for resolution: %w", err)
	}
	mKey, tKey := ManifestKey(s.prefix, stream), TombstoneKey(s.prefix, stream)
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(mKey), clientv3.OpGet(tKey)).Commit()
	if err != nil {
		return ManifestRecord{}, 0, false, fmt.Errorf("read for resolution %s: %w", stream, err)
	}
	if len(resp.Responses) != 2 {
		return ManifestRecord{}, 0, false, fmt.Errorf("read for resolution %s: etcd answered %d reads, want 2", stream, len(resp.Responses))
	}
	if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
		return ManifestRecord{}, 0, false, fmt.Errorf("read for resolution: %w", deletedError(tKey, stream, kvs[0]))
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return ManifestRecord{}, 0, false, nil
	}
	if rec, err = DecodeManifestRecord(mKey, kvs[0].Value); err != nil {
		return ManifestRecord{}, 0, false, fmt.Errorf("read for resolution %s: %w", stream, err)
	}
	return rec, kvs[0].Version, true, nil
}

// maxDeleteAttempts bounds DeleteStream's completion step. Once the tombstone fences the
// stream no persist can change its records, so only another deleter racing this one can make
// an attempt fail; two attempts suffice in practice and the bound only guards a bug.
const maxDeleteAttempts = 8

// DeleteStream deletes every record of the stream (anchor, manifest, epoch) and its
// placement and leaves its tombstone, in two steps so that a writer persisting as fast as it
// can never starves the deletion. First a pending tombstone fences the stream: from then on
// a writer's persist reports PersistDeleted, its anchor or resolution ErrStreamDeleted. Then,
// against records that can no longer change, one transaction deletes them and completes the
// tombstone with exactly what they said. A deletion interrupted between the steps leaves the
// stream fenced (deleted to every reader) and is completed by the next DeleteStream.
// Deleting a deleted stream again keeps the first tombstone.
func (s *Store) DeleteStream(ctx context.Context, stream string) error {
	return s.DeleteStreamMarked(ctx, stream, nil)
}

// DeleteStreamMarked is DeleteStream with fenced called once the tombstone fences the
// writers and before the records go: version 3 writes the bucket's deletion marker there
// (remote-format.md, "Protocol"). An error from fenced stops the deletion with the stream
// fenced; the next deletion completes it.
func (s *Store) DeleteStreamMarked(ctx context.Context, stream string, fenced func(context.Context) error) error {
	if err := manifest.ValidateStreamID(stream); err != nil {
		return fmt.Errorf("delete stream: %w", err)
	}
	tKey := TombstoneKey(s.prefix, stream)
	fence := Tombstone{Stream: stream, DeletedAt: time.Now().UTC().Truncate(time.Millisecond), Pending: true}
	value, err := encodeTombstone(fence)
	if err != nil {
		return fmt.Errorf("delete stream %s: encode tombstone: %w", stream, err)
	}
	if _, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(tKey), "=", 0)).
		Then(clientv3.OpPut(tKey, string(value))).Commit(); err != nil {
		return fmt.Errorf("delete stream %s: fence with a tombstone: %w", stream, err)
	}
	if fenced != nil {
		if err := fenced(ctx); err != nil {
			return fmt.Errorf("delete stream %s: fenced, but: %w", stream, err)
		}
	}
	for attempt := 1; attempt <= maxDeleteAttempts; attempt++ {
		done, err := s.completeDeletion(ctx, stream)
		if err != nil || done {
			return err
		}
	}
	return fmt.Errorf("delete stream %s: its records changed under each of %d attempts after the tombstone fenced it (another deleter?); the stream is fenced, run the deletion again", stream, maxDeleteAttempts)
}

// completeDeletion deletes the fenced stream's records and placement and, when its tombstone
// is still pending, completes it with what the records said; done is false when a record or
// the tombstone changed between the read and the write.
func (s *Store) completeDeletion(ctx context.Context, stream string) (done bool, err error) {
	mKey, eKey := ManifestKey(s.prefix, stream), EpochKey(s.prefix, stream)
	tKey := TombstoneKey(s.prefix, stream)
	read, err := s.cli.Txn(ctx).Then(clientv3.OpGet(mKey), clientv3.OpGet(eKey), clientv3.OpGet(tKey)).Commit()
	if err != nil {
		return false, fmt.Errorf("delete stream %s: read records: %w", stream, err)
	}
	if len(read.Responses) != 3 {
		return false, fmt.Errorf("delete stream %s: etcd answered %d reads, want 3", stream, len(read.Responses))
	}
	kv := func(i int) *mvccpb.KeyValue {
		if kvs := read.Responses[i].GetResponseRange().GetKvs(); len(kvs) > 0 {
			return kvs[0]
		}
		return nil
	}
	m, e, ts := kv(0), kv(1), kv(2)
	if ts == nil {
		return false, fmt.Errorf("delete stream %s: the tombstone written a moment ago is gone (was %s deleted by hand?)", stream, tKey)
	}
	modRev := func(kv *mvccpb.KeyValue) int64 {
		if kv == nil {
			return 0
		}
		return kv.ModRevision
	}
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(mKey), "=", modRev(m)),
		clientv3.Compare(clientv3.ModRevision(eKey), "=", modRev(e)),
		clientv3.Compare(clientv3.ModRevision(tKey), "=", ts.ModRevision),
	}
	ops := []clientv3.Op{
		clientv3.OpDelete(StreamPrefix(s.prefix, stream), clientv3.WithPrefix()),
		clientv3.OpDelete(PlacementKey(s.prefix, stream)),
	}
	// A tombstone that does not decode still fences the stream; it is kept as it is.
	if t, err := decodeTombstone(tKey, stream, ts.Value); err == nil && t.Pending {
		// What the records said, as far as they decode: a corrupt record must not keep a
		// stream from being deleted.
		t.Pending = false
		if m != nil {
			t.Revision = m.Version
			if rec, err := DecodeManifestRecord(mKey, m.Value); err == nil {
				t.NextOffset = rec.NextOffset
			}
		}
		if e != nil {
			t.Epoch, _ = ParseEpoch(eKey, e.Value)
		}
		value, err := encodeTombstone(t)
		if err != nil {
			return false, fmt.Errorf("delete stream %s: encode tombstone: %w", stream, err)
		}
		ops = append(ops, clientv3.OpPut(tKey, string(value)))
	}
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return false, fmt.Errorf("delete stream %s: %w", stream, err)
	}
	return resp.Succeeded, nil
}
