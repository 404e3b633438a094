package metadata

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/manifest"
)

// RootOutcome is what a version 3 persist transaction decided.
type RootOutcome int

// Outcomes of PersistRoot.
const (
	// RootPersisted: the record and the stored epoch were written (or an earlier attempt
	// of this persist, or an adoption by another writer, made the record name this root).
	RootPersisted RootOutcome = iota + 1
	// RootConflict: another writer persisted since the record this writer saw: resolve again.
	RootConflict
	// RootFenced: a higher epoch is stored: this writer is deposed.
	RootFenced
	// RootDeleted: the stream has a tombstone: stop for good, write nothing.
	RootDeleted
	// RootMetadataMissing: the anchor, the record (expected) or the cluster record is gone
	// with no tombstone: lost metadata, never "deleted": stall in metadata_missing.
	RootMetadataMissing
	// RootClusterChanged: the cluster record is not the one the node opened with (a
	// takeover, a restore, another cluster): stop persisting and deleting.
	RootClusterChanged
)

// String names the outcome for logs.
func (o RootOutcome) String() string {
	switch o {
	case RootPersisted:
		return "persisted"
	case RootConflict:
		return "conflict"
	case RootFenced:
		return "fenced"
	case RootDeleted:
		return "deleted"
	case RootMetadataMissing:
		return "metadata_missing"
	case RootClusterChanged:
		return "cluster_changed"
	}
	return fmt.Sprintf("RootOutcome(%d)", int(o))
}

// RootPersist is one version 3 persist: the record naming a root by seq and uid.
type RootPersist struct {
	WriterEpoch uint64
	// Expected is the record's etcd Version this writer last saw (0: it saw none).
	Expected int64
	// Record names the root (Seq > 0); its Epoch is the root's, which is the writer's for
	// its own roots and may differ for an adopted one.
	Record ManifestRecord
	// Cluster is the cluster record the node opened with (claimed).
	Cluster ClusterRecord
}

// RootResult is the decided outcome of PersistRoot.
type RootResult struct {
	Outcome     RootOutcome
	Revision    int64          // the record's Version now (on RootPersisted, the new one)
	StoredEpoch uint64         // the stored epoch after the transaction (as read on a refusal)
	Stored      ManifestRecord // the record found on a refusal (zero if none)
	Cluster     *ClusterRecord // the cluster record found on RootClusterChanged (nil if gone)
}

// PersistRoot writes p.Record as the stream's manifest record and the higher of the
// writer's and the root's epoch as its stored epoch, in one transaction, only if the anchor
// exists, no tombstone does, the record's Version is p.Expected (absent for 0), the stored
// epoch is not above the writer's and the cluster record is the one the node opened with.
// A refusal is decided from what the same transaction read, never from error text. An
// error means no decision (IsRetriable): retry with the same arguments; the retry reports
// RootPersisted when the earlier attempt applied (the record names this root).
func (s *Store) PersistRoot(ctx context.Context, stream string, p RootPersist) (RootResult, error) {
	if err := manifest.ValidateStreamID(stream); err != nil {
		return RootResult{}, fmt.Errorf("persist root: %w", err)
	}
	if err := checkRootPersist(p); err != nil {
		return RootResult{}, fmt.Errorf("persist root %s: %w", stream, err)
	}
	value, err := p.Record.MarshalJSON()
	if err != nil {
		return RootResult{}, fmt.Errorf("persist root %s: encode: %w", stream, err)
	}
	cluster, err := EncodeClusterRecord(p.Cluster)
	if err != nil {
		return RootResult{}, fmt.Errorf("persist root %s: %w", stream, err)
	}
	k := streamKeys(s.prefix, stream)
	stored := max(p.WriterEpoch, p.Record.Epoch)
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(k.anchor), ">", 0),
		clientv3.Compare(clientv3.CreateRevision(k.tomb), "=", 0),
		clientv3.Compare(clientv3.Value(k.cluster), "=", string(cluster)),
	}
	if p.Expected == 0 {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k.manifest), "=", 0))
	} else {
		cmps = append(cmps, clientv3.Compare(clientv3.Version(k.manifest), "=", p.Expected))
	}
	if p.Expected == 0 {
		// Nothing persisted yet, so no stored epoch either (a value comparison on a missing
		// key always fails in etcd, hence two forms).
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k.epoch), "=", 0))
	} else {
		// stored <= mine, as bytes: the successor of mine in byte order is mine + "\x00".
		cmps = append(cmps, clientv3.Compare(clientv3.Value(k.epoch), "<", FormatEpoch(p.WriterEpoch)+"\x00"))
	}
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(
		clientv3.OpPut(k.manifest, string(value)),
		clientv3.OpPut(k.epoch, FormatEpoch(stored)),
	).Else(k.readBack()...).Commit()
	if err != nil {
		return RootResult{}, fmt.Errorf("persist root %s seq %d at epoch %d, expecting version %d: %w", stream, p.Record.Seq, p.WriterEpoch, p.Expected, err)
	}
	if resp.Succeeded {
		return RootResult{Outcome: RootPersisted, Revision: p.Expected + 1, StoredEpoch: stored}, nil
	}
	rb, err := k.parseReadBack(resp)
	if err != nil {
		return RootResult{}, fmt.Errorf("persist root %s: %w", stream, err)
	}
	res, err := decideRoot(p, string(cluster), rb)
	if err != nil {
		return RootResult{}, fmt.Errorf("persist root %s: %w", stream, err)
	}
	return res, nil
}

