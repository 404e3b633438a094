package actors

import (
	"context"

	"streamtier/manifest"
)

// locate finds the key of the object an existing entry names (entries do not carry the
// uploader's epoch: one listing of the entry's offset finds it).
func (n *Node) locate(ctx context.Context, stream string, e manifest.Entry) (string, error) {
	return n.store.LocateEntry(ctx, n.cfg.KeyPrefix, stream, e)
}

// newObjectKey is the key of a new fragment object for entry e written by a writer at epoch.
func (n *Node) newObjectKey(stream string, e manifest.Entry, epoch uint64) string {
	return manifest.FragmentKey(n.cfg.KeyPrefix, stream, e.FirstOffset, epoch, e.UID)
}
