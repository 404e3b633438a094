// Package gc is garbage collection of the remote tier: it lists the objects under the key
// prefix, works out from etcd (anchor, manifest record, stored epoch, tombstone), the
// bucket (deletion markers, roots above the record) and the persisted manifests which ones
// are referenced, and sorts every other object into garbage, with the reason, and objects
// it keeps, also with the reason. An object is garbage only on a positive statement (a
// deletion marker, a tombstone, a record naming a later root, a fenced epoch), never
// because a record is absent: a prefix etcd knows nothing of is reported as unclaimed and
// never collected. Garbage is collected only once older than the grace period by more than
// a minute, on the object store's clock. Deciding is a pure function (Decide); Scan and
// Delete are the shell around it.
//
// Its documentation: `go doc ./gc` in a checkout, `go doc github.com/streamtier/streamtier/gc`
// elsewhere. A bare `go doc gc` finds Go's own internal/runtime/gc first.
package gc

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/s3io"
)

// ClockMargin is added to the grace period: an object is collected only once older than
// grace + ClockMargin on the store's clock (ages are whole seconds there, and the writer's
// own clock may drift from the store's).
const ClockMargin = time.Minute

// MinDeleteGrace is the shortest grace period garbage collection deletes with: below it a
// root could be collected between its PUT and the etcd write that names it.
const MinDeleteGrace = 5 * time.Minute

// StreamState is what etcd, the bucket and the persisted manifest say about one stream.
type StreamState struct {
	Stream    string
	Anchored  bool // by a linearizable read
	Tombstone bool // etcd holds the stream's tombstone (linearizable read)
	Recorded  bool // a manifest record exists
	Record    metadata.ManifestRecord
	Revision  int64
	// Epoch is the stored epoch (0 when none is stored): an object whose key carries a
	// lower epoch was uploaded by a fenced writer.
	Epoch uint64
	// Referenced holds the root key, every group holding live offsets and every live
	// fragment of the persisted manifest.
	Referenced map[string]bool
	// Kept are the version 3 roots above the record's seq that are not fenced strays (a
	// persist in flight, or a child to adopt) and everything they reference, each with the
	// reason: never collected. Should one be garbage by the rules, the stream is a fork.
	Kept map[string]string
	// Strays are version 3 roots above the record judged fenced writers' strays: garbage.
	Strays map[string]string
	// Stall says the bucket's lineage is ahead of etcd (a record behind it, or lost): the
	// stream awaits `node recover`, and nothing of it is collected.
	Stall string
	// Err is set when the references could not be established (a root or group that is
	// missing or corrupt, etcd failing): nothing of the stream is collected then.
	Err error
}

// Orphan is an unreferenced object: garbage gc may delete, or one it keeps, with the reason.
type Orphan struct {
	Key          string    `json:"key"`
	Stream       string    `json:"stream"`
	Size         int64     `json:"size"`
	LastModified time.Time `json:"last_modified"`
	Reason       string    `json:"reason"`
}

// Plan is the outcome of deciding over one listing.
type Plan struct {
	Scanned    int      `json:"scanned"`    // objects listed
	Bytes      int64    `json:"bytes"`      // their total size
	Referenced int      `json:"referenced"` // objects a persisted manifest references
	Markers    int      `json:"markers"`    // deletion markers: kept for good
	Orphans    []Orphan `json:"orphans"`    // garbage older than the grace period: what Delete deletes
	Young      []Orphan `json:"young"`      // garbage younger than the grace period: kept
	// Pending are unreferenced objects that a live writer may still persist (above the
	// persisted next offset at the current epoch, or newer than the root), and roots above
	// the record with what they reference: kept however old, each with the reason.
	Pending   []Orphan `json:"pending"`
	Undecided []Orphan `json:"undecided"` // of streams whose references are unknown, stalled or forked: kept
	// Unclaimed are objects of prefixes with neither an anchor nor a marker nor a
	// tombstone: metadata lost, or another cluster's. Never collected, whatever their age.
	Unclaimed []Orphan         `json:"unclaimed"`
	Foreign   []string         `json:"foreign"` // keys under the prefix that are not streamtier's layout: never touched
	Revisions map[string]int64 `json:"-"`       // each stream's manifest revision when decided
	// Now is the store's time the ages were measured at; Grace the grace period.
	Now   time.Time     `json:"now"`
	Grace time.Duration `json:"grace"`
}

