package metadata

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/manifest"
)

// StreamPage is one page of ListStreams.
type StreamPage struct {
	// Streams are the ids of the page, in etcd key order (the order of "<id>/", which
	// differs from plain string order only for ids continuing with '-' or '.').
	Streams []string
	// After is what to pass as ListStreams' after for the next page; "" when this page is
	// the last.
	After string
}

// listBatch is how many keys one range request reads; a stream has about three.
const listBatch = 512

// ListStreams lists up to limit streams that have records in etcd (an anchor, a manifest
// record or an epoch), starting after the stream named after ("" for the first page). A
// deleted stream keeps only its tombstone (ReadTombstone) and is not listed. One call reads
// at one etcd revision; pages read at different ones, so a stream created or deleted
// between two calls may be missed or seen, never listed twice.
func (s *Store) ListStreams(ctx context.Context, after string, limit int) (StreamPage, error) {
	if limit <= 0 {
		return StreamPage{}, fmt.Errorf("list streams: limit %d: want at least 1", limit)
	}
	base := s.prefix + "/streams/"
	from := base
	if after != "" {
		if err := manifest.ValidateStreamID(after); err != nil {
			return StreamPage{}, fmt.Errorf("list streams after: %w", err)
		}
		// Past every key of after: "<after>/" with its '/' raised to '0'.
		from = clientv3.GetPrefixRangeEnd(StreamPrefix(s.prefix, after))
	}
	end := clientv3.GetPrefixRangeEnd(base)
	var page StreamPage
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(listBatch),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := s.cli.Get(ctx, from, opts...)
		if err != nil {
			return StreamPage{}, fmt.Errorf("list streams under %s: %w", base, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			id, _, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), base), "/")
			if !ok || id == "" {
				continue // not a stream record
			}
			if n := len(page.Streams); n > 0 && page.Streams[n-1] == id {
				continue
			}
			if len(page.Streams) == limit {
				page.After = page.Streams[limit-1]
				return page, nil
			}
			page.Streams = append(page.Streams, id)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return page, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}
