package manifest

import (
	"fmt"
	"strconv"
	"strings"
)

// ObjectKind is what an object key names, as its extension says.
type ObjectKind string

// Object kinds, as they appear in keys.
const (
	ObjectFragment  ObjectKind = "fragment"
	ObjectGroup     ObjectKind = "group"
	ObjectKiloGroup ObjectKind = "kgroup"
	ObjectMegaGroup ObjectKind = "mgroup"
	ObjectRoot      ObjectKind = "root"
	// ObjectMarker is a stream's deletion marker (<stream prefix>deleted), never collected.
	ObjectMarker ObjectKind = "deleted"
)

// ObjectKey is a parsed object key of the remote tier.
type ObjectKey struct {
	Stream string
	Kind   ObjectKind
	// KeyVersion is 1 for the fragment and group keys of earlier buckets (<off20>-<uid16>,
	// no epoch: Epoch is then 0) and 2 for keys that carry the writer's epoch; root keys
	// of versions 1 and 2 (root-<epoch20>-<uid16>) parse as version 2, version 3 root keys
	// (root-<seq20>, Seq set, Epoch and UID in the object only) as version 3. A deletion
	// marker has version 0.
	KeyVersion int
	Offset     uint64 // first offset (fragments and groups)
	Epoch      uint64 // the uploading writer's epoch (version 2 keys)
	UID        uint64
	Seq        uint64 // a version 3 root's seq
}

// EntryKind is the manifest entry kind naming an object of this key; false for a root.
func (k ObjectKey) EntryKind() (Kind, bool) {
	switch k.Kind {
	case ObjectFragment:
		return KindFragment, true
	case ObjectGroup:
		return KindGroup, true
	case ObjectKiloGroup:
		return KindKiloGroup, true
	case ObjectMegaGroup:
		return KindMegaGroup, true
	}
	return 0, false
}

// Names reports whether this key is of the object entry e names: same kind, first offset
// and uid (entries do not carry the epoch). A gap entry names no object.
func (k ObjectKey) Names(e Entry) bool {
	kind, ok := k.EntryKind()
	return ok && kind == e.Kind && k.Offset == e.FirstOffset && k.UID == e.UID
}

// EntryListPrefix is the prefix <stream prefix>data/<off20>- (fragments) or
// <stream prefix>meta/<off20>- (groups) under which both the version 1 and the version 2
// key of the object e names sort: listing it and keeping the key that Names e finds it.
func EntryListPrefix(keyPrefix, stream string, e Entry) string {
	dir := "meta/"
	if e.Kind == KindFragment {
		dir = "data/"
	}
	return fmt.Sprintf("%s%s%020d-", StreamPrefix(keyPrefix, stream), dir, e.FirstOffset)
}

// ParseKey parses key as remote-format.md lays keys out under keyPrefix (version 1 and
// version 2 fragment and group keys, root keys of versions 1 to 3, deletion markers; the
// claim is not a stream's key and is refused), checking the hash partition against the
// stream id; anything else is an error saying what is wrong.
func ParseKey(keyPrefix, key string) (ObjectKey, error) {
	rest, ok := strings.CutPrefix(key, keyPrefix+"/")
	if !ok {
		return ObjectKey{}, fmt.Errorf("key %q: not under prefix %q", key, keyPrefix+"/")
	}
	parts := strings.Split(rest, "/")
	if len(parts) == 3 && parts[2] == string(ObjectMarker) {
		return parseMarkerKey(keyPrefix, key, parts[0], parts[1])
	}
	if len(parts) != 4 {
		return ObjectKey{}, fmt.Errorf("key %q: want <h4>/<stream>/data|meta/<name> or <h4>/<stream>/deleted", key)
	}
	h4, stream, dir, name := parts[0], parts[1], parts[2], parts[3]
	if err := ValidateStreamID(stream); err != nil {
		return ObjectKey{}, fmt.Errorf("key %q: %w", key, err)
	}
	if want := StreamPrefix(keyPrefix, stream); !strings.HasPrefix(key, want) || len(h4) != 4 {
		return ObjectKey{}, fmt.Errorf("key %q: partition %q does not match stream %q (want %s)", key, h4, stream, want)
	}
	k := ObjectKey{Stream: stream}
	var err error
	switch dir {
	case "data":
		base, ok := strings.CutSuffix(name, ".fragment")
		if !ok {
			return ObjectKey{}, fmt.Errorf("key %q: data objects end in .fragment", key)
		}
		k.Kind = ObjectFragment
		k.KeyVersion, k.Offset, k.Epoch, k.UID, err = parseName(base)
	case "meta":
		if base, ok := strings.CutSuffix(name, ".manifest"); ok {
			b, ok := strings.CutPrefix(base, "root-")
			if !ok {
				return ObjectKey{}, fmt.Errorf("key %q: manifest objects are named root-<seq20>.manifest or root-<epoch20>-<uid16>.manifest", key)
			}
			k.Kind = ObjectRoot
			if !strings.Contains(b, "-") {
				k.KeyVersion = 3
				k.Seq, err = number(b, 20, 10)
				if err == nil && k.Seq == 0 {
					err = fmt.Errorf("%q: seq 0 (seqs start at 1)", b)
				}
				break
			}
			var v int
			if v, k.Epoch, _, k.UID, err = parseName(b); err == nil && v != 1 {
				err = fmt.Errorf("%q: want <20 digits>-<16 hex digits>", b)
			}
			k.KeyVersion = 2
			break
		}
		dot := strings.LastIndexByte(name, '.')
		if dot < 0 {
			return ObjectKey{}, fmt.Errorf("key %q: no extension", key)
		}
		switch ObjectKind(name[dot+1:]) {
		case ObjectGroup, ObjectKiloGroup, ObjectMegaGroup:
			k.Kind = ObjectKind(name[dot+1:])
		default:
			return ObjectKey{}, fmt.Errorf("key %q: unknown object kind %q", key, name[dot+1:])
		}
		k.KeyVersion, k.Offset, k.Epoch, k.UID, err = parseName(name[:dot])
	default:
		return ObjectKey{}, fmt.Errorf("key %q: %q is neither data nor meta", key, dir)
	}
	if err != nil {
		return ObjectKey{}, fmt.Errorf("key %q: %w", key, err)
	}
	return k, nil
}

