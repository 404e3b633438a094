package s3io

import (
	"context"
	"fmt"

	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/manifest"
)

// Tier is one stream's remote tier: the store, the key prefix and the stream id every
// object of the stream lives under. The shells, verify and gc reach a stream's objects
// through it instead of threading the three by hand; it is also the seam an in-memory
// object store will implement. A Tier is a value: copy it freely.
type Tier struct {
	Store     *Store
	KeyPrefix string // manifest.DefaultKeyPrefix when empty
	Stream    string
}

// Tier is the remote tier of stream under keyPrefix in this store.
func (s *Store) Tier(keyPrefix, stream string) Tier {
	return Tier{Store: s, KeyPrefix: keyPrefix, Stream: stream}
}

func (t Tier) prefix() string {
	if t.KeyPrefix == "" {
		return manifest.DefaultKeyPrefix
	}
	return t.KeyPrefix
}

// RootKey is the key of the root object (epoch, uid) of the stream.
func (t Tier) RootKey(epoch, uid uint64) string {
	return manifest.RootKey(t.prefix(), t.Stream, epoch, uid)
}

// FragmentKey is the key of a fragment object of the stream.
func (t Tier) FragmentKey(first, epoch, uid uint64) string {
	return manifest.FragmentKey(t.prefix(), t.Stream, first, epoch, uid)
}

// GroupKey is the key of a group object of the stream.
func (t Tier) GroupKey(kind manifest.Kind, first, epoch, uid uint64) string {
	return manifest.GroupKey(t.prefix(), t.Stream, kind, first, epoch, uid)
}

// Root GETs and decodes the root object (epoch, uid). A root that does not decode is an
// error wrapping manifest.ErrCorrupt that names the key.
func (t Tier) Root(ctx context.Context, epoch, uid uint64) (manifest.Manifest, error) {
	key := t.RootKey(epoch, uid)
	body, err := t.Store.GetObject(ctx, key)
	if err != nil {
		return manifest.Manifest{}, fmt.Errorf("get root s3://%s/%s: %w", t.Store.Bucket(), key, err)
	}
	m, err := manifest.DecodeRoot(body)
	if err != nil {
		return manifest.Manifest{}, fmt.Errorf("root s3://%s/%s: %w", t.Store.Bucket(), key, err)
	}
	return m, nil
}

// Locate finds the key of the object entry e names (see Store.LocateEntry).
func (t Tier) Locate(ctx context.Context, e manifest.Entry) (string, error) {
	return t.Store.LocateEntry(ctx, t.prefix(), t.Stream, e)
}

// Children locates, GETs and decodes the group object g names and returns its entries.
func (t Tier) Children(ctx context.Context, g manifest.Entry) ([]manifest.Entry, error) {
	key, err := t.Locate(ctx, g)
	if err != nil {
		return nil, err
	}
	return t.ChildrenAt(ctx, key, g)
}

// ChildrenAt GETs and decodes the group object g names at key (already located). A group
// that does not decode, or whose kind is not the one g says, is an error wrapping
// manifest.ErrCorrupt that names the key.
func (t Tier) ChildrenAt(ctx context.Context, key string, g manifest.Entry) ([]manifest.Entry, error) {
	body, err := t.Store.GetObject(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("get group s3://%s/%s: %w", t.Store.Bucket(), key, err)
	}
	kind, children, err := manifest.DecodeGroup(body)
	if err != nil {
		return nil, fmt.Errorf("group s3://%s/%s: %w", t.Store.Bucket(), key, err)
	}
	if kind != g.Kind {
		return nil, fmt.Errorf("%w: group s3://%s/%s is a %s, its entry says %s", manifest.ErrCorrupt, t.Store.Bucket(), key, kind, g.Kind)
	}
	return children, nil
}

// Index locates the fragment object f names and reads its index records (a HEAD for the
// object's length, then one ranged GET of the index).
func (t Tier) Index(ctx context.Context, f manifest.Entry) (string, []fragment.IndexRecord, error) {
	key, err := t.Locate(ctx, f)
	if err != nil {
		return "", nil, err
	}
	recs, err := t.Store.ReadFragmentIndex(ctx, key, 0, f.Size)
	return key, recs, err
}
