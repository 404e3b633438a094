package metadata

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/strictjson"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ClusterKey holds the cluster's half of the bucket claim: its id and generation, and
// whether the claim object was written (remote-format.md, "The bucket describes itself").
func ClusterKey(etcdPrefix string) string { return etcdPrefix + "/cluster" }

// ClusterRecord is the value of ClusterKey.
type ClusterRecord struct {
	ClusterID  string // 32 lowercase hex digits, the claim's
	Generation uint64 // the claim's; at least 1
	// Claimed is false from the record's creation until the claim object was written.
	Claimed bool
}

type clusterJSON struct {
	ClusterID  *string `json:"cluster_id"`
	Generation *uint64 `json:"generation"`
	Claimed    *bool   `json:"claimed"`
}

// EncodeClusterRecord renders r as stored. The encoding is canonical (one document per
// record), so that a persist can compare the stored bytes with the record a node opened with.
func EncodeClusterRecord(r ClusterRecord) ([]byte, error) {
	if err := manifest.ValidateClusterID(r.ClusterID); err != nil {
		return nil, fmt.Errorf("%w: cluster record: %w", ErrInvalidArgument, err)
	}
	if r.Generation == 0 {
		return nil, fmt.Errorf("%w: cluster record: generation 0 (generations start at 1)", ErrInvalidArgument)
	}
	return json.Marshal(clusterJSON{ClusterID: &r.ClusterID, Generation: &r.Generation, Claimed: &r.Claimed})
}

// DecodeClusterRecord decodes the value stored under key strictly, wrapping any failure
// in ErrCorruptRecord with the key named.
func DecodeClusterRecord(key string, value []byte) (ClusterRecord, error) {
	fail := func(err error) (ClusterRecord, error) {
		return ClusterRecord{}, fmt.Errorf("%w: %s: cluster record: %w", ErrCorruptRecord, key, err)
	}
	var doc clusterJSON
	if err := strictjson.Decode(value, &doc); err != nil {
		return fail(err)
	}
	switch {
	case doc.ClusterID == nil || doc.Generation == nil || doc.Claimed == nil:
		return fail(errors.New("a field is missing (cluster_id, generation, claimed)"))
	case *doc.Generation == 0:
		return fail(errors.New("generation 0"))
	}
	if err := manifest.ValidateClusterID(*doc.ClusterID); err != nil {
		return fail(err)
	}
	return ClusterRecord{ClusterID: *doc.ClusterID, Generation: *doc.Generation, Claimed: *doc.Claimed}, nil
}

// ReadCluster reads the cluster record linearizably; modRevision is its etcd ModRevision
// (the token of UpdateCluster), found false when there is none.
func (s *Store) ReadCluster(ctx context.Context) (rec ClusterRecord, modRevision int64, found bool, err error) {
	key := ClusterKey(s.prefix)
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return ClusterRecord{}, 0, false, fmt.Errorf("read cluster record %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return ClusterRecord{}, 0, false, nil
	}
	rec, err = DecodeClusterRecord(key, resp.Kvs[0].Value)
	if err != nil {
		return ClusterRecord{}, 0, false, err
	}
	return rec, resp.Kvs[0].ModRevision, true, nil
}

// CreateCluster writes rec as the cluster record if there is none. When one exists (a
// node that lost the race, or a record made earlier) it returns that one, created false:
// the caller adopts the winner's id.
func (s *Store) CreateCluster(ctx context.Context, rec ClusterRecord) (ClusterRecord, int64, bool, error) {
	value, err := EncodeClusterRecord(rec)
	if err != nil {
		return ClusterRecord{}, 0, false, err
	}
	key := ClusterKey(s.prefix)
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(value))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return ClusterRecord{}, 0, false, fmt.Errorf("create cluster record %s: %w", key, err)
	}
	if resp.Succeeded {
		return rec, resp.Header.Revision, true, nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return ClusterRecord{}, 0, false, fmt.Errorf("create cluster record %s: neither created nor found (deleted meanwhile): try again", key)
	}
	won, err := DecodeClusterRecord(key, kvs[0].Value)
	return won, kvs[0].ModRevision, false, err
}

// ErrClusterChanged marks a cluster record that is no longer the one read: another node
// or command updated it meanwhile.
var ErrClusterChanged = errors.New("cluster record changed")

// UpdateCluster replaces the cluster record read at modRevision by rec (marking it claimed,
// or raising the generation), only if it is still that one; otherwise the error wraps
// ErrClusterChanged. It returns the new ModRevision.
func (s *Store) UpdateCluster(ctx context.Context, modRevision int64, rec ClusterRecord) (int64, error) {
	value, err := EncodeClusterRecord(rec)
	if err != nil {
		return 0, err
	}
	key := ClusterKey(s.prefix)
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", modRevision)).
		Then(clientv3.OpPut(key, string(value))).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("update cluster record %s: %w", key, err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("update cluster record %s: %w since revision %d", key, ErrClusterChanged, modRevision)
	}
	return resp.Header.Revision, nil
}
