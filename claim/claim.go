// Package claim opens a key prefix for a node or a command that writes or deletes: it
// checks that the object store honours conditional creates, reads etcd's cluster record and
// the bucket's claim, decides with metadata.CheckClaim, and creates or completes the claim
// when the decision says so (remote-format.md, "Bucket claim"). Check re-reads the record
// and the bucket's claim for the periodic comparison (every 30 s, and before each reaper
// batch).
package claim

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/s3io"
)

// ErrRefused marks a key prefix this cluster may not open; the error says what was found
// and what to do.
var ErrRefused = errors.New("key prefix refused")

// ErrChanged marks a cluster record that is no longer the one the node opened with (a
// takeover, a restore, a lost etcd): stop persisting and deleting.
var ErrChanged = errors.New("cluster claim changed")

// RecheckInterval is how often a node reads the cluster record and the bucket's claim again.
const RecheckInterval = 30 * time.Second

// Options say which key prefix to open.
type Options struct {
	Store     *s3io.Store
	Meta      *metadata.Store
	KeyPrefix string           // default manifest.DefaultKeyPrefix
	Now       func() time.Time // the claim's creation time; default time.Now
	Rand      io.Reader        // draws a new cluster id; default crypto/rand.Reader
}

func (o Options) withDefaults() (Options, error) {
	if o.Store == nil || o.Meta == nil {
		return o, errors.New("claim: an object store and a metadata store are required")
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = manifest.DefaultKeyPrefix
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rand == nil {
		o.Rand = rand.Reader
	}
	return o, nil
}

// Open checks the store's conditional creates and the claim of the key prefix, creates a
// new cluster's claim or completes one a crash left half done, and returns the cluster
// record the caller opened with (claimed): what every persist compares and Check re-reads.
// A refusal wraps ErrRefused (or s3io.ErrNoConditionalCreate) and names what was found.
func Open(ctx context.Context, o Options) (metadata.ClusterRecord, error) {
	o, err := o.withDefaults()
	if err != nil {
		return metadata.ClusterRecord{}, err
	}
	if err := o.Store.ProbeConditionalCreate(ctx, o.KeyPrefix); err != nil {
		return metadata.ClusterRecord{}, fmt.Errorf("open key prefix %q: %w", o.KeyPrefix, err)
	}
	for attempt := 1; ; attempt++ {
		rec, err := openOnce(ctx, o)
		// A concurrent opener changed the record between our read and write: read again.
		if !errors.Is(err, metadata.ErrClusterChanged) || attempt == 3 {
			return rec, err
		}
	}
}

func openOnce(ctx context.Context, o Options) (metadata.ClusterRecord, error) {
	f, rev, err := facts(ctx, o)
	if err != nil {
		return metadata.ClusterRecord{}, err
	}
	d := metadata.CheckClaim(f)
	switch d.Action {
	case metadata.ClaimOpen:
		return *f.Cluster, nil
	case metadata.ClaimRefuse:
		return metadata.ClusterRecord{}, fmt.Errorf("%w: %s", ErrRefused, d.Reason)
	case metadata.ClaimCreate:
		id, err := s3io.NewClusterID(o.Rand)
		if err != nil {
			return metadata.ClusterRecord{}, err
		}
		// A node that loses the race adopts the winner's id.
		rec, r, _, err := o.Meta.CreateCluster(ctx, metadata.ClusterRecord{ClusterID: id, Generation: 1})
		if err != nil {
			return metadata.ClusterRecord{}, fmt.Errorf("open key prefix %q: %w", o.KeyPrefix, err)
		}
		if rec.Claimed {
			return openOnce(ctx, o) // the winner finished meanwhile: check as any opener
		}
		return complete(ctx, o, rec, r)
	}
	return complete(ctx, o, *f.Cluster, rev)
}

// complete writes the claim of rec (if absent) and marks rec claimed.
func complete(ctx context.Context, o Options, rec metadata.ClusterRecord, rev int64) (metadata.ClusterRecord, error) {
	c := s3io.Claim{ClusterID: rec.ClusterID, Generation: rec.Generation, EtcdPrefix: o.Meta.Prefix(), Created: o.Now().UTC()}
	if err := o.Store.CreateClaim(ctx, o.KeyPrefix, c); err != nil {
		if !errors.Is(err, s3io.ErrPreconditionFailed) {
			return metadata.ClusterRecord{}, fmt.Errorf("open key prefix %q: write the claim: %w", o.KeyPrefix, err)
		}
		got, found, rerr := o.Store.ReadClaim(ctx, o.KeyPrefix)
		if rerr != nil {
			return metadata.ClusterRecord{}, fmt.Errorf("open key prefix %q: %w", o.KeyPrefix, rerr)
		}
		if !found || got.ClusterID != rec.ClusterID || got.Generation != rec.Generation {
			return metadata.ClusterRecord{}, fmt.Errorf("%w: key prefix %q: another cluster (%s generation %d) claimed it while this one (%s generation %d) was being created",
				ErrRefused, o.KeyPrefix, got.ClusterID, got.Generation, rec.ClusterID, rec.Generation)
		}
	}
	rec.Claimed = true
	if _, err := o.Meta.UpdateCluster(ctx, rev, rec); err != nil {
		return metadata.ClusterRecord{}, fmt.Errorf("open key prefix %q: mark the cluster record claimed: %w", o.KeyPrefix, err)
	}
	return rec, nil
}

// facts reads what CheckClaim decides on; rev is the cluster record's ModRevision.
func facts(ctx context.Context, o Options) (metadata.ClaimFacts, int64, error) {
	f := metadata.ClaimFacts{KeyPrefix: o.KeyPrefix, EtcdPrefix: o.Meta.Prefix()}
	rec, rev, found, err := o.Meta.ReadCluster(ctx)
	if err != nil {
		return f, 0, fmt.Errorf("open key prefix %q: %w", o.KeyPrefix, err)
	}
	if found {
		f.Cluster = &rec
	}
	c, found, err := o.Store.ReadClaim(ctx, o.KeyPrefix)
	if err != nil {
		return f, 0, fmt.Errorf("open key prefix %q: %w", o.KeyPrefix, err)
	}
	if found {
		f.Claim = &metadata.BucketClaim{ClusterID: c.ClusterID, Generation: c.Generation, EtcdPrefix: c.EtcdPrefix, Created: c.Created}
	}
	if f.Cluster != nil || f.Claim != nil {
		return f, rev, nil
	}
	streams, stored, err := firstPage(ctx, o)
	if err != nil {
		return f, 0, err
	}
	f.PrefixEmpty, f.FirstPageStreams = !stored, streams
	for _, s := range streams {
		ok, err := o.Meta.HasAnchor(ctx, s, true)
		if err != nil {
			return f, 0, fmt.Errorf("open key prefix %q: %w", o.KeyPrefix, err)
		}
		if !ok {
			f.Unanchored = append(f.Unanchored, s)
		}
	}
	return f, rev, nil
}

// firstPageKeys is how many keys the "what is stored" listing looks at: one page.
const firstPageKeys = 1000

var errPageDone = errors.New("first page read")

// firstPage lists up to one page of keys under the key prefix (the claim and probe keys do
// not count) and returns the streams they belong to, and whether any key was found.
func firstPage(ctx context.Context, o Options) ([]string, bool, error) {
	seen := map[string]bool{}
	n, stored := 0, false
	probe, claimKey := s3io.ProbeKeyPrefix(o.KeyPrefix), manifest.ClaimKey(o.KeyPrefix)
	err := o.Store.List(ctx, o.KeyPrefix+"/", func(oi s3io.ObjectInfo) error {
		if n++; n > firstPageKeys {
			return errPageDone
		}
		if oi.Key == claimKey || strings.HasPrefix(oi.Key, probe) {
			return nil
		}
		stored = true
		if k, err := manifest.ParseKey(o.KeyPrefix, oi.Key); err == nil {
			seen[k.Stream] = true
		}
		return nil
	})
	if err != nil && !errors.Is(err, errPageDone) {
		return nil, false, fmt.Errorf("open key prefix %q: %w", o.KeyPrefix, err)
	}
	streams := make([]string, 0, len(seen))
	for s := range seen {
		streams = append(streams, s)
	}
	sort.Strings(streams)
	return streams, stored, nil
}

// Check re-reads both halves of the claim the node opened with, etcd's cluster record and
// the bucket's claim object, and returns an error wrapping ErrChanged when either moved: a
// takeover by another cluster rewrites only the bucket's claim (it cannot reach this
// cluster's etcd), a restore or a recover --after-restore only etcd's generation. Any
// other error (etcd or S3 unreachable) changes nothing; the caller checks again later.
func Check(ctx context.Context, o Options, opened metadata.ClusterRecord) error {
	o, err := o.withDefaults()
	if err != nil {
		return err
	}
	now, _, found, err := o.Meta.ReadCluster(ctx)
	if err != nil {
		return fmt.Errorf("claim check: %w", err)
	}
	if !found {
		return fmt.Errorf("%w: etcd's cluster record %s is gone (opened as cluster %s generation %d): the metadata was lost; `node recover`", ErrChanged, metadata.ClusterKey(o.Meta.Prefix()), opened.ClusterID, opened.Generation)
	}
	if !metadata.SameClaim(opened, now) {
		return fmt.Errorf("%w: opened as cluster %s generation %d, etcd now holds cluster %s generation %d (a takeover or a restore fenced this node)", ErrChanged, opened.ClusterID, opened.Generation, now.ClusterID, now.Generation)
	}
	c, found, err := o.Store.ReadClaim(ctx, o.KeyPrefix)
	if err != nil {
		return fmt.Errorf("claim check: %w", err)
	}
	if !found {
		return fmt.Errorf("%w: the bucket's claim %s is gone (opened as cluster %s generation %d): `node recover --claim` writes it again", ErrChanged, manifest.ClaimKey(o.KeyPrefix), opened.ClusterID, opened.Generation)
	}
	if c.ClusterID != opened.ClusterID || c.Generation != opened.Generation {
		return fmt.Errorf("%w: opened as cluster %s generation %d, the bucket's claim %s now names cluster %s generation %d (etcd prefix %q): another cluster took the key prefix over",
			ErrChanged, opened.ClusterID, opened.Generation, manifest.ClaimKey(o.KeyPrefix), c.ClusterID, c.Generation, c.EtcdPrefix)
	}
	return nil
}
