// Package gc is garbage collection of the remote tier: it lists the objects under the key
// prefix, works out from etcd and the persisted manifests which ones are referenced, and
// names every other object with the reason it is garbage (an upload that never persisted,
// a superseded root, what retention dropped, a deleted stream). Only objects older than a
// grace period are collected, and a stream's prefix without an anchor only after a
// linearizable read confirms it. Deciding is a pure function (Decide); Scan and Delete
// are the shell around it.
package gc

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"streamtier/manifest"
	"streamtier/metadata"
	"streamtier/s3io"
)

// ObjectKind is what a key names.
type ObjectKind string

// Object kinds, as they appear in keys.
const (
	KindFragment  ObjectKind = "fragment"
	KindGroup     ObjectKind = "group"
	KindKiloGroup ObjectKind = "kgroup"
	KindMegaGroup ObjectKind = "mgroup"
	KindRoot      ObjectKind = "root"
)

// Key is a parsed object key of the remote tier.
type Key struct {
	Stream string
	Kind   ObjectKind
	Offset uint64 // first offset (fragments and groups)
	Epoch  uint64 // writer's epoch (roots)
	UID    uint64
}

// ParseKey parses key as remote-format.md lays keys out under keyPrefix, checking the
// hash partition against the stream id; anything else is an error saying what is wrong.
func ParseKey(keyPrefix, key string) (Key, error) {
	rest, ok := strings.CutPrefix(key, keyPrefix+"/")
	if !ok {
		return Key{}, fmt.Errorf("key %q: not under prefix %q", key, keyPrefix+"/")
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 4 {
		return Key{}, fmt.Errorf("key %q: want <h4>/<stream>/data|meta/<name>", key)
	}
	h4, stream, dir, name := parts[0], parts[1], parts[2], parts[3]
	if err := manifest.ValidateStreamID(stream); err != nil {
		return Key{}, fmt.Errorf("key %q: %w", key, err)
	}
	if want := manifest.StreamPrefix(keyPrefix, stream); !strings.HasPrefix(key, want) || len(h4) != 4 {
		return Key{}, fmt.Errorf("key %q: partition %q does not match stream %q (want %s)", key, h4, stream, want)
	}
	k := Key{Stream: stream}
	num := func(s string, digits int, base int) (uint64, error) {
		if len(s) != digits {
			return 0, fmt.Errorf("key %q: %q is not %d digits", key, s, digits)
		}
		v, err := strconv.ParseUint(s, base, 64)
		if err != nil || (base == 16 && strings.ToLower(s) != s) {
			return 0, fmt.Errorf("key %q: %q is not a %d-digit number", key, s, digits)
		}
		return v, nil
	}
	var err error
	switch dir {
	case "data":
		base, ok := strings.CutSuffix(name, ".fragment")
		if !ok {
			return Key{}, fmt.Errorf("key %q: data objects end in .fragment", key)
		}
		k.Kind = KindFragment
		k.Offset, k.UID, err = offUID(base, num)
	case "meta":
		if base, ok := strings.CutSuffix(name, ".manifest"); ok {
			b, ok := strings.CutPrefix(base, "root-")
			if !ok {
				return Key{}, fmt.Errorf("key %q: manifest objects are named root-<epoch>-<uid>.manifest", key)
			}
			k.Kind = KindRoot
			k.Epoch, k.UID, err = offUID(b, num)
			break
		}
		dot := strings.LastIndexByte(name, '.')
		if dot < 0 {
			return Key{}, fmt.Errorf("key %q: no extension", key)
		}
		switch ObjectKind(name[dot+1:]) {
		case KindGroup, KindKiloGroup, KindMegaGroup:
			k.Kind = ObjectKind(name[dot+1:])
		default:
			return Key{}, fmt.Errorf("key %q: unknown object kind %q", key, name[dot+1:])
		}
		k.Offset, k.UID, err = offUID(name[:dot], num)
	default:
		return Key{}, fmt.Errorf("key %q: %q is neither data nor meta", key, dir)
	}
	if err != nil {
		return Key{}, err
	}
	return k, nil
}

func offUID(s string, num func(string, int, int) (uint64, error)) (uint64, uint64, error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, fmt.Errorf("%q: want <20 digits>-<16 hex digits>", s)
	}
	off, err := num(a, 20, 10)
	if err != nil {
		return 0, 0, err
	}
	uid, err := num(b, 16, 16)
	return off, uid, err
}

