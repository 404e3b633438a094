// Package gc is garbage collection of the remote tier: it lists the objects under the key
// prefix, works out from etcd (anchor, manifest record, stored epoch) and the persisted
// manifests which ones are referenced, and sorts every other object into garbage, with the
// reason (an upload that never persisted, a superseded root, what retention dropped, a
// deleted stream), and pending objects that a live writer may still persist, also with the
// reason, which are never deleted. Garbage is collected only once older than a grace
// period, and a stream's prefix without an anchor only after a linearizable read confirms
// it. Deciding is a pure function (Decide); Scan and Delete are the shell around it.
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

// StreamState is what etcd and the persisted manifest say about one stream: whether it is
// anchored, its manifest record and stored epoch, and the keys the persisted manifest
// references.
type StreamState struct {
	Stream   string
	Anchored bool // by a linearizable read
	Recorded bool // a manifest record exists
	Record   metadata.ManifestRecord
	Revision int64
	// Epoch is the stored epoch (0 when none is stored): an object whose key carries a
	// lower epoch was uploaded by a fenced writer.
	Epoch uint64
	// Referenced holds the root key, every group holding live offsets and every live
	// fragment of the persisted manifest.
	Referenced map[string]bool
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
	Orphans    []Orphan `json:"orphans"`    // garbage older than the grace period: what Delete deletes
	Young      []Orphan `json:"young"`      // garbage younger than the grace period: kept
	// Pending are unreferenced objects that a live writer may still persist (above the
	// persisted next offset at the current epoch, or newer than the root): kept however
	// old, each with the reason.
	Pending   []Orphan         `json:"pending"`
	Undecided []Orphan         `json:"undecided"` // of streams whose references are unknown: kept
	Foreign   []string         `json:"foreign"`   // keys under the prefix that are not streamtier's layout: never touched
	Revisions map[string]int64 `json:"-"`         // each stream's manifest revision when decided
}

// Decide sorts the unreferenced objects of the listing into garbage (Orphans once older
// than grace at now, Young before) and Pending by remote-format.md's rule; see judge.
// states must hold every stream that has objects in the listing; a stream with Err set
// keeps all its objects (listed as Undecided).
func Decide(objects []s3io.ObjectInfo, keyPrefix string, states map[string]StreamState, now time.Time, grace time.Duration) Plan {
	p := Plan{Scanned: len(objects), Revisions: map[string]int64{}}
	rootKeys := map[string]string{} // key of the root a record names -> its stream
	for _, st := range states {
		p.Revisions[st.Stream] = st.Revision
		if st.Recorded {
			rootKeys[manifest.RootKey(keyPrefix, st.Stream, st.Record.Epoch, st.Record.RootUID)] = st.Stream
		}
	}
	roots := map[string]time.Time{} // stream -> LastModified of the root its record names
	for _, o := range objects {
		if stream, ok := rootKeys[o.Key]; ok {
			roots[stream] = o.LastModified
		}
	}
	for _, o := range objects {
		p.Bytes += o.Size
		k, err := manifest.ParseKey(keyPrefix, o.Key)
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
		rootModified, rootListed := roots[k.Stream]
		garbage, reason := judge(k, o.LastModified, st, rootModified, rootListed)
		orphan.Reason = reason
		switch {
		case !garbage:
			p.Pending = append(p.Pending, orphan)
		case now.Sub(o.LastModified) < grace:
			p.Young = append(p.Young, orphan)
		default:
			p.Orphans = append(p.Orphans, orphan)
		}
	}
	sort.Slice(p.Orphans, func(i, j int) bool { return p.Orphans[i].Key < p.Orphans[j].Key })
	return p
}

// judge decides whether the unreferenced object k (last modified at modified) of a stream in
// state st is garbage, and says why either way. rootModified is when the root the record
// names was written (rootListed false when the listing does not hold it). The rule, from
// remote-format.md "Garbage: what may be collected":
//   - everything under a prefix without an anchor is garbage (the anchor read is linearizable);
//   - a root other than the one the record names is garbage;
//   - a fragment or group starting below the persisted next offset is garbage when it is
//     older than the root the record names, pending when it is not (it may still be on its
//     way into the manifest);
//   - one at or above the persisted next offset (every one when nothing persisted) is garbage
//     only when the epoch in its key is below the stored epoch: its writer is fenced. At the
//     current epoch (or above: a successor that has not persisted yet) it is pending, however
//     old. A version 1 key carries no epoch, so its writer cannot be shown fenced: pending.
func judge(k manifest.ObjectKey, modified time.Time, st StreamState, rootModified time.Time, rootListed bool) (garbage bool, reason string) {
	r := st.Record
	switch {
	case !st.Anchored:
		return true, "the stream has no anchor in etcd (deleted, or never created)"
	case k.Kind == manifest.ObjectRoot && !st.Recorded:
		return true, fmt.Sprintf("root of epoch %d that never persisted (the stream has no manifest record)", k.Epoch)
	case k.Kind == manifest.ObjectRoot:
		return true, fmt.Sprintf("superseded root (epoch %d; the manifest record names epoch %d uid %016x)", k.Epoch, r.Epoch, r.RootUID)
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

// ErrUnknownStream is returned when gc is asked about a stream that has neither objects
// nor records.
var ErrUnknownStream = errors.New("unknown stream")
