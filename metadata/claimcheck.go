package metadata

import (
	"fmt"
	"strings"
	"time"
)

// BucketClaim is what the bucket's claim object (<key-prefix>/claim) says, as the claim
// check needs it (s3io.ReadClaim reads it).
type BucketClaim struct {
	ClusterID  string
	Generation uint64
	EtcdPrefix string
	Created    time.Time
}

// ClaimFacts is what a claim check found: etcd's cluster record, the bucket's claim, and
// (when neither agrees yet) what a listing of the key prefix holds.
type ClaimFacts struct {
	KeyPrefix  string
	EtcdPrefix string
	Cluster    *ClusterRecord // nil: etcd has no cluster record
	Claim      *BucketClaim   // nil: the bucket has no claim
	// PrefixEmpty: a listing of one key under the key prefix found nothing (the claim and
	// leftover probe keys do not count).
	PrefixEmpty bool
	// FirstPageStreams are the streams found on the listing's first page, and Unanchored
	// those of them without an anchor under this etcd prefix.
	FirstPageStreams []string
	Unanchored       []string
}

// ClaimAction is what opening a key prefix does.
type ClaimAction int

// Actions of CheckClaim.
const (
	// ClaimOpen: etcd and the bucket agree (the record claimed): open the key prefix.
	ClaimOpen ClaimAction = iota + 1
	// ClaimCreate: a new cluster (or an upgrade from version 1 or 2): create the etcd
	// record (if absent; a loser adopts the winner's id), then the claim object, then mark
	// the record claimed.
	ClaimCreate
	// ClaimComplete: a creation that crashed after the etcd record: write the claim object
	// (if absent) and mark the record claimed.
	ClaimComplete
	// ClaimRefuse: do not open the key prefix: Reason names what was found and what to do.
	ClaimRefuse
)

// String names the action.
func (a ClaimAction) String() string {
	switch a {
	case ClaimOpen:
		return "open"
	case ClaimCreate:
		return "create"
	case ClaimComplete:
		return "complete"
	case ClaimRefuse:
		return "refuse"
	}
	return fmt.Sprintf("ClaimAction(%d)", int(a))
}

// ClaimDecision is the claim check's outcome.
type ClaimDecision struct {
	Action ClaimAction
	Reason string
}

// CheckClaim decides, from what etcd and the bucket hold, whether a node or a command
// that writes or deletes may open the key prefix: the five cases of remote-format.md
// ("Bucket claim"). It is pure; the shell reads, then creates or refuses.
func CheckClaim(f ClaimFacts) ClaimDecision {
	where := fmt.Sprintf("key prefix %q (etcd prefix %q)", f.KeyPrefix, f.EtcdPrefix)
	switch {
	case f.Cluster != nil && f.Claim != nil:
		if f.Cluster.ClusterID != f.Claim.ClusterID || f.Cluster.Generation != f.Claim.Generation {
			return refuse("%s: the bucket is claimed by cluster %s generation %d (etcd prefix %q, created %s), etcd holds cluster %s generation %d: another cluster owns the prefix, or a takeover or restore fenced this one; use another key prefix, or `node recover --takeover` if this cluster must own it",
				where, f.Claim.ClusterID, f.Claim.Generation, f.Claim.EtcdPrefix, created(f.Claim), f.Cluster.ClusterID, f.Cluster.Generation)
		}
		if !f.Cluster.Claimed {
			return ClaimDecision{Action: ClaimComplete, Reason: where + ": the claim was written but etcd's record not marked claimed (a creation that crashed): complete it"}
		}
		return ClaimDecision{Action: ClaimOpen, Reason: fmt.Sprintf("%s: cluster %s generation %d", where, f.Cluster.ClusterID, f.Cluster.Generation)}
	case f.Cluster != nil && !f.Cluster.Claimed:
		return ClaimDecision{Action: ClaimComplete, Reason: where + ": etcd's cluster record is not claimed yet and the bucket has no claim (a creation that crashed): complete it"}
	case f.Cluster != nil:
		return refuse("%s: etcd's cluster record %s generation %d is claimed, but the bucket has no claim object %s/claim: it was deleted; restore it (the record names id and generation) rather than let a second cluster take the prefix",
			where, f.Cluster.ClusterID, f.Cluster.Generation, f.KeyPrefix)
	case f.Claim != nil:
		return refuse("%s: the bucket is claimed by cluster %s generation %d (etcd prefix %q, created %s) and this etcd holds no cluster record: either this cluster's metadata was lost (run `node recover`), or the bucket belongs to another cluster (use another key prefix)",
			where, f.Claim.ClusterID, f.Claim.Generation, f.Claim.EtcdPrefix, created(f.Claim))
	case f.PrefixEmpty:
		return ClaimDecision{Action: ClaimCreate, Reason: where + ": nothing stored and no claim: a new cluster"}
	case len(f.FirstPageStreams) == 0:
		return refuse("%s: neither etcd nor the bucket holds a claim, and the prefix holds objects that are not streams: use another key prefix", where)
	case len(f.Unanchored) > 0:
		return refuse("%s: neither etcd nor the bucket holds a claim, and the prefix holds streams this etcd prefix has no anchor for (%s): another cluster's prefix, or a bucket whose metadata is lost (`node recover --claim`)",
			where, strings.Join(f.Unanchored, ", "))
	}
	return ClaimDecision{Action: ClaimCreate, Reason: fmt.Sprintf("%s: no claim yet, and this etcd prefix anchors the streams stored (%s): an upgrade from format version 1 or 2, claimed now", where, strings.Join(f.FirstPageStreams, ", "))}
}

func refuse(format string, args ...any) ClaimDecision {
	return ClaimDecision{Action: ClaimRefuse, Reason: fmt.Sprintf(format, args...)}
}

func created(c *BucketClaim) string { return c.Created.UTC().Format(time.RFC3339) }

// SameClaim reports whether the cluster record read now still is the one a node opened
// with (id and generation): what the 30-second re-read and the reaper compare. A node whose
// answer is false stops persisting and deleting.
func SameClaim(opened, now ClusterRecord) bool {
	return opened.ClusterID == now.ClusterID && opened.Generation == now.Generation
}
