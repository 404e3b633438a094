package recovery_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/claim"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/recovery"
	"github.com/streamtier/streamtier/tiertest"
)

// TestClaimCases walks recovery.Claim through its cases on real etcd and versitygw: a
// version 2 prefix with no claim (refused without --claim, then created), a live-looking
// prefix (refused without --takeover), a restore (generation + 1 on both sides), a bump that
// crashed between the claim and etcd (completed), a second cluster (refused while the claim
// names another etcd prefix; --takeover fences the first cluster), an etcd lost (adopted).
func TestClaimCases(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	be := tiertest.StartBackends(ctx, t, false)
	store, meta := be.Store, be.Meta
	tiertest.Write(t, tiertest.Env{Store: store, Meta: meta}, tiertest.Spec{Stream: "a", Seed: 1, Epoch: 1})
	o := recovery.ClaimOptions{Store: store, Meta: meta, KeyPrefix: p}

	_, err := recovery.Claim(ctx, o)
	if !errors.Is(err, recovery.ErrClaimRefused) || !strings.Contains(err.Error(), "--claim") {
		t.Fatalf("no claim anywhere: %v", err)
	}
	young := o
	young.Create, young.NewestRoot = true, time.Now()
	if _, err := recovery.Claim(ctx, young); !errors.Is(err, recovery.ErrClaimRefused) || !strings.Contains(err.Error(), "--takeover") {
		t.Fatalf("young roots: %v", err)
	}
	create := o
	create.Create, create.Write = true, true
	cp, err := recovery.Claim(ctx, create)
	if err != nil || cp.Action != "create" || !cp.Written {
		t.Fatalf("--claim: %+v %v", cp, err)
	}
	opened, err := claim.Open(ctx, claim.Options{Store: store, Meta: meta, KeyPrefix: p})
	if err != nil || opened.Generation != 1 {
		t.Fatalf("open after --claim: %+v %v", opened, err)
	}

	restore := o
	restore.AfterRestore, restore.Write = true, true
	if cp, err := recovery.Claim(ctx, restore); err != nil || cp.Action != "bump" || cp.Target.Generation != 2 {
		t.Fatalf("--after-restore: %+v %v", cp, err)
	}
	if err := claim.Check(ctx, claim.Options{Store: store, Meta: meta, KeyPrefix: p}, opened); !errors.Is(err, claim.ErrChanged) {
		t.Fatalf("a node opened at generation 1 after the restore's bump: %v", err)
	}
	// A bump that raised the claim and crashed before etcd.
	c, _, err := store.ReadClaim(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	next := c
	next.Generation = 3
	if err := store.ReplaceClaim(ctx, p, c, next); err != nil {
		t.Fatal(err)
	}
	if _, err := claim.Open(ctx, claim.Options{Store: store, Meta: meta, KeyPrefix: p}); !errors.Is(err, claim.ErrRefused) {
		t.Fatalf("open between the claim and etcd: %v", err)
	}
	if cp, err := recovery.Claim(ctx, restore); err != nil || cp.Action != "complete" || cp.Target.Generation != 3 {
		t.Fatalf("completing a crashed bump: %+v %v", cp, err)
	}
	first, err := claim.Open(ctx, claim.Options{Store: store, Meta: meta, KeyPrefix: p})
	if err != nil || first.Generation != 3 {
		t.Fatalf("open after completing: %+v %v", first, err)
	}

	// A second cluster: another etcd prefix, the same key prefix.
	other := o
	other.Meta = metadata.NewStore(meta.Client(), "/other")
	if _, err := recovery.Claim(ctx, other); !errors.Is(err, recovery.ErrClaimRefused) || !strings.Contains(err.Error(), `etcd prefix "`+meta.Prefix()+`"`) {
		t.Fatalf("second cluster: %v", err)
	}
	other.Takeover, other.Write = true, true
	if cp, err := recovery.Claim(ctx, other); err != nil || cp.Target.Generation != 4 {
		t.Fatalf("second cluster --takeover: %+v %v", cp, err)
	}
	if _, err := claim.Open(ctx, claim.Options{Store: store, Meta: meta, KeyPrefix: p}); !errors.Is(err, claim.ErrRefused) {
		t.Fatalf("the first cluster after the takeover: %v", err)
	}
	if _, err := claim.Open(ctx, claim.Options{Store: store, Meta: other.Meta, KeyPrefix: p}); err != nil {
		t.Fatalf("the second cluster after the takeover: %v", err)
	}

	// The second cluster's etcd lost: its recovery adopts the claim (it names its prefix).
	if _, err := meta.Client().Delete(ctx, "/other/cluster"); err != nil {
		t.Fatal(err)
	}
	adopt := o
	adopt.Meta, adopt.Write = other.Meta, true
	if cp, err := recovery.Claim(ctx, adopt); err != nil || cp.Action != "adopt" || cp.Target.Generation != 4 {
		t.Fatalf("etcd lost: %+v %v", cp, err)
	}
	if _, err := claim.Open(ctx, claim.Options{Store: store, Meta: other.Meta, KeyPrefix: p}); err != nil {
		t.Fatalf("open after the adoption: %v", err)
	}
}
