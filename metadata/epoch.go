package metadata

import (
	"context"
	"fmt"

	"github.com/streamtier/streamtier/manifest"
)

// ReadEpoch reads the stream's stored epoch: the highest epoch that persisted. found is
// false when none is stored (the stream never persisted, or was deleted); a value that does
// not decode is an error wrapping ErrCorruptRecord. Garbage collection compares it with the
// epoch in object keys: an object of a lower epoch was uploaded by a fenced writer.
func (s *Store) ReadEpoch(ctx context.Context, stream string) (epoch uint64, found bool, err error) {
	if err := manifest.ValidateStreamID(stream); err != nil {
		return 0, false, fmt.Errorf("read epoch: %w", err)
	}
	key := manifest.EtcdEpochKey(s.prefix, stream)
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return 0, false, fmt.Errorf("read epoch %s: %w", stream, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, false, nil
	}
	epoch, err = ParseEpoch(key, resp.Kvs[0].Value)
	if err != nil {
		return 0, false, fmt.Errorf("read epoch %s: %w", stream, err)
	}
	return epoch, true, nil
}