func checkRootPersist(p RootPersist) error {
	switch {
	case p.Expected < 0:
		return fmt.Errorf("%w: expected version %d is negative", ErrInvalidArgument, p.Expected)
	case p.Record.Seq == 0:
		return fmt.Errorf("%w: a version 3 persist names a root by seq (seq 0)", ErrInvalidArgument)
	case p.WriterEpoch == 0:
		return fmt.Errorf("%w: writer epoch 0", ErrInvalidArgument)
	}
	if err := p.Record.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return nil
}

// stream3Keys are the etcd keys one stream's version 3 transactions touch.
type stream3Keys struct {
	anchor, manifest, epoch, tomb, cluster, stream string
}

func streamKeys(prefix, stream string) stream3Keys {
	return stream3Keys{
		anchor: AnchorKey(prefix, stream), manifest: ManifestKey(prefix, stream),
		epoch: EpochKey(prefix, stream), tomb: TombstoneKey(prefix, stream),
		cluster: ClusterKey(prefix), stream: stream,
	}
}

func (k stream3Keys) readBack() []clientv3.Op {
	return []clientv3.Op{
		clientv3.OpGet(k.anchor, clientv3.WithCountOnly()),
		clientv3.OpGet(k.manifest), clientv3.OpGet(k.epoch), clientv3.OpGet(k.tomb), clientv3.OpGet(k.cluster),
	}
}

// rootReadBack is what a refused version 3 transaction read, atomically with its comparison.
type rootReadBack struct {
	keys                                stream3Keys
	anchor                              bool
	manifest, epoch, tombstone, cluster *mvccpb.KeyValue // nil when absent
}

func (k stream3Keys) parseReadBack(resp *clientv3.TxnResponse) (rootReadBack, error) {
	if len(resp.Responses) != 5 {
		return rootReadBack{}, fmt.Errorf("etcd answered %d read-backs, want 5", len(resp.Responses))
	}
	first := func(i int) *mvccpb.KeyValue {
		if kvs := resp.Responses[i].GetResponseRange().GetKvs(); len(kvs) > 0 {
			return kvs[0]
		}
		return nil
	}
	return rootReadBack{keys: k, anchor: resp.Responses[0].GetResponseRange().GetCount() > 0,
		manifest: first(1), epoch: first(2), tombstone: first(3), cluster: first(4)}, nil
}

// decideRoot is the pure decision of a refused version 3 persist, in this order: a
// tombstone (deleted), the cluster record (gone: metadata missing; another: changed), the
// record naming this very root (persisted after all), the anchor or an expected record
// gone (metadata missing), a higher stored epoch (fenced), anything else (conflict).
func decideRoot(p RootPersist, cluster string, rb rootReadBack) (RootResult, error) {
	var res RootResult
	if rb.epoch != nil {
		e, err := ParseEpoch(rb.keys.epoch, rb.epoch.Value)
		if err != nil {
			return RootResult{}, err
		}
		res.StoredEpoch = e
	}
	if rb.manifest != nil {
		rec, err := DecodeManifestRecord(rb.keys.manifest, rb.manifest.Value)
		if err != nil {
			return RootResult{}, err
		}
		res.Stored, res.Revision = rec, rb.manifest.Version
	}
	switch {
	case rb.tombstone != nil:
		res.Outcome = RootDeleted
	case rb.cluster == nil:
		res.Outcome = RootMetadataMissing
	case string(rb.cluster.Value) != cluster:
		res.Outcome = RootClusterChanged
		if c, err := DecodeClusterRecord(rb.keys.cluster, rb.cluster.Value); err == nil {
			res.Cluster = &c
		}
	case rb.manifest != nil && res.Stored.Seq == p.Record.Seq && res.Stored.RootUID == p.Record.RootUID:
		res.Outcome = RootPersisted
	case !rb.anchor || (p.Expected > 0 && rb.manifest == nil):
		res.Outcome = RootMetadataMissing
	case res.StoredEpoch > p.WriterEpoch:
		res.Outcome = RootFenced
	default:
		res.Outcome = RootConflict
	}
	return res, nil
}

