package backends

import (
	"os"
	"strings"
	"testing"

	"github.com/streamtier/streamtier/nodeconfig"
)

// TestLocationRecord: the record round-trips, says where the data went and never holds a
// credential.
func TestLocationRecord(t *testing.T) {
	dir := t.TempDir()
	s, err := nodeconfig.Resolve(nodeconfig.ModeRun, nodeconfig.Sources{Dir: dir, Flags: map[string]string{
		"etcd_endpoints": "10.0.0.1:2379,10.0.0.2:2379", "etcd_username": "operator", "etcd_password": "etcd-secret",
		"s3_endpoint": "http://s3.local:9000", "s3_bucket": "tier", "s3_path_style": "true",
		"s3_access_key": "AKIAEXAMPLE", "s3_secret_key": "s3-secret", "key_prefix": "prod"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, found, err := ReadLocation(dir); found || err != nil {
		t.Fatalf("a record before any: %v %v", found, err)
	}
	if err := WriteLocation(dir, LocationOf(s)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(LocationFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"operator", "etcd-secret", "AKIAEXAMPLE", "s3-secret"} {
		if strings.Contains(string(b), secret) {
			t.Fatalf("the record holds %q:\n%s", secret, b)
		}
	}
	rem, found, err := Remembered(dir)
	if err != nil || !found {
		t.Fatal(found, err)
	}
	want := map[string]string{"etcd_endpoints": "10.0.0.1:2379,10.0.0.2:2379", "etcd_prefix": "/streamtier", "s3_endpoint": "http://s3.local:9000",
		"s3_bucket": "tier", "s3_region": "us-east-1", "s3_path_style": "true", "key_prefix": "prod"}
	for k, v := range want {
		if rem.Values[k] != v {
			t.Errorf("%s = %q, want %q", k, rem.Values[k], v)
		}
	}
	if rem.Where != "etcd 10.0.0.1:2379,10.0.0.2:2379 (prefix /streamtier) and bucket tier at http://s3.local:9000 (region us-east-1), key prefix prod" {
		t.Errorf("where: %q", rem.Where)
	}
	if err := os.WriteFile(LocationFile(dir), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadLocation(dir); err == nil || !strings.Contains(err.Error(), "remove it") {
		t.Fatalf("a corrupt record: %v", err)
	}
}
