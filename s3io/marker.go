package s3io

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/strictjson"
)

// Marker is a stream's deletion marker <stream prefix>deleted: the bucket's tombstone,
// written after the etcd tombstone fences the writers and before the etcd records go;
// never deleted, never collected.
type Marker struct {
	Stream    string
	ClusterID string
	Time      time.Time // UTC, when the deletion wrote it
}

type markerJSON struct {
	Stream    *string `json:"stream"`
	ClusterID *string `json:"cluster_id"`
	Time      *string `json:"time"`
}

// EncodeMarker renders m as stored: JSON with the time in RFC 3339 with milliseconds.
func EncodeMarker(m Marker) ([]byte, error) {
	if err := manifest.ValidateStreamID(m.Stream); err != nil {
		return nil, fmt.Errorf("encode deletion marker: %w", err)
	}
	at := m.Time.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	return json.Marshal(markerJSON{Stream: &m.Stream, ClusterID: &m.ClusterID, Time: &at})
}

// DecodeMarker decodes the marker stored under key for stream strictly, wrapping any
// failure in ErrCorruptBucketObject with the key named.
func DecodeMarker(key, stream string, b []byte) (Marker, error) {
	fail := func(err error) (Marker, error) {
		return Marker{}, fmt.Errorf("%w: %s: deletion marker: %w", ErrCorruptBucketObject, key, err)
	}
	var doc markerJSON
	if err := strictjson.Decode(b, &doc); err != nil {
		return fail(err)
	}
	if doc.Stream == nil || doc.ClusterID == nil || doc.Time == nil {
		return fail(errors.New("a field is missing (stream, cluster_id, time)"))
	}
	if *doc.Stream != stream {
		return fail(fmt.Errorf("names stream %q", *doc.Stream))
	}
	at, err := time.Parse(time.RFC3339, *doc.Time)
	if err != nil {
		return fail(fmt.Errorf("time: %w", err))
	}
	return Marker{Stream: stream, ClusterID: *doc.ClusterID, Time: at.UTC()}, nil
}

// CreateMarker writes the stream's deletion marker unless one is there already (a
// deletion completed again finds its own, or an earlier one: either says deleted).
func (s *Store) CreateMarker(ctx context.Context, keyPrefix string, m Marker) error {
	b, err := EncodeMarker(m)
	if err != nil {
		return err
	}
	err = s.PutObjectIfAbsent(ctx, manifest.MarkerKey(keyPrefix, m.Stream), b)
	if errors.Is(err, ErrPreconditionFailed) {
		return nil
	}
	return err
}

// HasMarker asks (one HEAD) whether the stream's deletion marker is there: what every
// resolution and every anchor reads. Its content is not needed to say "deleted".
func (s *Store) HasMarker(ctx context.Context, keyPrefix, stream string) (bool, error) {
	if err := manifest.ValidateStreamID(stream); err != nil {
		return false, fmt.Errorf("deletion marker: %w", err)
	}
	_, err := s.Head(ctx, manifest.MarkerKey(keyPrefix, stream))
	switch {
	case err == nil:
		return true, nil
	case IsNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("deletion marker of %s: %w", stream, err)
}
