package actors

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/segments/loadgen"
)

// TestDormantStreamThroughEtcdWipe: every etcd key goes while a stream is dormant (no actor
// to see it). Its status names the lost claim without waking it. Data committed afterwards
// wakes it; its new reader finds the claim gone,
// persists and deletes nothing, and says why and what to do in status. The bucket keeps
// every key it had; `node recover` (the Go API) rebuilds the records, and a node started
// again persists everything, the dormant stream's acknowledged offsets included.
func TestDormantStreamThroughEtcdWipe(t *testing.T) {
	w := newWorld(t, worldOptions{})
	ctx := context.Background()
	cfg := dormantConfig(t)
	cfg.ClaimRecheck = 100 * time.Millisecond
	n1, lg := startPersisted(t, w, cfg, "sleeper", 5)
	awaitDormant(t, n1, "sleeper", 1)
	acked := lg.NextOffset()
	before := bucketKeys(t, w.Store)

	if _, err := w.Meta.Client().Delete(ctx, w.Meta.Prefix()+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	until(t, 20*time.Second, "the dormant stream's status names the lost claim", func() (bool, string) {
		st, err := n1.Status(ctx, "sleeper")
		return err == nil && st.Dormant && st.Phase == "claim_changed" && strings.Contains(st.MetadataReason, "node recover"),
			fmt.Sprintf("phase %s dormant %t reason %q %v", st.Phase, st.Dormant, st.MetadataReason, err)
	})
	writeLog(t, lg, 6, loadgen.Limit{Bytes: 20 << 10}) // the commit wakes it
	until(t, 20*time.Second, "the woken stream sees its claim gone and says so", func() (bool, string) {
		st, err := n1.Status(ctx, "sleeper")
		return err == nil && !st.Dormant && st.Phase != "running" && strings.Contains(st.MetadataReason, "node recover"),
			fmt.Sprintf("phase %s dormant %t reason %q waiting %q %v", st.Phase, st.Dormant, st.MetadataReason, st.Waiting, err)
	})
	if n1.Metrics().Wakes.Load() < 1 {
		t.Fatal("the commit did not wake the dormant stream")
	}
	if _, _, found, err := w.Meta.ReadManifest(ctx, "sleeper"); err != nil || found {
		t.Fatalf("a record written after the wipe: found %t, %v", found, err)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := n1.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	if m := missingKeys(t, w.Store, before); len(m) > 0 {
		t.Fatalf("%v deleted after the wipe", m)
	}

	recoverTakeover(t, w, acked)
	n2 := resumeRecovered(t, w, cfg, "sleeper", lg)
	checkNothingLost(t, n2, "sleeper", lg)
	awaitDormant(t, n2, "sleeper", 1)
}