// ErrRecoveryRace marks a recovery write whose condition failed: etcd changed since it was
// read (a writer persisted, another recovery ran): read again and plan afresh.
var ErrRecoveryRace = errors.New("etcd changed since recovery read it")

// RecoveryRead is what recovery read of a stream's records: their ModRevisions (0: absent),
// the tokens its write is conditional on.
type RecoveryRead struct {
	ManifestMod, EpochMod, TombstoneMod int64
	// ManifestVersion is the record's etcd Version (0: absent), what a writer's persist
	// expects after a resolution made from this read.
	ManifestVersion int64
}

// ReadForRecovery reads the stream's record, stored epoch, anchor and tombstone in one
// linearizable transaction, with the revisions RecoverRecords is conditional on.
func (s *Store) ReadForRecovery(ctx context.Context, stream string) (rec *ManifestRecord, epoch uint64, anchor, tombstone bool, read RecoveryRead, err error) {
	if err := manifest.ValidateStreamID(stream); err != nil {
		return nil, 0, false, false, read, fmt.Errorf("recovery read: %w", err)
	}
	k := streamKeys(s.prefix, stream)
	resp, err := s.cli.Txn(ctx).Then(k.readBack()...).Commit()
	if err != nil {
		return nil, 0, false, false, read, fmt.Errorf("recovery read %s: %w", stream, err)
	}
	rb, err := k.parseReadBack(resp)
	if err != nil {
		return nil, 0, false, false, read, fmt.Errorf("recovery read %s: %w", stream, err)
	}
	if rb.manifest != nil {
		r, err := DecodeManifestRecord(k.manifest, rb.manifest.Value)
		if err != nil {
			return nil, 0, false, false, read, fmt.Errorf("recovery read %s: %w", stream, err)
		}
		rec, read.ManifestMod, read.ManifestVersion = &r, rb.manifest.ModRevision, rb.manifest.Version
	}
	if rb.epoch != nil {
		if epoch, err = ParseEpoch(k.epoch, rb.epoch.Value); err != nil {
			return nil, 0, false, false, read, fmt.Errorf("recovery read %s: %w", stream, err)
		}
		read.EpochMod = rb.epoch.ModRevision
	}
	if rb.tombstone != nil {
		read.TombstoneMod = rb.tombstone.ModRevision
	}
	return rec, epoch, rb.anchor, rb.tombstone != nil, read, nil
}

// RecoverRecords writes a stream's records from the bucket in one transaction conditional
// on what ReadForRecovery returned (the record, the epoch and the tombstone unchanged): the
// anchor, rec (naming the bucket's top root) and storedEpoch. The caller never passes a
// record below the one it read nor an epoch below the stored one (resolve.PlanRecovery
// decides); a changed etcd is an error wrapping ErrRecoveryRace.
func (s *Store) RecoverRecords(ctx context.Context, stream string, read RecoveryRead, rec ManifestRecord, storedEpoch uint64) error {
	if err := manifest.ValidateStreamID(stream); err != nil {
		return fmt.Errorf("recover records: %w", err)
	}
	if err := rec.Validate(); err != nil {
		return fmt.Errorf("recover records %s: %w: %w", stream, ErrInvalidArgument, err)
	}
	value, err := rec.MarshalJSON()
	if err != nil {
		return fmt.Errorf("recover records %s: %w", stream, err)
	}
	k := streamKeys(s.prefix, stream)
	resp, err := s.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(k.manifest), "=", read.ManifestMod),
		clientv3.Compare(clientv3.ModRevision(k.epoch), "=", read.EpochMod),
		clientv3.Compare(clientv3.ModRevision(k.tomb), "=", read.TombstoneMod),
		clientv3.Compare(clientv3.CreateRevision(k.tomb), "=", 0),
	).Then(
		clientv3.OpPut(k.anchor, stream),
		clientv3.OpPut(k.manifest, string(value)),
		clientv3.OpPut(k.epoch, FormatEpoch(storedEpoch)),
	).Commit()
	if err != nil {
		return fmt.Errorf("recover records %s: %w", stream, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("recover records %s: %w (or it holds a tombstone)", stream, ErrRecoveryRace)
	}
	return nil
}
