package actors

import (
	"context"

	"streamtier/manifest"
)

// locate finds the key of the object an existing entry names.
func (n *Node) locate(ctx context.Context, stream string, e manifest.Entry) (string, error) {
	return manifest.EntryKey(n.cfg.KeyPrefix, stream, e), nil
}

// newObjectKey is the key of a new object for entry e written by a writer at epoch.
func (n *Node) newObjectKey(stream string, e manifest.Entry, epoch uint64) string {
	return manifest.EntryKey(n.cfg.KeyPrefix, stream, e)
}
