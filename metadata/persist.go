package metadata

import (
	"bytes"
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/manifest"
)

// PersistOutcome is what a persist transaction decided, when it reached a decision.
type PersistOutcome int

const (
	// PersistOK: the record and the epoch were written; Revision is the new manifest revision.
	PersistOK PersistOutcome = iota + 1
	// PersistConflict: another writer persisted since the revision this writer saw, or a
	// higher epoch has persisted: reinitialize from what is stored.
	PersistConflict
	// PersistNotFound: the stream's records are gone (deleted), or were never anchored: a
	// writer that had persisted before must stop and write nothing.
	PersistNotFound
	// PersistDeleted: the stream has a tombstone: it was deleted for good. Every writer
	// stops and writes nothing, whatever revision it expected.
	PersistDeleted
)

// String names the outcome, for logs and test failures.
func (o PersistOutcome) String() string {
	switch o {
	case PersistOK:
		return "ok"
	case PersistConflict:
		return "conflict"
	case PersistNotFound:
		return "not-found"
	case PersistDeleted:
		return "deleted"
	}
	return fmt.Sprintf("PersistOutcome(%d)", int(o))
}

// PersistResult is the decided outcome of a persist.
type PersistResult struct {
	Outcome PersistOutcome
	// Revision is the new manifest revision on OK; on a conflict, the stored one (0 if none).
	Revision int64
	// StoredEpoch is the epoch stored after the transaction (the writer's on OK; on a
	// conflict the one that fenced or outran the writer, 0 if none).
	StoredEpoch uint64
	// Stored is the record found on a conflict (zero if there is none).
	Stored ManifestRecord
	// Tombstone is the stream's tombstone on PersistDeleted (nil if its value does not decode).
	Tombstone *Tombstone
}

// Persist writes rec as the stream's manifest record and epoch as its epoch, in one etcd
// transaction, only if the record's Version is still expectedRevision (absent when it is 0)
// and the stored epoch is not above epoch. The outcome is decided from what the same
// transaction read back when its condition failed, never from error text:
//
//   - OK: written (or written by this very call's earlier attempt: see below).
//   - Deleted: the stream has a tombstone (checked first).
//   - NotFound: the anchor is gone, or the manifest is gone though expectedRevision > 0.
//   - Conflict: anything else (another writer persisted, or a higher epoch did).
//
// An error means no decision: IsRetriable tells whether to try again. A retriable error
// from the transaction leaves the outcome unknown; retrying with the same arguments is safe
// and reports OK if the earlier attempt applied (the stored record is then exactly rec, whose
// root uid no other writer can have drawn), never a false conflict.
//
// rec.Epoch must equal epoch (the root object is named by the writer's epoch).
func (s *Store) Persist(ctx context.Context, stream string, epoch uint64, expectedRevision int64, rec ManifestRecord) (PersistResult, error) {
	if err := manifest.ValidateStreamID(stream); err != nil {
		return PersistResult{}, fmt.Errorf("persist: %w", err)
	}
	if err := checkPersistInput(epoch, expectedRevision, rec); err != nil {
		return PersistResult{}, fmt.Errorf("persist %s: %w", stream, err)
	}
	value, err := rec.MarshalJSON()
	if err != nil {
		return PersistResult{}, fmt.Errorf("persist %s: encode: %w", stream, err)
	}
	anchorKey := AnchorKey(s.prefix, stream)
	manifestKey := ManifestKey(s.prefix, stream)
	epochKey := EpochKey(s.prefix, stream)
	tombKey := TombstoneKey(s.prefix, stream)
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(anchorKey), ">", 0),
		clientv3.Compare(clientv3.CreateRevision(tombKey), "=", 0),
	}
	if expectedRevision == 0 {
		// Creation: nothing persisted yet, so neither the record nor the epoch may exist.
		// (A value comparison on a missing key always fails in etcd, hence two forms.)
		cmps = append(cmps,
			clientv3.Compare(clientv3.CreateRevision(manifestKey), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(epochKey), "=", 0))
	} else {
		// stored <= mine, as bytes: the successor of mine in byte order is mine + "\x00".
		cmps = append(cmps,
			clientv3.Compare(clientv3.Version(manifestKey), "=", expectedRevision),
			clientv3.Compare(clientv3.Value(epochKey), "<", FormatEpoch(epoch)+"\x00"))
	}
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(
		clientv3.OpPut(manifestKey, string(value)),
		clientv3.OpPut(epochKey, FormatEpoch(epoch)),
	).Else(
		clientv3.OpGet(anchorKey, clientv3.WithCountOnly()),
		clientv3.OpGet(manifestKey),
		clientv3.OpGet(epochKey),
		clientv3.OpGet(tombKey),
	).Commit()
	if err != nil {
		return PersistResult{}, fmt.Errorf("persist %s at epoch %d, revision %d: %w", stream, epoch, expectedRevision, err)
	}
	if resp.Succeeded {
		return PersistResult{Outcome: PersistOK, Revision: expectedRevision + 1, StoredEpoch: epoch}, nil
	}
	if len(resp.Responses) != 4 {
		return PersistResult{}, fmt.Errorf("persist %s: etcd answered %d read-backs, want 4", stream, len(resp.Responses))
	}
	rb := readBack{
		anchor:      resp.Responses[0].GetResponseRange().GetCount() > 0,
		manifestKey: manifestKey,
		epochKey:    epochKey,
		tombKey:     tombKey,
		stream:      stream,
	}
	if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
		rb.manifest = kvs[0]
	}
	if kvs := resp.Responses[2].GetResponseRange().GetKvs(); len(kvs) > 0 {
		rb.epoch = kvs[0]
	}
	if kvs := resp.Responses[3].GetResponseRange().GetKvs(); len(kvs) > 0 {
		rb.tombstone = kvs[0]
	}
	res, err := decidePersist(epoch, expectedRevision, value, rb)
	if err != nil {
		return PersistResult{}, fmt.Errorf("persist %s: %w", stream, err)
	}
	return res, nil
}

