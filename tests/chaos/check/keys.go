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

// RootKey is the key of a version 1 or 2 root object (a record of version 1 names it by
// the writer's epoch and the root's uid).
func RootKey(keyPrefix, stream string, epoch, uid uint64) string {
	return fmt.Sprintf("%smeta/root-%020d-%016x.manifest", StreamPrefix(keyPrefix, stream), epoch, uid)
}

// SeqRootKey is the key of the version 3 root of seq: one root per seq, ever.
func SeqRootKey(keyPrefix, stream string, seq uint64) string {
	return fmt.Sprintf("%smeta/root-%020d.manifest", StreamPrefix(keyPrefix, stream), seq)
}

// RecordRootKey is the key of the root the record names: by seq from record version 2 on,
// by epoch and uid before.
func RecordRootKey(keyPrefix, stream string, r Record, uid uint64) string {
	if r.Version >= 2 {
		return SeqRootKey(keyPrefix, stream, r.Seq)
	}
	return RootKey(keyPrefix, stream, r.Epoch, uid)
}

// markerName is a stream's deletion marker, right under its prefix.
const markerName = "deleted"

// objKey is a parsed key under a stream prefix: a fragment, a group, a root or the
// deletion marker.
type objKey struct {
	kind   uint8
	first  uint64
	epoch  uint64 // 0 for a version 1 key and a version 3 root
	uid    uint64 // 0 for a version 3 root (its key names only the seq)
	isRoot bool
	seq    uint64 // a version 3 root's seq (0: a version 1 or 2 root)
	marker bool   // the deletion marker
}

var extKinds = map[string]uint8{"fragment": KindFragment, "group": KindGroup, "kgroup": KindKiloGroup, "mgroup": KindMegaGroup}

// parseKey parses a key under a stream prefix (the part after it): data/<off20>-[<epoch20>-]
// <uid16>.fragment, meta/<off20>-[<epoch20>-]<uid16>.group|.kgroup|.mgroup,
// meta/root-<seq20>.manifest (version 3), meta/root-<epoch20>-<uid16>.manifest (versions 1
// and 2) or the deletion marker, deleted.
func parseKey(rel string) (objKey, error) {
	if rel == markerName {
		return objKey{marker: true}, nil
	}
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
		if len(parts) == 1 { // version 3: root-<seq20>
			seq, err := num(parts[0], 20)
			if err != nil {
				return objKey{}, err
			}
			if seq == 0 {
				return objKey{}, fmt.Errorf("key %q: root of seq 0 (seqs start at 1)", rel)
			}
			return objKey{isRoot: true, seq: seq}, nil
		}
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
