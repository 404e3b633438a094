package actors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/streamtier/streamtier/claim"
	"github.com/streamtier/streamtier/metadata"
)

// ErrClaimChanged marks a persist or a deletion refused because the cluster record is no
// longer the one the node opened with (a takeover, a restore, another cluster): the node
// stops persisting and deleting until it is restarted against a claim it may open.
var ErrClaimChanged = errors.New("the cluster claim changed: persisting and deleting stopped")

// claimState is the node's view of its claim: the cluster record it opened with and, once
// a check or a persist found it changed, why (never cleared: a node that lost its claim
// stops persisting and deleting for the rest of its run).
type claimState struct {
	opened metadata.ClusterRecord
	mu     sync.Mutex
	lost   string
}

// lostReason is why the claim was lost, "" while it holds.
func (s *claimState) lostReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost
}

// lose records that the claim changed; it reports whether this is the first time (the
// caller logs once).
func (s *claimState) lose(reason string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost != "" {
		return false
	}
	s.lost = reason
	return true
}

// err is nil while the claim holds, else an error wrapping ErrClaimChanged with the reason.
func (s *claimState) err() error {
	if r := s.lostReason(); r != "" {
		return fmt.Errorf("%w: %s", ErrClaimChanged, r)
	}
	return nil
}

// claimLostHint names what an operator does about a lost claim.
const claimLostHint = "another cluster took the bucket over, or etcd was restored or replaced; restart the node once `node recover` reports this cluster's claim"

// checkClaim re-reads the cluster record and the bucket's claim (claim.Check) and records a change; an etcd
// failure is returned (the caller retries) and changes nothing.
func (n *Node) checkClaim(ctx context.Context) error {
	if n.claim.lostReason() != "" {
		return n.claim.err()
	}
	err := claim.Check(ctx, claim.Options{Store: n.store, Meta: n.meta, KeyPrefix: n.cfg.KeyPrefix}, n.claim.opened)
	if errors.Is(err, claim.ErrChanged) {
		n.loseClaim(err.Error())
		return n.claim.err()
	}
	return err
}

// loseClaim records a lost claim, logs it once and counts it.
func (n *Node) loseClaim(reason string) {
	if n.claim.lose(reason + "; " + claimLostHint) {
		n.metrics.ClaimLost.Store(1)
		n.log.Error().Str("reason", reason).Str("hint", claimLostHint).
			Msg("the cluster claim changed: this node stops persisting and deleting; its streams stall")
		n.fatal(n.claim.err())
	}
}

// watchClaim re-checks the claim every interval until the node stops.
func (n *Node) watchClaim(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(n.ctx, interval)
		if err := n.checkClaim(ctx); err != nil && !errors.Is(err, ErrClaimChanged) && n.ctx.Err() == nil {
			n.log.Warn().Err(err).Msg("cannot re-read the cluster record; the claim is checked again at the next interval")
		}
		cancel()
		if n.claim.lostReason() != "" {
			return
		}
	}
}

// MetadataReady is the node's /readyz check of its metadata: an error while its claim is
// lost or a stream is stalled in metadata_missing or metadata_behind, naming the repair.
func (n *Node) MetadataReady(context.Context) error {
	if r := n.claim.lostReason(); r != "" {
		return fmt.Errorf("%w: %s", ErrClaimChanged, r)
	}
	missing, behind := n.metrics.StreamsMetadataMissing.Load(), n.metrics.StreamsMetadataBehind.Load()
	if missing+behind > 0 {
		return fmt.Errorf("%d streams in metadata_missing and %d in metadata_behind (etcd lost or is behind the bucket): nothing is written for them; see `node status` and run `node recover` (with --after-restore when etcd was restored from a snapshot)", missing, behind)
	}
	return nil
}
