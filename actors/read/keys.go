package read

import (
	"context"
	"sync"

	"github.com/streamtier/streamtier/manifest"
)

// DefaultKeysKept bounds the keys a node remembers (Keys): about 2 MB, the keys of 512 GiB
// of 64 MiB fragments.
const DefaultKeysKept = 8192

// Keys remembers the object keys of fragments and groups this node uploaded or its readers
// located, so a read does not LIST the stream's data/ or meta/ directory to find keys the
// node already knows: a manifest entry names its object by kind, offset and uid, the key
// also holds the writer's epoch. An entry names one key forever (the uid is drawn for each
// object), so nothing kept goes stale: an object retention deleted answers 404 through its
// key exactly as it is missing from a listing. Bounded: it keeps the most recently used
// keys, up to its size. Safe for concurrent use; a nil *Keys remembers nothing.
type Keys struct {
	mu       sync.Mutex
	max      int
	cur, old map[keyOf]string // two generations: cur fills to max/2, then becomes old
}

// keyOf identifies an entry of a stream that names an object.
type keyOf struct {
	stream   string
	kind     manifest.Kind
	off, uid uint64
}

// NewKeys returns a cache of up to size keys (DefaultKeysKept when size <= 0).
func NewKeys(size int) *Keys {
	if size <= 0 {
		size = DefaultKeysKept
	}
	return &Keys{max: size, cur: map[keyOf]string{}}
}

// Put remembers the key of stream's entry e, a fragment or a group (a gap names no object).
func (k *Keys) Put(stream string, e manifest.Entry, key string) {
	if k == nil || e.IsGap() || key == "" {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.put(keyOf{stream, e.Kind, e.FirstOffset, e.UID}, key)
}

func (k *Keys) put(id keyOf, key string) {
	if len(k.cur) >= max(k.max/2, 1) {
		k.old, k.cur = k.cur, make(map[keyOf]string, len(k.cur))
	}
	k.cur[id] = key
}

// Get returns the key of stream's entry e, if the node knows it.
func (k *Keys) Get(stream string, e manifest.Entry) (string, bool) {
	if k == nil || e.IsGap() {
		return "", false
	}
	id := keyOf{stream, e.Kind, e.FirstOffset, e.UID}
	k.mu.Lock()
	defer k.mu.Unlock()
	if key, ok := k.cur[id]; ok {
		return key, true
	}
	key, ok := k.old[id]
	if ok {
		delete(k.old, id)
		k.put(id, key) // used: kept through the next generation
	}
	return key, ok
}

// len is the number of keys kept.
func (k *Keys) len() int {
	if k == nil {
		return 0
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.cur) + len(k.old)
}

// children reads and decodes the group object e names, through the key the node knows, or
// one a LIST finds (then kept in Keys).
func (env Env) children(ctx context.Context, e manifest.Entry) ([]manifest.Entry, error) {
	key, ok := env.Keys.Get(env.Stream, e)
	if !ok {
		var err error
		if key, err = env.Tier.Locate(ctx, e); err != nil {
			return nil, err
		}
		env.Keys.Put(env.Stream, e, key)
	}
	return env.Tier.ChildrenAt(ctx, key, e)
}