// Decide sorts the unreferenced objects of the listing into garbage (Orphans once older
// than grace + ClockMargin at now, the store's time; Young before), Pending, Undecided and
// Unclaimed by remote-format.md's rules; see judge. states must hold every stream that has
// objects in the listing; a stream with Err or Stall set, or a fork, keeps all its objects
// (listed as Undecided).
func Decide(objects []s3io.ObjectInfo, keyPrefix string, states map[string]StreamState, now time.Time, grace time.Duration) Plan {
	p := Plan{Scanned: len(objects), Revisions: map[string]int64{}, Now: now, Grace: grace}
	rootKeys := map[string]string{} // key of the root a record names -> its stream
	for _, st := range states {
		p.Revisions[st.Stream] = st.Revision
		if st.Recorded {
			rootKeys[st.Record.RootKey(keyPrefix, st.Stream)] = st.Stream
		}
	}
	roots := map[string]time.Time{} // stream -> LastModified of the root its record names
	markers := map[string]bool{}
	parsed := make([]manifest.ObjectKey, len(objects))
	bad := make([]bool, len(objects))
	for i, o := range objects {
		if stream, ok := rootKeys[o.Key]; ok {
			roots[stream] = o.LastModified
		}
		k, err := manifest.ParseKey(keyPrefix, o.Key)
		parsed[i], bad[i] = k, err != nil
		if err == nil && k.Kind == manifest.ObjectMarker {
			markers[k.Stream] = true
		}
	}
	// A fork: a root above the record references what the rules would collect.
	forks := map[string]string{}
	for i, o := range objects {
		k := parsed[i]
		st, ok := states[k.Stream]
		if bad[i] || !ok || st.Kept[o.Key] == "" || st.Referenced[o.Key] {
			continue
		}
		rootModified, rootListed := roots[k.Stream]
		if garbage, reason := judge(k, o.LastModified, st, rootModified, rootListed); garbage && forks[k.Stream] == "" {
			forks[k.Stream] = fmt.Sprintf("fork: %s, which %s, would be garbage (%s)", o.Key, st.Kept[o.Key], reason)
		}
	}
	for i, o := range objects {
		p.Bytes += o.Size
		if bad[i] {
			if o.Key != manifest.ClaimKey(keyPrefix) && !isProbeKey(keyPrefix, o.Key) {
				p.Foreign = append(p.Foreign, o.Key)
			}
			continue
		}
		k := parsed[i]
		st, ok := states[k.Stream]
		orphan := Orphan{Key: o.Key, Stream: k.Stream, Size: o.Size, LastModified: o.LastModified}
		keep := func(list *[]Orphan, reason string) {
			orphan.Reason = reason
			*list = append(*list, orphan)
		}
		switch {
		case k.Kind == manifest.ObjectMarker:
			p.Markers++
			continue
		case !ok:
			keep(&p.Undecided, "stream state unknown (not examined)")
			continue
		case st.Err != nil:
			keep(&p.Undecided, "references unknown: "+st.Err.Error())
			continue
		case markers[k.Stream]:
			if st.Tombstone || !st.Anchored {
				p.garbage(orphan, "the stream was deleted (its prefix holds a deletion marker)", now, grace)
			} else {
				keep(&p.Undecided, "the prefix holds a deletion marker but etcd an anchor and no tombstone (a deletion etcd rolled back): kept until the tombstone is written back")
			}
			continue
		case st.Tombstone:
			p.garbage(orphan, "the stream was deleted (etcd holds its tombstone; no marker: a deletion by version 1 or 2)", now, grace)
			continue
		case !st.Anchored && !st.Recorded:
			keep(&p.Unclaimed, "no anchor, no deletion marker, no tombstone: this cluster's metadata was lost (`node recover`), or the prefix is another cluster's; never collected")
			continue
		case !st.Anchored:
			keep(&p.Undecided, "a manifest record without its anchor: metadata partly lost (`node recover`)")
			continue
		case st.Stall != "":
			keep(&p.Undecided, st.Stall)
			continue
		case forks[k.Stream] != "":
			keep(&p.Undecided, forks[k.Stream])
			continue
		case st.Referenced[o.Key]:
			p.Referenced++
			continue
		case st.Kept[o.Key] != "":
			keep(&p.Pending, st.Kept[o.Key]+": kept")
			continue
		case st.Strays[o.Key] != "":
			p.garbage(orphan, st.Strays[o.Key], now, grace)
			continue
		}
		rootModified, rootListed := roots[k.Stream]
		garbage, reason := judge(k, o.LastModified, st, rootModified, rootListed)
		if !garbage {
			keep(&p.Pending, reason)
			continue
		}
		p.garbage(orphan, reason, now, grace)
	}
	sort.Slice(p.Orphans, func(i, j int) bool { return p.Orphans[i].Key < p.Orphans[j].Key })
	return p
}

// garbage files o as an orphan once older than grace + ClockMargin at now, young before.
func (p *Plan) garbage(o Orphan, reason string, now time.Time, grace time.Duration) {
	o.Reason = reason
	if now.Sub(o.LastModified) <= grace+ClockMargin {
		p.Young = append(p.Young, o)
		return
	}
	p.Orphans = append(p.Orphans, o)
}

func isProbeKey(keyPrefix, key string) bool {
	pre := s3io.ProbeKeyPrefix(keyPrefix)
	return len(key) > len(pre) && key[:len(pre)] == pre
}

