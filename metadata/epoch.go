package metadata

import (
	clientv3 "go.etcd.io/etcd/client/v3"

	"context"
	"fmt"
	"time"

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
	key := EpochKey(s.prefix, stream)
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

// WatchEpoch blocks until the stream's stored epoch is above epoch and returns it: how a
// writer learns that a higher epoch persisted (it is fenced) without polling. etcd faults
// and lost watches are retried with backoff until ctx ends (then ctx's error); a stored
// value that does not parse is handed to unreadable (nil: ignored) and waited past.
func (s *Store) WatchEpoch(ctx context.Context, stream string, epoch uint64, unreadable func(error)) (uint64, error) {
	key := EpochKey(s.prefix, stream)
	above := func(value []byte) (uint64, bool) {
		stored, err := ParseEpoch(key, value)
		if err != nil {
			if unreadable != nil {
				unreadable(err)
			}
			return 0, false
		}
		return stored, stored > epoch
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		resp, err := s.cli.Get(ctx, key)
		if err != nil {
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return 0, ctx.Err()
			case <-t.C:
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if len(resp.Kvs) > 0 {
			if stored, ok := above(resp.Kvs[0].Value); ok {
				return stored, nil
			}
		}
		for wr := range s.cli.Watch(ctx, key, clientv3.WithRev(resp.Header.Revision+1)) {
			if wr.Err() != nil {
				break // compacted or lost: read again
			}
			for _, ev := range wr.Events {
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				if stored, ok := above(ev.Kv.Value); ok {
					return stored, nil
				}
			}
		}
	}
	return 0, ctx.Err()
}