// StreamState is what etcd and the persisted manifest say about one stream: whether it is
// anchored, its manifest record, and the keys the persisted manifest references.
type StreamState struct {
	Stream   string
	Anchored bool // by a linearizable read
	Recorded bool // a manifest record exists
	Record   metadata.ManifestRecord
	Revision int64
	// Referenced holds the root key, every group holding live offsets and every live
	// fragment of the persisted manifest.
	Referenced map[string]bool
	// Err is set when the references could not be established (a root or group that is
	// missing or corrupt, etcd failing): nothing of the stream is collected then.
	Err error
}

// Orphan is an object garbage collection may delete, with the reason.
type Orphan struct {
	Key          string    `json:"key"`
	Stream       string    `json:"stream"`
	Size         int64     `json:"size"`
	LastModified time.Time `json:"last_modified"`
	Reason       string    `json:"reason"`
}

// Plan is the outcome of deciding over one listing.
type Plan struct {
	Scanned    int              `json:"scanned"`    // objects listed
	Bytes      int64            `json:"bytes"`      // their total size
	Referenced int              `json:"referenced"` // objects a persisted manifest references
	Orphans    []Orphan         `json:"orphans"`    // unreferenced and older than the grace period
	Young      []Orphan         `json:"young"`      // unreferenced but younger than the grace period: kept
	Undecided  []Orphan         `json:"undecided"`  // of streams whose references are unknown: kept
	Foreign    []string         `json:"foreign"`    // keys under the prefix that are not streamtier's layout: never touched
	Revisions  map[string]int64 `json:"-"`          // each stream's manifest revision when decided
}

// Decide names the orphans among objects: those no stream state references, older than
// grace at now. states must hold every stream that has objects in the listing; a stream
// with Err set keeps all its objects (listed as Undecided).
func Decide(objects []s3io.ObjectInfo, keyPrefix string, states map[string]StreamState, now time.Time, grace time.Duration) Plan {
	p := Plan{Scanned: len(objects), Revisions: map[string]int64{}}
	for _, st := range states {
		p.Revisions[st.Stream] = st.Revision
	}
	for _, o := range objects {
		p.Bytes += o.Size
		k, err := ParseKey(keyPrefix, o.Key)
		if err != nil {
			p.Foreign = append(p.Foreign, o.Key)
			continue
		}
		st, ok := states[k.Stream]
		orphan := Orphan{Key: o.Key, Stream: k.Stream, Size: o.Size, LastModified: o.LastModified}
		switch {
		case !ok:
			orphan.Reason = "stream state unknown (not examined)"
			p.Undecided = append(p.Undecided, orphan)
			continue
		case st.Err != nil:
			orphan.Reason = "references unknown: " + st.Err.Error()
			p.Undecided = append(p.Undecided, orphan)
			continue
		case st.Referenced[o.Key]:
			p.Referenced++
			continue
		}
		orphan.Reason = reason(k, st)
		if now.Sub(o.LastModified) < grace {
			p.Young = append(p.Young, orphan)
			continue
		}
		p.Orphans = append(p.Orphans, orphan)
	}
	sort.Slice(p.Orphans, func(i, j int) bool { return p.Orphans[i].Key < p.Orphans[j].Key })
	return p
}

// reason says why an unreferenced object of a stream in state st is garbage.
func reason(k Key, st StreamState) string {
	switch {
	case !st.Anchored:
		return "the stream has no anchor in etcd (deleted, or never created)"
	case !st.Recorded:
		return "the stream never persisted a manifest (uploaded before its first persist)"
	}
	r := st.Record
	switch k.Kind {
	case KindRoot:
		return fmt.Sprintf("superseded root (epoch %d; the manifest record names epoch %d uid %016x)", k.Epoch, r.Epoch, r.RootUID)
	case KindFragment:
		switch {
		case k.Offset >= r.NextOffset:
			return fmt.Sprintf("fragment at %d is at or above the persisted next offset %d: uploaded but never persisted (crash, conflict or lost result)", k.Offset, r.NextOffset)
		case k.Offset < r.FirstOffset:
			return fmt.Sprintf("fragment at %d is below the first offset %d: dropped by retention", k.Offset, r.FirstOffset)
		default:
			return fmt.Sprintf("fragment at %d is not in the persisted manifest: an upload never persisted (crash, conflict or lost result) whose range was uploaded again", k.Offset)
		}
	default:
		if k.Offset < r.FirstOffset {
			return fmt.Sprintf("%s at %d below the first offset %d: dropped by retention", k.Kind, k.Offset, r.FirstOffset)
		}
		return fmt.Sprintf("%s at %d is not in the persisted manifest (a rebalance that never persisted)", k.Kind, k.Offset)
	}
}

// ErrUnknownStream is returned when gc is asked about a stream that has neither objects
// nor records.
var ErrUnknownStream = errors.New("unknown stream")
