package admin

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/streamtier/streamtier/actors/cluster"
	"github.com/streamtier/streamtier/actors/cluster/replicacore"
	"github.com/streamtier/streamtier/metadata"
)

// TestBuildClusterReport: the cluster part of /status carries the members, placements in
// stream order, the replica held (revision, epoch, digest, counters) and the transport
// counters, and leaves out the replica's long history.
func TestBuildClusterReport(t *testing.T) {
	st := cluster.Status{
		Node: "b", Address: "127.0.0.1:7000", Members: map[string]string{"a": "127.0.0.1:7001", "b": "127.0.0.1:7000"},
		Writers: map[string]uint64{"s2": 3}, Fenced: map[string]uint64{},
		Placements: map[string]metadata.Placement{
			"s2": {Stream: "s2", Writer: "b", Epoch: 3},
			"s1": {Stream: "s1", Writer: "a", Epoch: 1, Replicas: []string{"b"}},
		},
		Replicas: map[string]cluster.ReplicaStatus{"s1": {
			Status: replicacore.Status{Stream: "s1", Writer: "a", WriterEpoch: 1, Synced: true, Seq: 42, UID: 0xabc, Epoch: 1, NextOffset: 900,
				Counters: replicacore.Counters{Applied: 5, Gaps: 1}},
			Digest: 0xfeed, History: make([]cluster.ReplicaHeld, 300), LocalNext: 1000,
		}},
	}
	var tr cluster.TransportStats
	tr.Sent.Add(7)
	tr.Received.Add(9)
	r := BuildClusterReport(st, &tr)
	if len(r.Placements) != 2 || r.Placements[0].Stream != "s1" || r.Placements[1].Stream != "s2" {
		t.Fatalf("placements: %+v", r.Placements)
	}
	rep, ok := r.Replicas["s1"]
	if !ok || rep.Seq != 42 || rep.UID != "0000000000000abc" || rep.Epoch != 1 || rep.Writer != "a" || rep.Digest != 0xfeed || rep.NextOffset != 900 ||
		rep.LocalNext != 1000 || rep.Counters["applied"] != 5 || rep.Counters["gaps"] != 1 {
		t.Fatalf("replica: %+v", rep)
	}
	if r.Transport.Sent != 7 || r.Transport.Received != 9 || r.Members["a"] != "127.0.0.1:7001" || r.Writers["s2"] != 3 {
		t.Fatalf("report: %+v", r)
	}
	b, err := json.Marshal(Report{Cluster: &r})
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); !strings.Contains(s, `"cluster":{"node":"b"`) || strings.Contains(s, "History") || !strings.Contains(s, `"seq":42,"uid":"0000000000000abc"`) {
		t.Fatalf("JSON: %s", s)
	}
	if b, _ := json.Marshal(Report{}); strings.Contains(string(b), "cluster") {
		t.Fatalf("a single node's report has a cluster part: %s", b)
	}
}