// parseMarkerKey parses <key-prefix>/<h4>/<stream>/deleted, checking the partition.
func parseMarkerKey(keyPrefix, key, h4, stream string) (ObjectKey, error) {
	if err := ValidateStreamID(stream); err != nil {
		return ObjectKey{}, fmt.Errorf("key %q: %w", key, err)
	}
	if want := MarkerKey(keyPrefix, stream); key != want || len(h4) != 4 {
		return ObjectKey{}, fmt.Errorf("key %q: partition %q does not match stream %q (want %s)", key, h4, stream, want)
	}
	return ObjectKey{Stream: stream, Kind: ObjectMarker}, nil
}

// parseName parses <off20>-<uid16> (version 1) or <off20>-<epoch20>-<uid16> (version 2).
func parseName(s string) (version int, off, epoch, uid uint64, err error) {
	parts := strings.Split(s, "-")
	if len(parts) != 2 && len(parts) != 3 {
		return 0, 0, 0, 0, fmt.Errorf("%q: want <20 digits>-[<20 digits>-]<16 hex digits>", s)
	}
	if off, err = number(parts[0], 20, 10); err != nil {
		return 0, 0, 0, 0, err
	}
	if len(parts) == 3 {
		if epoch, err = number(parts[1], 20, 10); err != nil {
			return 0, 0, 0, 0, err
		}
	}
	if uid, err = number(parts[len(parts)-1], 16, 16); err != nil {
		return 0, 0, 0, 0, err
	}
	return len(parts) - 1, off, epoch, uid, nil
}

// number parses exactly digits digits of base (lowercase hex for base 16).
func number(s string, digits, base int) (uint64, error) {
	if len(s) != digits {
		return 0, fmt.Errorf("%q is not %d digits", s, digits)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || base == 16 && c >= 'a' && c <= 'f') {
			return 0, fmt.Errorf("%q is not a %d-digit number", s, digits)
		}
	}
	v, err := strconv.ParseUint(s, base, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a %d-digit number: %w", s, digits, err)
	}
	return v, nil
}

// KeyIndex resolves manifest entries to object keys from one listing of a stream's prefix:
// what tools that list a whole prefix anyway (gc, verify) use instead of a LIST per entry.
// The zero value is not usable; make one with NewKeyIndex.
type KeyIndex struct {
	keyPrefix string
	byUID     map[uint64][]indexedKey
}

type indexedKey struct {
	key string
	k   ObjectKey
}

// NewKeyIndex makes an empty index of keys under keyPrefix.
func NewKeyIndex(keyPrefix string) *KeyIndex {
	return &KeyIndex{keyPrefix: keyPrefix, byUID: map[uint64][]indexedKey{}}
}

// Add parses key and indexes it if it is a fragment or group; it returns the parsed key
// (roots and markers are parsed but not indexed) or the parse error.
func (x *KeyIndex) Add(key string) (ObjectKey, error) {
	k, err := ParseKey(x.keyPrefix, key)
	if err != nil {
		return k, err
	}
	if _, entry := k.EntryKind(); entry {
		x.byUID[k.UID] = append(x.byUID[k.UID], indexedKey{key: key, k: k})
	}
	return k, nil
}

// Lookup returns the indexed key of the object e of stream names (false when none is
// indexed). Should two keys name it (an object copied under both layouts), the first added
// is returned.
func (x *KeyIndex) Lookup(stream string, e Entry) (string, bool) {
	for _, ik := range x.byUID[e.UID] {
		if ik.k.Stream == stream && ik.k.Names(e) {
			return ik.key, true
		}
	}
	return "", false
}
