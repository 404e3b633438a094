package s3io

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/strictjson"
)

// ClaimFormat is the format the bucket claim's "format" field carries.
const ClaimFormat = 3

// ErrCorruptBucketObject marks a claim or deletion marker that does not decode; the error
// names the key. Such an object is never read as absent.
var ErrCorruptBucketObject = errors.New("corrupt bucket object")

// Claim is the bucket claim <key-prefix>/claim: which cluster (id and generation) owns the
// key prefix, with the etcd prefix it keeps its records under, for an operator reading it.
type Claim struct {
	ClusterID  string    // 32 lowercase hex digits (128 random bits)
	Generation uint64    // 1 at creation; +1 per takeover or restore
	EtcdPrefix string    // the owning cluster's etcd prefix
	Created    time.Time // UTC
	ETag       string    // as read (for a conditional replace); not stored
}

type claimJSON struct {
	Format     *int    `json:"format"`
	ClusterID  *string `json:"cluster_id"`
	Generation *uint64 `json:"generation"`
	EtcdPrefix *string `json:"etcd_prefix"`
	Created    *string `json:"created"`
}

// EncodeClaim renders c as stored: JSON with format 3 and the creation time in RFC 3339.
func EncodeClaim(c Claim) ([]byte, error) {
	if err := manifest.ValidateClusterID(c.ClusterID); err != nil {
		return nil, fmt.Errorf("encode claim: %w", err)
	}
	if c.Generation == 0 {
		return nil, errors.New("encode claim: generation 0 (generations start at 1)")
	}
	f, created := ClaimFormat, c.Created.UTC().Format(time.RFC3339)
	return json.Marshal(claimJSON{Format: &f, ClusterID: &c.ClusterID, Generation: &c.Generation, EtcdPrefix: &c.EtcdPrefix, Created: &created})
}

// DecodeClaim decodes the claim stored under key strictly (every field, no other, format 3,
// a valid id, a generation of at least 1, an RFC 3339 time), wrapping any failure in
// ErrCorruptBucketObject with the key named.
func DecodeClaim(key string, b []byte) (Claim, error) {
	fail := func(err error) (Claim, error) {
		return Claim{}, fmt.Errorf("%w: %s: claim: %w", ErrCorruptBucketObject, key, err)
	}
	var doc claimJSON
	if err := strictjson.Decode(b, &doc); err != nil {
		return fail(err)
	}
	switch {
	case doc.Format == nil || doc.ClusterID == nil || doc.Generation == nil || doc.EtcdPrefix == nil || doc.Created == nil:
		return fail(errors.New("a field is missing (format, cluster_id, generation, etcd_prefix, created)"))
	case *doc.Format != ClaimFormat:
		return fail(fmt.Errorf("format %d, this build reads format %d", *doc.Format, ClaimFormat))
	case *doc.Generation == 0:
		return fail(errors.New("generation 0"))
	}
	if err := manifest.ValidateClusterID(*doc.ClusterID); err != nil {
		return fail(err)
	}
	created, err := time.Parse(time.RFC3339, *doc.Created)
	if err != nil {
		return fail(fmt.Errorf("created: %w", err))
	}
	return Claim{ClusterID: *doc.ClusterID, Generation: *doc.Generation, EtcdPrefix: *doc.EtcdPrefix, Created: created.UTC()}, nil
}

// NewClusterID draws a random 128-bit cluster id from r (crypto/rand.Reader in production).
func NewClusterID(r io.Reader) (string, error) {
	var b [16]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "", fmt.Errorf("draw cluster id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// CreateClaim writes the claim of keyPrefix only if there is none (If-None-Match: *); a
// claim already there is an error wrapping ErrPreconditionFailed.
func (s *Store) CreateClaim(ctx context.Context, keyPrefix string, c Claim) error {
	b, err := EncodeClaim(c)
	if err != nil {
		return err
	}
	return s.PutObjectIfAbsent(ctx, manifest.ClaimKey(keyPrefix), b)
}

// ReadClaim reads the claim of keyPrefix with its ETag; found is false when there is none.
// A claim that does not decode is an error wrapping ErrCorruptBucketObject.
func (s *Store) ReadClaim(ctx context.Context, keyPrefix string) (c Claim, found bool, err error) {
	key := manifest.ClaimKey(keyPrefix)
	b, info, err := s.GetObjectInfo(ctx, key)
	if IsNotFound(err) {
		return Claim{}, false, nil
	}
	if err != nil {
		return Claim{}, false, fmt.Errorf("read claim: %w", err)
	}
	if c, err = DecodeClaim(key, b); err != nil {
		return Claim{}, false, err
	}
	c.ETag = info.ETag
	return c, true, nil
}

// ReplaceClaim writes next over the claim read as prev, only if it is still that one
// (If-Match on prev.ETag): a takeover or a restore bumps the generation this way. A claim
// changed meanwhile is an error wrapping ErrPreconditionFailed.
func (s *Store) ReplaceClaim(ctx context.Context, keyPrefix string, prev, next Claim) error {
	b, err := EncodeClaim(next)
	if err != nil {
		return err
	}
	return s.PutObjectIfMatch(ctx, manifest.ClaimKey(keyPrefix), b, prev.ETag)
}
