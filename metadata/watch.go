package metadata

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// kvChange is one change under a watched prefix: a put (value set) or a delete (value is the
// last value this watcher knew, nil if none).
type kvChange struct {
	key     string
	value   []byte
	deleted bool
}

// prefixWatcher follows every key under a prefix: a snapshot, then changes. When etcd has
// compacted the revision it must resume from (a long disconnect), it lists the prefix again
// and reports the difference, so a consumer never misses a join or a leave.
type prefixWatcher struct {
	cli    *clientv3.Client
	prefix string
	known  map[string][]byte // key -> last value reported
	rev    int64             // every change up to rev has been reported
}

// list reads the prefix at one revision; it retries transient failures until ctx ends or
// the client is closed.
func (w *prefixWatcher) list(ctx context.Context) (*clientv3.GetResponse, error) {
	backoff := 50 * time.Millisecond
	for {
		resp, err := w.cli.Get(ctx, w.prefix, clientv3.WithPrefix())
		if err == nil {
			return resp, nil
		}
		if !IsRetriable(err) || ctx.Err() != nil || w.cli.Ctx().Err() != nil {
			return nil, fmt.Errorf("list %s: %w", w.prefix, err)
		}
		if !sleepCtx(ctx, backoff) {
			return nil, fmt.Errorf("list %s: %w", w.prefix, ctx.Err())
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// start lists the prefix and returns the snapshot as puts, in key order.
func (w *prefixWatcher) start(ctx context.Context) ([]kvChange, error) {
	resp, err := w.list(ctx)
	if err != nil {
		return nil, err
	}
	w.known = make(map[string][]byte, len(resp.Kvs))
	out := make([]kvChange, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		w.known[string(kv.Key)] = kv.Value
		out = append(out, kvChange{key: string(kv.Key), value: kv.Value})
	}
	w.rev = resp.Header.Revision
	return out, nil
}

// resync lists the prefix again and returns what changed against what was reported: the
// deletions first, then the puts, each in key order.
func (w *prefixWatcher) resync(ctx context.Context) ([]kvChange, error) {
	resp, err := w.list(ctx)
	if err != nil {
		return nil, err
	}
	now := make(map[string][]byte, len(resp.Kvs))
	var puts []kvChange
	for _, kv := range resp.Kvs { // in key order
		k := string(kv.Key)
		now[k] = kv.Value
		if old, ok := w.known[k]; !ok || !bytes.Equal(old, kv.Value) {
			puts = append(puts, kvChange{key: k, value: kv.Value})
		}
	}
	var out []kvChange
	for _, k := range slices.Sorted(maps.Keys(w.known)) {
		if _, ok := now[k]; !ok {
			out = append(out, kvChange{key: k, value: w.known[k], deleted: true})
		}
	}
	w.known = now
	w.rev = resp.Header.Revision
	return append(out, puts...), nil
}

// run reports changes after the snapshot to emit until ctx ends, the client is closed or
// emit returns false (then it returns nil). It is the body of the watching goroutine. It
// returns an error only when listing the prefix again failed for good (not retriable).
func (w *prefixWatcher) run(ctx context.Context, emit func(kvChange) bool) error {
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil && w.cli.Ctx().Err() == nil {
		wctx, cancel := context.WithCancel(ctx)
		compacted, stop := w.follow(w.cli.Watch(wctx, w.prefix, clientv3.WithPrefix(), clientv3.WithRev(w.rev+1)), emit)
		cancel()
		if stop {
			return nil
		}
		if compacted {
			// The revision to resume from is gone: list again and report the difference.
			changes, err := w.resync(ctx)
			if err != nil {
				if ctx.Err() != nil || w.cli.Ctx().Err() != nil {
					return nil
				}
				return err
			}
			for _, c := range changes {
				if !emit(c) {
					return nil
				}
			}
			backoff = 50 * time.Millisecond
			continue
		}
		// The watch ended otherwise (canceled by the server): resume after a pause.
		if !sleepCtx(ctx, backoff) {
			return nil
		}
		backoff = min(2*backoff, 2*time.Second)
	}
	return nil
}

// follow applies one watch's responses until it ends; compacted reports that it ended
// because its start revision was compacted, stop that emit refused a change.
func (w *prefixWatcher) follow(wch clientv3.WatchChan, emit func(kvChange) bool) (compacted, stop bool) {
	for resp := range wch {
		if resp.CompactRevision != 0 {
			return true, false
		}
		if resp.Err() != nil {
			return false, false
		}
		for _, ev := range resp.Events {
			k := string(ev.Kv.Key)
			c := kvChange{key: k, value: ev.Kv.Value}
			if ev.Type == clientv3.EventTypeDelete {
				c = kvChange{key: k, value: w.known[k], deleted: true}
				delete(w.known, k)
			} else {
				w.known[k] = ev.Kv.Value
			}
			w.rev = max(w.rev, ev.Kv.ModRevision)
			if !emit(c) {
				return false, true
			}
		}
	}
	return false, false
}

// sleepCtx waits d or until ctx ends; it reports whether the full wait elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
