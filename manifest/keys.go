package manifest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// MaxStreamIDLen is the longest stream id accepted.
const MaxStreamIDLen = 200

// DefaultKeyPrefix is the S3 key prefix under which every stream lives by default.
const DefaultKeyPrefix = "streams"

// ErrInvalidStreamID marks a stream id that would be unsafe or ambiguous in a key.
var ErrInvalidStreamID = errors.New("invalid stream id")

// ValidateStreamID refuses anything but 1 to 200 characters of [A-Za-z0-9._-], starting with a
// letter or digit and never containing "..", before any I/O is done with it.
func ValidateStreamID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty", ErrInvalidStreamID)
	}
	if len(id) > MaxStreamIDLen {
		return fmt.Errorf("%w: %d characters, at most %d", ErrInvalidStreamID, len(id), MaxStreamIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if i == 0 && !alnum {
			return fmt.Errorf("%w: %q must start with a letter or digit", ErrInvalidStreamID, id)
		}
		if !alnum && c != '.' && c != '_' && c != '-' {
			return fmt.Errorf("%w: %q has character %q at %d (allowed: A-Z a-z 0-9 . _ -)", ErrInvalidStreamID, id, c, i)
		}
	}
	if strings.Contains(id, "..") {
		return fmt.Errorf("%w: %q contains \"..\"", ErrInvalidStreamID, id)
	}
	return nil
}

// StreamPrefix is the S3 prefix (ending in "/") that holds every object of one stream:
// <key-prefix>/<h4>/<stream-id>/, where h4 spreads streams over key partitions.
func StreamPrefix(keyPrefix, stream string) string {
	sum := sha256.Sum256([]byte(stream))
	return keyPrefix + "/" + hex.EncodeToString(sum[:2]) + "/" + stream + "/"
}

// FragmentKey is the S3 key (version 2) of a fragment object uploaded by a writer at epoch:
// <stream prefix>data/<off20>-<epoch20>-<uid16>.fragment.
func FragmentKey(keyPrefix, stream string, firstOffset, epoch, uid uint64) string {
	return fmt.Sprintf("%sdata/%020d-%020d-%016x.fragment", StreamPrefix(keyPrefix, stream), firstOffset, epoch, uid)
}

// GroupKey is the S3 key (version 2) of a group, kilo-group or mega-group object uploaded by
// a writer at epoch: <stream prefix>meta/<off20>-<epoch20>-<uid16>.group|.kgroup|.mgroup.
func GroupKey(keyPrefix, stream string, kind Kind, firstOffset, epoch, uid uint64) string {
	return fmt.Sprintf("%smeta/%020d-%020d-%016x.%s", StreamPrefix(keyPrefix, stream), firstOffset, epoch, uid, kind)
}

// RootKey is the S3 key of a root manifest object written by a writer at epoch.
func RootKey(keyPrefix, stream string, epoch, uid uint64) string {
	return fmt.Sprintf("%smeta/root-%020d-%016x.manifest", StreamPrefix(keyPrefix, stream), epoch, uid)
}
