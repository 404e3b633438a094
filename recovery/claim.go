package recovery

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/s3io"
)

// LiveWindow is how recent a root must be, by the store's clock, for recovery to assume a
// live cluster may own the key prefix (remote-format.md: 10 minutes).
const LiveWindow = 10 * time.Minute

// ErrClaimRefused marks a claim recovery may not take or change without an operator's
// choice; the error says what was found and which flag decides.
var ErrClaimRefused = errors.New("recovery refused")

// ClaimOptions say how `node recover` may take or change the key prefix's claim.
type ClaimOptions struct {
	Store     *s3io.Store
	Meta      *metadata.Store
	KeyPrefix string
	// Takeover rewrites the claim with generation + 1 (this etcd's id, or the claim's when
	// etcd has none) so that every node of the old generation stops persisting and deleting;
	// it also lifts the refusal while roots younger than LiveWindow exist.
	Takeover bool
	// AfterRestore bumps the generation of a matching claim (etcd restored from a snapshot):
	// every writer of before the restore resolves again.
	AfterRestore bool
	// Create makes a new claim for a key prefix that has none and whose etcd has no cluster
	// record (a version 1 or 2 bucket whose metadata was lost: `node recover --claim`).
	Create bool
	// Write performs the change; without it ClaimPlan only says what it would do.
	Write bool
	// NewestRoot is the LastModified of the newest root under the key prefix (zero: none),
	// from the inspections; with etcd holding no cluster record, a root younger than
	// LiveWindow refuses unless Takeover.
	NewestRoot time.Time
}

// ClaimPlan is what recovery found of the claim and what it does about it.
type ClaimPlan struct {
	Bucket *s3io.Claim             // the bucket's claim as read; nil: none
	Etcd   *metadata.ClusterRecord // etcd's cluster record as read; nil: none
	// Target is the record both sides hold afterwards (nil: recovery refuses).
	Target *metadata.ClusterRecord
	// Action says what is written: "none", "adopt", "create", "bump", "complete".
	Action  string
	Reason  string
	Written bool
}

// Claim reads the key prefix's claim and etcd's cluster record, decides what recovery may
// do with them (remote-format.md, "Recovering the metadata from the bucket") and, with
// o.Write, writes it: the claim first, then etcd (docs/recovery.md: a crash in between
// leaves this cluster refused until the same command runs again and completes etcd). A
// refusal wraps ErrClaimRefused and names what was found and the flag that decides.
func Claim(ctx context.Context, o ClaimOptions) (ClaimPlan, error) {
	if o.Store == nil || o.Meta == nil {
		return ClaimPlan{}, errors.New("recover claim: an object store and a metadata store are required")
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = manifest.DefaultKeyPrefix
	}
	var p ClaimPlan
	c, cfound, err := o.Store.ReadClaim(ctx, o.KeyPrefix)
	if err != nil {
		return p, fmt.Errorf("recover: %w", err)
	}
	e, rev, efound, err := o.Meta.ReadCluster(ctx)
	if err != nil {
		return p, fmt.Errorf("recover: %w", err)
	}
	if cfound {
		p.Bucket = &c
	}
	if efound {
		p.Etcd = &e
	}
	bump := o.Takeover || o.AfterRestore
	refuse := func(format string, args ...any) (ClaimPlan, error) {
		p.Action, p.Reason = "refuse", fmt.Sprintf(format, args...)
		return p, fmt.Errorf("%w: key prefix %q, etcd prefix %q: %s", ErrClaimRefused, o.KeyPrefix, o.Meta.Prefix(), p.Reason)
	}
	target := func(id string, gen uint64, action, reason string) {
		p.Target = &metadata.ClusterRecord{ClusterID: id, Generation: gen, Claimed: true}
		p.Action, p.Reason = action, reason
	}
	switch {
	case cfound && efound && c.ClusterID == e.ClusterID && c.Generation == e.Generation:
		if !bump {
			target(e.ClusterID, e.Generation, "none", "the claim and etcd agree")
			if !e.Claimed {
				p.Action, p.Reason = "complete", "etcd's record was never marked claimed: mark it"
			}
			break
		}
		target(e.ClusterID, e.Generation+1, "bump", fmt.Sprintf("generation %d -> %d: every node of generation %d stops persisting and deleting and must restart", e.Generation, e.Generation+1, e.Generation))
	case cfound && efound && c.ClusterID == e.ClusterID && c.Generation == e.Generation+1 && bump:
		target(e.ClusterID, c.Generation, "complete", fmt.Sprintf("an earlier takeover or restore raised the claim to generation %d and stopped before etcd: complete etcd", c.Generation))
	case cfound && efound:
		if !o.Takeover {
			return refuse("the bucket's claim names cluster %s generation %d (etcd prefix %q, created %s), etcd's record cluster %s generation %d: another cluster took the prefix over, or this etcd is not the prefix's; recover with --takeover only if this cluster must own it (the other one's nodes then stop)",
				c.ClusterID, c.Generation, c.EtcdPrefix, c.Created.Format(time.RFC3339), e.ClusterID, e.Generation)
		}
		target(e.ClusterID, max(c.Generation, e.Generation)+1, "bump", fmt.Sprintf("takeover from cluster %s generation %d", c.ClusterID, c.Generation))
	case cfound:
		if has, err := hasStreamRecords(ctx, o.Meta); err != nil {
			return p, err
		} else if has {
			return refuse("etcd holds stream records but no cluster record, and the bucket is claimed by cluster %s generation %d (etcd prefix %q): this etcd prefix is another cluster's; use the etcd prefix the claim names",
				c.ClusterID, c.Generation, c.EtcdPrefix)
		}
		if !o.Takeover && c.EtcdPrefix != o.Meta.Prefix() {
			return refuse("the bucket is claimed by cluster %s generation %d for etcd prefix %q (created %s), not this one: another cluster may own it; point this cluster at etcd prefix %q, use another key prefix, or recover with --takeover (the other cluster's nodes then stop)",
				c.ClusterID, c.Generation, c.EtcdPrefix, c.Created.Format(time.RFC3339), c.EtcdPrefix)
		}
		if err := liveRefusal(ctx, o); err != nil {
			return refuse("%v", err)
		}
		if bump {
			target(c.ClusterID, c.Generation+1, "bump", fmt.Sprintf("etcd has no cluster record: adopt cluster %s at generation %d", c.ClusterID, c.Generation+1))
		} else {
			target(c.ClusterID, c.Generation, "adopt", fmt.Sprintf("etcd has no cluster record (lost): adopt the claim's cluster %s generation %d", c.ClusterID, c.Generation))
		}
	case efound && e.Claimed && !o.Create:
		return refuse("etcd's record names cluster %s generation %d as claimed, but the bucket has no claim (deleted): recover with --claim to write it again", e.ClusterID, e.Generation)
	case efound:
		target(e.ClusterID, e.Generation, "create", "the bucket has no claim: write etcd's")
	default:
		if !o.Create {
			return refuse("neither the bucket nor etcd holds a claim: if this cluster owns the prefix (a version 1 or 2 bucket whose metadata was lost), recover with --claim")
		}
		if err := liveRefusal(ctx, o); err != nil {
			return refuse("%v", err)
		}
		id, err := s3io.NewClusterID(rand.Reader)
		if err != nil {
			return p, err
		}
		target(id, 1, "create", "a new claim for this cluster")
	}
	if !o.Write || p.Action == "none" {
		return p, nil
	}
	if err := writeClaim(ctx, o, p, rev); err != nil {
		return p, err
	}
	p.Written = true
	return p, nil
}

