package metadata

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/manifest"
)

// Store reads and writes streamtier's records in etcd under one prefix. It holds no state of
// its own beyond the client, so any number of goroutines may share it.
type Store struct {
	cli    *clientv3.Client
	prefix string
}

// NewStore wraps cli; prefix is the etcd prefix every record lives under ("" means
// DefaultPrefix; a trailing "/" is dropped). The caller keeps owning cli.
func NewStore(cli *clientv3.Client, prefix string) *Store {
	prefix = strings.TrimRight(prefix, "/")
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return &Store{cli: cli, prefix: prefix}
}

// Prefix is the etcd prefix this store works under.
func (s *Store) Prefix() string { return s.prefix }

// Client is the etcd client the store uses.
func (s *Store) Client() *clientv3.Client { return s.cli }

// Anchor creates the stream's anchor record if it is absent; it must succeed before the first
// object is written under the stream's S3 prefix. Anchoring again changes nothing. A deleted
// stream (one with a tombstone) is never anchored again: the error is then a *DeletedError.
func (s *Store) Anchor(ctx context.Context, stream string) error {
	if err := manifest.ValidateStreamID(stream); err != nil {
		return fmt.Errorf("anchor: %w", err)
	}
	key, tKey := AnchorKey(s.prefix, stream), TombstoneKey(s.prefix, stream)
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0), clientv3.Compare(clientv3.CreateRevision(tKey), "=", 0)).
		Then(clientv3.OpPut(key, stream)).
		Else(clientv3.OpGet(tKey)).
		Commit()
	if err != nil {
		return fmt.Errorf("anchor %s: %w", stream, err)
	}
	if !resp.Succeeded && len(resp.Responses) == 1 {
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			return fmt.Errorf("anchor: %w", deletedError(tKey, stream, kvs[0]))
		}
	}
	return nil // created, or already there
}

// HasAnchor reports whether the stream's anchor exists. linearizable asks the leader for an
// up-to-date answer (what garbage collection needs before deleting a prefix it believes
// unanchored); otherwise the contacted member answers from its local, possibly stale, state.
func (s *Store) HasAnchor(ctx context.Context, stream string, linearizable bool) (bool, error) {
	if err := manifest.ValidateStreamID(stream); err != nil {
		return false, fmt.Errorf("has anchor: %w", err)
	}
	opts := []clientv3.OpOption{clientv3.WithCountOnly()}
	if !linearizable {
		opts = append(opts, clientv3.WithSerializable())
	}
	resp, err := s.cli.Get(ctx, AnchorKey(s.prefix, stream), opts...)
	if err != nil {
		return false, fmt.Errorf("has anchor %s: %w", stream, err)
	}
	return resp.Count > 0, nil
}

// ReadManifest reads the persisted manifest record; revision is the key's etcd Version (1 on
// creation, +1 per persist). found is false when the stream never persisted (or was deleted).
func (s *Store) ReadManifest(ctx context.Context, stream string) (rec ManifestRecord, revision int64, found bool, err error) {
	if err := manifest.ValidateStreamID(stream); err != nil {
		return ManifestRecord{}, 0, false, fmt.Errorf("read manifest: %w", err)
	}
	key := ManifestKey(s.prefix, stream)
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return ManifestRecord{}, 0, false, fmt.Errorf("read manifest %s: %w", stream, err)
	}
	if len(resp.Kvs) == 0 {
		return ManifestRecord{}, 0, false, nil
	}
	kv := resp.Kvs[0]
	rec, err = DecodeManifestRecord(key, kv.Value)
	if err != nil {
		return ManifestRecord{}, 0, false, fmt.Errorf("read manifest %s: %w", stream, err)
	}
	return rec, kv.Version, true, nil
}
