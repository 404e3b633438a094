package nodeconfig

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/actors"
)

// TestClusterDefaults: cluster mode is off by default, with a loopback listen address, a
// 3 s member lease and a 1 s resync retry.
func TestClusterDefaults(t *testing.T) {
	s := resolve(t, ModeRun, Sources{})
	if s.Cluster || s.ClusterListen != "127.0.0.1:0" || s.ClusterMemberTTL != 3*time.Second || s.ClusterResyncRetry != time.Second {
		t.Fatalf("cluster defaults: %+v", s)
	}
}

// TestClusterPrecedence: the cluster settings follow the same precedence as every other
// (flag, then environment, then file, then default).
func TestClusterPrecedence(t *testing.T) {
	file := []byte("cluster: true\nnode_id: from-file\ncluster_listen: 127.0.0.1:7000\ncluster_member_ttl: 5s\ncluster_resync_retry: 2s\n")
	env := []string{"STREAMTIER_CLUSTER_LISTEN=127.0.0.1:7001", "STREAMTIER_NODE_ID=from-env", "STREAMTIER_CLUSTER_MEMBER_TTL=4s"}
	flags := map[string]string{"cluster_listen": "127.0.0.1:7002"}
	s := resolve(t, ModeRun, Sources{Flags: flags, Env: env, File: file, FileName: "node.yaml"})
	if !s.Cluster || s.NodeID != "from-env" || s.ClusterListen != "127.0.0.1:7002" || s.ClusterMemberTTL != 4*time.Second || s.ClusterResyncRetry != 2*time.Second {
		t.Fatalf("precedence: %+v", s)
	}
	want := map[string]string{
		"cluster":              "file node.yaml",
		"node_id":              "env STREAMTIER_NODE_ID",
		"cluster_listen":       "flag --cluster-listen",
		"cluster_member_ttl":   "env STREAMTIER_CLUSTER_MEMBER_TTL",
		"cluster_resync_retry": "file node.yaml",
	}
	for k, v := range want {
		if s.Origins[k] != v {
			t.Errorf("origin of %s = %q, want %q", k, s.Origins[k], v)
		}
	}
	// A boolean flag given without a value (--cluster) reaches Resolve as "true".
	s = resolve(t, ModeRun, Sources{Flags: map[string]string{"cluster": "true", "node_id": "n1"}})
	if !s.Cluster {
		t.Fatal("--cluster did not turn cluster mode on")
	}
	cc := s.ClusterConfig(func(string) (actors.StreamSpec, error) { return actors.StreamSpec{}, nil })
	if cc.MemberTTL != 3*time.Second || cc.ResyncRetry != time.Second || cc.Validate() != nil {
		t.Fatalf("cluster config: %+v", cc)
	}
}

// TestClusterBadValues: every refusal names the setting and where its value came from.
func TestClusterBadValues(t *testing.T) {
	on := func(m map[string]string) map[string]string {
		out := map[string]string{"cluster": "true", "node_id": "n1"}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	cases := []struct {
		mode Mode
		src  Sources
		want []string
	}{
		{ModeRun, Sources{Flags: on(map[string]string{"cluster_listen": "nowhere"})}, []string{"cluster_listen", "flag --cluster-listen", "host:port"}},
		{ModeRun, Sources{Flags: on(map[string]string{"cluster_listen": ":7000"})}, []string{"cluster_listen", "give a host"}},
		{ModeRun, Sources{Flags: on(map[string]string{"cluster_listen": "127.0.0.1:70000"})}, []string{"cluster_listen", "0 to 65535"}},
		{ModeRun, Sources{Env: []string{"STREAMTIER_CLUSTER_MEMBER_TTL=soon"}, Flags: on(nil)}, []string{"cluster_member_ttl", "env STREAMTIER_CLUSTER_MEMBER_TTL", "not a duration"}},
		{ModeRun, Sources{Flags: on(map[string]string{"cluster_member_ttl": "500ms"})}, []string{"cluster_member_ttl", "at least 2s"}},
		{ModeRun, Sources{Flags: on(map[string]string{"cluster_member_ttl": "1s"})}, []string{"cluster_member_ttl", "at least 2s"}},
		{ModeRun, Sources{Flags: on(map[string]string{"cluster_resync_retry": "0"})}, []string{"cluster_resync_retry", "positive"}},
		{ModeRun, Sources{Flags: map[string]string{"cluster": "maybe"}}, []string{"setting cluster", "flag --cluster", "not a boolean"}},
		{ModeRun, Sources{Flags: map[string]string{"cluster": "true"}}, []string{"node_id", "from default", "unique name"}},
		{ModeRun, Sources{Flags: map[string]string{"cluster": "true", "node_id": "-bad"}}, []string{"node_id", "flag --node-id"}},
		{ModeRun, Sources{File: []byte("cluster_listen: 127.0.0.1:7000\n"), FileName: "n.yaml"}, []string{"cluster_listen", "file n.yaml", "only applies in cluster mode"}},
		{ModeRun, Sources{Env: []string{"STREAMTIER_CLUSTER_MEMBER_TTL=5s"}}, []string{"cluster_member_ttl", "only applies in cluster mode"}},
		{ModeDemo, Sources{Flags: on(nil)}, []string{"setting cluster", "demo"}},
	}
	for _, c := range cases {
		if c.src.Dir == "" {
			c.src.Dir = "/work"
		}
		_, err := Resolve(c.mode, c.src)
		if err == nil {
			t.Errorf("%+v: accepted", c.src)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: error %q lacks %q", c.src, err, w)
			}
		}
	}
}

// TestClusterStream: a stream the placement gives the node lives in its declared log_dir
// with its overrides, or under data_dir/streams; a hostile id is refused before it becomes
// a path.
func TestClusterStream(t *testing.T) {
	file := []byte("cluster: true\nnode_id: n1\ndata_dir: /data\nstreams:\n  - id: orders\n    log_dir: /broker/orders\n    fragment_target_size: 1MiB\n")
	s := resolve(t, ModeRun, Sources{File: file, FileName: "node.yaml"})
	st, err := s.ClusterStream("orders")
	if err != nil || st.LogDir != "/broker/orders" || st.FragmentTargetSize != 1<<20 {
		t.Fatalf("declared stream: %+v %v", st, err)
	}
	st, err = s.ClusterStream("audit")
	if err != nil || st.LogDir != filepath.Join("/data", "streams", "audit") || st.ID != "audit" {
		t.Fatalf("undeclared stream: %+v %v", st, err)
	}
	for _, bad := range []string{"../etc", "", "a/b", strings.Repeat("x", 300)} {
		if _, err := s.ClusterStream(bad); err == nil || !strings.Contains(err.Error(), "placement stream") {
			t.Errorf("ClusterStream(%q): %v", bad, err)
		}
	}
}
