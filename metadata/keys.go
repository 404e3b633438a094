package metadata

import (
	"errors"
	"fmt"
	"strings"
)

// DefaultPrefix is the etcd key prefix under which every record lives by default.
const DefaultPrefix = "/streamtier"

// StreamPrefix is the etcd prefix (ending in "/") of one stream's records.
func StreamPrefix(etcdPrefix, stream string) string {
	return etcdPrefix + "/streams/" + stream + "/"
}

// AnchorKey is written before the first object under the stream's S3 prefix.
func AnchorKey(etcdPrefix, stream string) string {
	return StreamPrefix(etcdPrefix, stream) + "anchor"
}

// ManifestKey holds the persisted manifest pointer; its Version is the revision.
func ManifestKey(etcdPrefix, stream string) string {
	return StreamPrefix(etcdPrefix, stream) + "manifest"
}

// EpochKey holds the highest epoch that persisted, 20-digit zero-padded decimal.
func EpochKey(etcdPrefix, stream string) string {
	return StreamPrefix(etcdPrefix, stream) + "epoch"
}

// The cluster's own records live beside the streams' under the same etcd prefix.

// MembersPrefix is the etcd prefix (ending in "/") under which every live node has one key.
func MembersPrefix(etcdPrefix string) string { return etcdPrefix + "/members/" }

// MemberKey is the key a node keeps alive under its lease while it is up.
func MemberKey(etcdPrefix, node string) string { return MembersPrefix(etcdPrefix) + node }

// PlacementsPrefix is the etcd prefix (ending in "/") of every stream's placement record.
func PlacementsPrefix(etcdPrefix string) string { return etcdPrefix + "/placements/" }

// PlacementKey holds which node writes a stream at which epoch, and its replicas.
func PlacementKey(etcdPrefix, stream string) string { return PlacementsPrefix(etcdPrefix) + stream }

// TombstonesPrefix is the etcd prefix (ending in "/") of every deleted stream's tombstone.
func TombstonesPrefix(etcdPrefix string) string { return etcdPrefix + "/tombstones/" }

// TombstoneKey holds the tombstone DeleteStream leaves of a stream: it is never deleted.
func TombstoneKey(etcdPrefix, stream string) string { return TombstonesPrefix(etcdPrefix) + stream }

// MaxNodeNameLen is the longest node name accepted.
const MaxNodeNameLen = 200

// ErrInvalidNodeName marks a node name that would be unsafe or ambiguous in a key.
var ErrInvalidNodeName = errors.New("invalid node name")

// ValidateNodeName refuses anything but 1 to 200 characters of [A-Za-z0-9._-], starting with
// a letter or digit and never containing "..", the same rule as stream ids.
func ValidateNodeName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty", ErrInvalidNodeName)
	}
	if len(name) > MaxNodeNameLen {
		return fmt.Errorf("%w: %d characters, at most %d", ErrInvalidNodeName, len(name), MaxNodeNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if i == 0 && !alnum {
			return fmt.Errorf("%w: %q must start with a letter or digit", ErrInvalidNodeName, name)
		}
		if !alnum && c != '.' && c != '_' && c != '-' {
			return fmt.Errorf("%w: %q has character %q at %d (allowed: A-Z a-z 0-9 . _ -)", ErrInvalidNodeName, name, c, i)
		}
	}
	if strings.Contains(name, "..") {
		return fmt.Errorf("%w: %q contains \"..\"", ErrInvalidNodeName, name)
	}
	return nil
}