func checkPersistInput(epoch uint64, expectedRevision int64, rec ManifestRecord) error {
	if expectedRevision < 0 {
		return fmt.Errorf("%w: expected revision %d is negative", ErrInvalidArgument, expectedRevision)
	}
	if rec.Epoch != epoch {
		return fmt.Errorf("%w: record names a root of epoch %d, writer epoch is %d", ErrInvalidArgument, rec.Epoch, epoch)
	}
	if err := rec.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return nil
}

// readBack is what a failed persist transaction read, atomically with its comparison.
type readBack struct {
	anchor                     bool
	manifest, epoch, tombstone *mvccpb.KeyValue // nil when absent
	manifestKey, epochKey      string           // for error messages
	tombKey, stream            string
}

// decidePersist is the pure decision of a persist whose condition failed, from the
// transaction's own read-back. mine is the encoded record this writer tried to store.
func decidePersist(epoch uint64, expectedRevision int64, mine []byte, rb readBack) (PersistResult, error) {
	if rb.tombstone != nil {
		// Deleted for good; an unreadable tombstone still says so.
		res := PersistResult{Outcome: PersistDeleted}
		if t, err := decodeTombstone(rb.tombKey, rb.stream, rb.tombstone.Value); err == nil {
			res.Tombstone = &t
		}
		return res, nil
	}
	if !rb.anchor || (expectedRevision > 0 && rb.manifest == nil) {
		return PersistResult{Outcome: PersistNotFound}, nil
	}
	var res PersistResult
	if rb.epoch != nil {
		e, err := ParseEpoch(rb.epochKey, rb.epoch.Value)
		if err != nil {
			return PersistResult{}, err
		}
		res.StoredEpoch = e
	}
	if rb.manifest != nil {
		// An earlier attempt of this same persist applied (its reply was lost): the stored
		// record is byte for byte ours, one version above what we expected, under our epoch.
		if bytes.Equal(rb.manifest.Value, mine) && rb.manifest.Version == expectedRevision+1 && rb.epoch != nil && res.StoredEpoch == epoch {
			return PersistResult{Outcome: PersistOK, Revision: rb.manifest.Version, StoredEpoch: epoch}, nil
		}
		stored, err := DecodeManifestRecord(rb.manifestKey, rb.manifest.Value)
		if err != nil {
			return PersistResult{}, err
		}
		res.Stored = stored
		res.Revision = rb.manifest.Version
	}
	res.Outcome = PersistConflict
	return res, nil
}