// writeClaim writes p.Target: the bucket's claim first, then etcd's record.
func writeClaim(ctx context.Context, o ClaimOptions, p ClaimPlan, rev int64) error {
	t := *p.Target
	next := s3io.Claim{ClusterID: t.ClusterID, Generation: t.Generation, EtcdPrefix: o.Meta.Prefix(), Created: time.Now().UTC()}
	switch {
	case p.Bucket == nil:
		if err := o.Store.CreateClaim(ctx, o.KeyPrefix, next); err != nil {
			return fmt.Errorf("recover: write the claim: %w (another cluster may have claimed the prefix meanwhile: run recover again)", err)
		}
	case p.Bucket.ClusterID != t.ClusterID || p.Bucket.Generation != t.Generation || p.Bucket.EtcdPrefix != next.EtcdPrefix:
		if err := o.Store.ReplaceClaim(ctx, o.KeyPrefix, *p.Bucket, next); err != nil {
			return fmt.Errorf("recover: replace the claim: %w (it changed since it was read: run recover again)", err)
		}
	}
	if p.Etcd != nil && *p.Etcd == t {
		return nil
	}
	if p.Etcd == nil {
		rec, _, created, err := o.Meta.CreateCluster(ctx, t)
		if err != nil {
			return fmt.Errorf("recover: write etcd's cluster record: %w", err)
		}
		if !created && rec != t {
			return fmt.Errorf("recover: etcd's cluster record was created meanwhile as cluster %s generation %d: run recover again", rec.ClusterID, rec.Generation)
		}
		return nil
	}
	if _, err := o.Meta.UpdateCluster(ctx, rev, t); err != nil {
		return fmt.Errorf("recover: update etcd's cluster record: %w (run recover again)", err)
	}
	return nil
}

// liveRefusal refuses while a root under the key prefix is younger than LiveWindow by the
// store's clock: a live cluster may own the prefix.
func liveRefusal(ctx context.Context, o ClaimOptions) error {
	if o.Takeover || o.NewestRoot.IsZero() {
		return nil
	}
	now, err := o.Store.ServerTime(ctx, o.KeyPrefix+"/")
	if err != nil {
		return err
	}
	if age := now.Sub(o.NewestRoot); age < LiveWindow {
		return fmt.Errorf("a root was written %s ago by the store's clock (less than %s): a live cluster may own the prefix; stop its nodes and recover with --takeover (they stop persisting), or wait until %s",
			age.Truncate(time.Second), LiveWindow, o.NewestRoot.Add(LiveWindow).Format(time.RFC3339))
	}
	return nil
}

// hasStreamRecords says whether the etcd prefix holds any stream record.
func hasStreamRecords(ctx context.Context, meta *metadata.Store) (bool, error) {
	resp, err := meta.Client().Get(ctx, meta.Prefix()+"/streams/", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1))
	if err != nil {
		return false, fmt.Errorf("recover: list stream records: %w", err)
	}
	return len(resp.Kvs) > 0, nil
}
