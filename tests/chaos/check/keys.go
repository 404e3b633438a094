package check

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// StreamPrefix is a stream's S3 prefix: <key-prefix>/<h4>/<stream>/ where h4 is the first
// four hex digits of SHA-256 of the stream id.
func StreamPrefix(keyPrefix, stream string) string {
	sum := sha256.Sum256([]byte(stream))
	return keyPrefix + "/" + hex.EncodeToString(sum[:])[:4] + "/" + stream + "/"
}

// RootKey is the key of the root object a manifest record names.
func RootKey(keyPrefix, stream string, epoch, uid uint64) string {
	return fmt.Sprintf("%smeta/root-%020d-%016x.manifest", StreamPrefix(keyPrefix, stream), epoch, uid)
}

// objKey is a parsed fragment or group key.
type objKey struct {
	kind   uint8
	first  uint64
	epoch  uint64 // 0 for a version 1 key
	uid    uint64
	isRoot bool
}

var extKinds = map[string]uint8{"fragment": KindFragment, "group": KindGroup, "kgroup": KindKiloGroup, "mgroup": KindMegaGroup}

// parseKey parses a key under a stream prefix (the part after it): data/<off20>-[<epoch20>-]
// <uid16>.fragment, meta/<off20>-[<epoch20>-]<uid16>.group|.kgroup|.mgroup or
// meta/root-<epoch20>-<uid16>.manifest.
func parseKey(rel string) (objKey, error) {
	dir, name, ok := strings.Cut(rel, "/")
	if !ok {
		return objKey{}, fmt.Errorf("key %q: no directory", rel)
	}
	base, ext, ok := strings.Cut(name, ".")
	if !ok {
		return objKey{}, fmt.Errorf("key %q: no extension", rel)
	}
	num := func(s string, digits int) (uint64, error) {
		if len(s) != digits {
			return 0, fmt.Errorf("key %q: %q is not %d digits", rel, s, digits)
		}
		if digits == 16 {
			return strconv.ParseUint(s, 16, 64)
		}
		return strconv.ParseUint(s, 10, 64)
	}
	if dir == "meta" && ext == "manifest" && strings.HasPrefix(base, "root-") {
		parts := strings.Split(strings.TrimPrefix(base, "root-"), "-")
		if len(parts) != 2 {
			return objKey{}, fmt.Errorf("key %q: bad root name", rel)
		}
		ep, err := num(parts[0], 20)
		if err != nil {
			return objKey{}, err
		}
		uid, err := num(parts[1], 16)
		if err != nil {
			return objKey{}, err
		}
		return objKey{isRoot: true, epoch: ep, uid: uid}, nil
	}
	kind, ok := extKinds[ext]
	if !ok || (kind == KindFragment) != (dir == "data") || (dir != "data" && dir != "meta") {
		return objKey{}, fmt.Errorf("key %q: not a streamtier object", rel)
	}
	parts := strings.Split(base, "-")
	k := objKey{kind: kind}
	var err error
	switch len(parts) {
	case 2: // version 1: <off20>-<uid16>
		if k.first, err = num(parts[0], 20); err == nil {
			k.uid, err = num(parts[1], 16)
		}
	case 3:
		if k.first, err = num(parts[0], 20); err == nil {
			if k.epoch, err = num(parts[1], 20); err == nil {
				k.uid, err = num(parts[2], 16)
			}
		}
	default:
		err = fmt.Errorf("key %q: bad object name", rel)
	}
	return k, err
}

// entryRef identifies the object an entry names: kind, first offset and uid.
type entryRef struct {
	kind  uint8
	first uint64
	uid   uint64
}
