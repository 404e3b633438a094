package metadata

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/streamtier/streamtier/manifest"
)

// ManifestRecordVersion is the newest version of the manifest record document: 2, which
// names a version 3 root by seq and uid. A decoder refuses any version it does not know, so
// a binary that reads only version 1 never persists over a version 3 lineage.
const ManifestRecordVersion = 2

// MinManifestRecordVersion is the oldest record version still read: 1, which names a
// version 1 or 2 root by the writer's epoch and the root's uid.
const MinManifestRecordVersion = 1

// ManifestRecord is the persisted manifest pointer: it names the root object and repeats
// the root's summary so that status and resolution need no S3 request. Seq > 0 names a
// version 3 root (manifest.SeqRootKey; record version 2); Seq 0 a version 1 or 2 root by
// Epoch and RootUID (manifest.RootKey; record version 1).
type ManifestRecord struct {
	Seq            uint64 // the root's seq (version 3 roots); 0 for a version 1 or 2 root
	Epoch          uint64 // epoch of the writer that wrote the root object
	RootUID        uint64 // uid of the root object
	FirstOffset    uint64 // first offset held remotely (= NextOffset when nothing is held)
	NextOffset     uint64 // one past the last offset uploaded
	TotalSize      uint64 // sum of live fragments' chunk-region bytes
	FirstTimestamp int64  // oldest chunk's timestamp, ms; -1 when nothing is held
}

// manifestRecordJSON is the document as stored. The uid is 16 lowercase hex digits, as in the
// root object's key, so that tools in languages without 64-bit integers read it exactly.
type manifestRecordJSON struct {
	Version        *int    `json:"version"`
	Seq            *uint64 `json:"seq,omitempty"`
	Epoch          *uint64 `json:"epoch"`
	RootUID        *string `json:"rootUid"`
	FirstOffset    *uint64 `json:"firstOffset"`
	NextOffset     *uint64 `json:"nextOffset"`
	TotalSize      *uint64 `json:"totalSize"`
	FirstTimestamp *int64  `json:"firstTimestamp"`
}

// Validate refuses a record no writer could have produced: first offset above next offset,
// or a first timestamp below -1.
func (r ManifestRecord) Validate() error {
	if r.FirstOffset > r.NextOffset {
		return fmt.Errorf("manifest record: first offset %d above next offset %d", r.FirstOffset, r.NextOffset)
	}
	if r.FirstTimestamp < -1 {
		return fmt.Errorf("manifest record: first timestamp %d below -1", r.FirstTimestamp)
	}
	return nil
}

// RecordVersion is the version of the document r is stored as: 2 when it names a root by
// seq, 1 otherwise.
func (r ManifestRecord) RecordVersion() int {
	if r.Seq > 0 {
		return 2
	}
	return 1
}

// RootKey is the key of the root object the record names under keyPrefix.
func (r ManifestRecord) RootKey(keyPrefix, stream string) string {
	if r.Seq > 0 {
		return manifest.SeqRootKey(keyPrefix, stream, r.Seq)
	}
	return manifest.RootKey(keyPrefix, stream, r.Epoch, r.RootUID)
}

// MarshalJSON encodes the record as its stored document: version 2 with the seq when it
// names a version 3 root, version 1 otherwise.
func (r ManifestRecord) MarshalJSON() ([]byte, error) {
	v := r.RecordVersion()
	uid := fmt.Sprintf("%016x", r.RootUID)
	var seq *uint64
	if r.Seq > 0 {
		seq = &r.Seq
	}
	return json.Marshal(manifestRecordJSON{
		Version: &v, Seq: seq, Epoch: &r.Epoch, RootUID: &uid, FirstOffset: &r.FirstOffset,
		NextOffset: &r.NextOffset, TotalSize: &r.TotalSize, FirstTimestamp: &r.FirstTimestamp,
	})
}

// UnmarshalJSON decodes a stored document strictly: every field present, no unknown field,
// version 1 (no seq) or 2 (a seq of at least 1), a 16-hex-digit uid, nothing after the
// document, and a valid record.
func (r *ManifestRecord) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var doc manifestRecordJSON
	if err := dec.Decode(&doc); err != nil {
		return fmt.Errorf("manifest record: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("manifest record: data after the document")
	}
	missing := func(name string) error { return fmt.Errorf("manifest record: field %q missing", name) }
	switch {
	case doc.Version == nil:
		return missing("version")
	case *doc.Version < MinManifestRecordVersion || *doc.Version > ManifestRecordVersion:
		return fmt.Errorf("manifest record: version %d, this build reads versions %d to %d", *doc.Version, MinManifestRecordVersion, ManifestRecordVersion)
	case *doc.Version == 1 && doc.Seq != nil:
		return errors.New("manifest record: version 1 with a seq (a seq came with version 2)")
	case *doc.Version == 2 && doc.Seq == nil:
		return missing("seq")
	case *doc.Version == 2 && *doc.Seq == 0:
		return errors.New("manifest record: version 2 with seq 0 (seqs start at 1)")
	case doc.Epoch == nil:
		return missing("epoch")
	case doc.RootUID == nil:
		return missing("rootUid")
	case doc.FirstOffset == nil:
		return missing("firstOffset")
	case doc.NextOffset == nil:
		return missing("nextOffset")
	case doc.TotalSize == nil:
		return missing("totalSize")
	case doc.FirstTimestamp == nil:
		return missing("firstTimestamp")
	}
	uid, err := parseHexUID(*doc.RootUID)
	if err != nil {
		return err
	}
	rec := ManifestRecord{
		Epoch: *doc.Epoch, RootUID: uid, FirstOffset: *doc.FirstOffset,
		NextOffset: *doc.NextOffset, TotalSize: *doc.TotalSize, FirstTimestamp: *doc.FirstTimestamp,
	}
	if doc.Seq != nil {
		rec.Seq = *doc.Seq
	}
	if err := rec.Validate(); err != nil {
		return err
	}
	*r = rec
	return nil
}

func parseHexUID(s string) (uint64, error) {
	if len(s) != 16 {
		return 0, fmt.Errorf("manifest record: rootUid %q is not 16 hex digits", s)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return 0, fmt.Errorf("manifest record: rootUid %q has %q at %d (lowercase hex only)", s, c, i)
		}
	}
	return strconv.ParseUint(s, 16, 64)
}

// DecodeManifestRecord decodes the stored value of key, wrapping any failure in
// ErrCorruptRecord with the key named.
func DecodeManifestRecord(key string, value []byte) (ManifestRecord, error) {
	var rec ManifestRecord
	if err := rec.UnmarshalJSON(value); err != nil {
		return ManifestRecord{}, fmt.Errorf("%w: %s: %w", ErrCorruptRecord, key, err)
	}
	return rec, nil
}

// FormatEpoch renders an epoch as stored in the epoch key: 20 decimal digits, zero-padded, so
// that byte order equals numeric order and etcd can compare it in a transaction.
func FormatEpoch(epoch uint64) string { return fmt.Sprintf("%020d", epoch) }

// ParseEpoch decodes a stored epoch value, wrapping any failure in ErrCorruptRecord with the
// key named.
func ParseEpoch(key string, value []byte) (uint64, error) {
	if len(value) != 20 {
		return 0, fmt.Errorf("%w: %s: epoch %q is not 20 decimal digits", ErrCorruptRecord, key, value)
	}
	for i, c := range value {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: %s: epoch %q has %q at %d", ErrCorruptRecord, key, value, c, i)
		}
	}
	e, err := strconv.ParseUint(string(value), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: epoch %q: %w", ErrCorruptRecord, key, value, err)
	}
	return e, nil
}
