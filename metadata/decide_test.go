package metadata

import (
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// TestDecidePersist covers the pure decision taken from a failed transaction's read-back.
func TestDecidePersist(t *testing.T) {
	mine := ManifestRecord{Epoch: 5, RootUID: 1, NextOffset: 10, FirstTimestamp: -1}
	theirs := ManifestRecord{Epoch: 6, RootUID: 2, NextOffset: 20, FirstTimestamp: -1}
	enc := func(r ManifestRecord) []byte { b, _ := r.MarshalJSON(); return b }
	kv := func(version int64, v []byte) *mvccpb.KeyValue { return &mvccpb.KeyValue{Version: version, Value: v} }
	ep := func(e uint64) *mvccpb.KeyValue { return kv(1, []byte(FormatEpoch(e))) }
	for _, tc := range []struct {
		name     string
		expected int64
		rb       readBack
		want     PersistResult
		wantErr  error
	}{
		{"anchor gone, first persist", 0, readBack{}, PersistResult{Outcome: PersistNotFound}, nil},
		{"anchor gone after success", 3, readBack{}, PersistResult{Outcome: PersistNotFound}, nil},
		{"manifest gone after success", 3, readBack{anchor: true}, PersistResult{Outcome: PersistNotFound}, nil},
		{"someone created first", 0, readBack{anchor: true, manifest: kv(1, enc(theirs)), epoch: ep(6)},
			PersistResult{Outcome: PersistConflict, Revision: 1, StoredEpoch: 6, Stored: theirs}, nil},
		{"someone persisted since", 3, readBack{anchor: true, manifest: kv(4, enc(theirs)), epoch: ep(6)},
			PersistResult{Outcome: PersistConflict, Revision: 4, StoredEpoch: 6, Stored: theirs}, nil},
		{"fenced by a higher epoch at my revision", 3, readBack{anchor: true, manifest: kv(3, enc(theirs)), epoch: ep(6)},
			PersistResult{Outcome: PersistConflict, Revision: 3, StoredEpoch: 6, Stored: theirs}, nil},
		{"my earlier attempt applied", 3, readBack{anchor: true, manifest: kv(4, enc(mine)), epoch: ep(5)},
			PersistResult{Outcome: PersistOK, Revision: 4, StoredEpoch: 5}, nil},
		{"my earlier first attempt applied", 0, readBack{anchor: true, manifest: kv(1, enc(mine)), epoch: ep(5)},
			PersistResult{Outcome: PersistOK, Revision: 1, StoredEpoch: 5}, nil},
		{"my record but two versions on is not mine", 3, readBack{anchor: true, manifest: kv(5, enc(mine)), epoch: ep(5)},
			PersistResult{Outcome: PersistConflict, Revision: 5, StoredEpoch: 5, Stored: mine}, nil},
		{"epoch without manifest on creation", 0, readBack{anchor: true, epoch: ep(6)},
			PersistResult{Outcome: PersistConflict, StoredEpoch: 6}, nil},
		{"tombstone first", 0, readBack{tombstone: kv(1, []byte("garbage"))}, PersistResult{Outcome: PersistDeleted}, nil},
		{"tombstone wins over records", 3, readBack{anchor: true, manifest: kv(3, enc(mine)), epoch: ep(5), tombstone: kv(1, []byte("{"))},
			PersistResult{Outcome: PersistDeleted}, nil},
		{"garbage epoch", 3, readBack{anchor: true, manifest: kv(4, enc(theirs)), epoch: kv(1, []byte("x"))}, PersistResult{}, ErrCorruptRecord},
		{"garbage manifest", 3, readBack{anchor: true, manifest: kv(4, []byte("{")), epoch: ep(6)}, PersistResult{}, ErrCorruptRecord},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.rb.manifestKey, tc.rb.epochKey, tc.rb.tombKey, tc.rb.stream = "m", "e", "t", "s1"
			got, err := decidePersist(5, tc.expected, enc(mine), tc.rb)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