// judge decides whether the unreferenced object k (last modified at modified) of an
// anchored stream in state st, without a marker or a tombstone, is garbage, and says why
// either way. rootModified is when the root the record names was written (rootListed false
// when the listing does not hold it). The rules, from remote-format.md "Garbage":
//   - a version 3 root below the record's seq, and a version 1 or 2 root other than the
//     named one, are garbage; with no record, no root is (it may be adopted or recovered);
//     a version 3 root above the record's seq not examined is kept;
//   - a fragment or group starting below the persisted next offset is garbage when it is
//     older than the root the record names, pending when it is not (it may still be on its
//     way into the manifest);
//   - one at or above the persisted next offset (every one when nothing persisted) is garbage
//     only when the epoch in its key is below the stored epoch: its writer is fenced. At the
//     current epoch (or above: a successor that has not persisted yet) it is pending, however
//     old. A version 1 key carries no epoch, so its writer cannot be shown fenced: pending.
func judge(k manifest.ObjectKey, modified time.Time, st StreamState, rootModified time.Time, rootListed bool) (garbage bool, reason string) {
	r := st.Record
	if k.Kind == manifest.ObjectRoot {
		return judgeRoot(k, st)
	}
	what := fmt.Sprintf("%s at %d", k.Kind, k.Offset)
	if st.Recorded && k.Offset < r.NextOffset {
		if !rootListed {
			return false, fmt.Sprintf("%s is below the persisted next offset %d, but the root the record names is not in the listing: cannot tell whether it is older than that root", what, r.NextOffset)
		}
		if !modified.Before(rootModified) {
			return false, fmt.Sprintf("%s is below the persisted next offset %d but not older than the root the record names (written %s after it): it may still be on its way into the manifest", what, r.NextOffset, modified.Sub(rootModified).Round(time.Millisecond))
		}
		switch {
		case k.Offset < r.FirstOffset:
			return true, fmt.Sprintf("%s is below the first offset %d: dropped by retention", what, r.FirstOffset)
		case k.Kind == manifest.ObjectFragment:
			return true, fmt.Sprintf("%s, older than the persisted root, is not in it: an upload never persisted (crash, conflict or lost result) whose range was uploaded again", what)
		default:
			return true, fmt.Sprintf("%s, older than the persisted root, is not in it: a rebalance that never persisted", what)
		}
	}
	next := fmt.Sprintf("the persisted next offset %d", r.NextOffset)
	if !st.Recorded {
		next = "the persisted next offset (the stream never persisted a manifest)"
	}
	switch {
	case k.KeyVersion < 2:
		return false, fmt.Sprintf("%s is at or above %s and its version 1 key carries no epoch: its writer cannot be shown fenced", what, next)
	case k.Epoch < st.Epoch:
		return true, fmt.Sprintf("%s is at or above %s, uploaded at epoch %d below the stored epoch %d: its writer is fenced and can never persist it (crash, conflict or lost result)", what, next, k.Epoch, st.Epoch)
	default:
		return false, fmt.Sprintf("%s is at or above %s, uploaded at epoch %d (stored epoch %d): a live writer may still persist it", what, next, k.Epoch, st.Epoch)
	}
}

func judgeRoot(k manifest.ObjectKey, st StreamState) (bool, string) {
	r := st.Record
	switch {
	case !st.Recorded && k.KeyVersion >= 3:
		return false, fmt.Sprintf("version 3 root of seq %d and no manifest record: it may be adopted or recovered (never collected for want of a record)", k.Seq)
	case !st.Recorded:
		return false, fmt.Sprintf("root of epoch %d and no manifest record: never collected for want of a record (`node recover` lists it)", k.Epoch)
	case k.KeyVersion >= 3 && k.Seq < r.Seq:
		return true, fmt.Sprintf("superseded root (seq %d; the manifest record names seq %d)", k.Seq, r.Seq)
	case k.KeyVersion >= 3 && k.Seq == r.Seq:
		return false, fmt.Sprintf("root of seq %d, the seq the record names, but not the root it names: etcd and the bucket disagree", k.Seq)
	case k.KeyVersion >= 3:
		return false, fmt.Sprintf("version 3 root of seq %d above the record's seq %d: a persist in flight or evidence of a rollback", k.Seq, r.Seq)
	case r.Seq > 0:
		return true, fmt.Sprintf("superseded root (version 2, epoch %d; the manifest record names version 3 seq %d)", k.Epoch, r.Seq)
	}
	return true, fmt.Sprintf("superseded root (epoch %d; the manifest record names epoch %d uid %016x)", k.Epoch, r.Epoch, r.RootUID)
}

// ErrClaimMismatch is returned when the key prefix's claim does not match the metadata
// store's cluster record: gc collects nothing at all there.
var ErrClaimMismatch = errors.New("key prefix not claimed by this cluster")

// ErrUnknownStream is returned when gc is asked about a stream that has neither objects
// nor records.
var ErrUnknownStream = errors.New("unknown stream")
