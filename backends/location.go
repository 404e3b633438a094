package backends

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/streamtier/streamtier/nodeconfig"
)

// LocationFile is where a data directory records the etcd and bucket its streams are
// tiered to, so that the commands run later on it (status, verify, gc, ...) read the same
// backends without being told again, and refuse other ones.
func LocationFile(dataDir string) string { return filepath.Join(dataDir, "backends.json") }

// Location is the record: where the data went, never a credential (no key, secret, user
// or password; those come from the settings, the environment or the AWS chain as before).
// An empty etcd endpoint list or an empty bucket is the embedded server of the directory.
type Location struct {
	EtcdEndpoints []string `json:"etcd_endpoints"`
	EtcdPrefix    string   `json:"etcd_prefix"`
	S3Endpoint    string   `json:"s3_endpoint"`
	S3Bucket      string   `json:"s3_bucket"`
	S3Region      string   `json:"s3_region,omitempty"`
	S3PathStyle   bool     `json:"s3_path_style,omitempty"`
	KeyPrefix     string   `json:"key_prefix"`
	Written       string   `json:"written"` // when a node last started on it, for people
}

// LocationOf is where s tiers.
func LocationOf(s nodeconfig.Settings) Location {
	l := Location{EtcdEndpoints: s.EtcdEndpoints, EtcdPrefix: s.EtcdPrefix, KeyPrefix: s.KeyPrefix, Written: time.Now().UTC().Format(time.RFC3339)}
	if l.EtcdEndpoints == nil {
		l.EtcdEndpoints = []string{}
	}
	if !s.EmbeddedS3() {
		l.S3Endpoint, l.S3Bucket, l.S3Region, l.S3PathStyle = s.S3Endpoint, s.S3Bucket, s.S3Region, s.S3PathStyle
	}
	return l
}

// Where describes the location for messages.
func (l Location) Where() string {
	etcd := "the embedded etcd"
	if len(l.EtcdEndpoints) > 0 {
		etcd = "etcd " + strings.Join(l.EtcdEndpoints, ",")
	}
	etcd += " (prefix " + l.EtcdPrefix + ")"
	s3 := "the embedded S3 bucket"
	if l.S3Bucket != "" {
		s3 = "bucket " + l.S3Bucket
		if l.S3Endpoint != "" {
			s3 += " at " + l.S3Endpoint
		}
		if l.S3Region != "" {
			s3 += " (region " + l.S3Region + ")"
		}
	}
	return etcd + " and " + s3 + ", key prefix " + l.KeyPrefix
}

// values are the record as settings, for nodeconfig's Remembered source. S3's region and
// addressing style mean nothing for the embedded endpoint and are left out then.
func (l Location) values() map[string]string {
	v := map[string]string{
		"etcd_endpoints": strings.Join(l.EtcdEndpoints, ","), "etcd_prefix": l.EtcdPrefix,
		"s3_endpoint": l.S3Endpoint, "s3_bucket": l.S3Bucket, "key_prefix": l.KeyPrefix,
	}
	if l.S3Bucket != "" {
		v["s3_region"], v["s3_path_style"] = l.S3Region, strconv.FormatBool(l.S3PathStyle)
	}
	return v
}

// WriteLocation records l in the data directory (atomically: a temporary file renamed).
func WriteLocation(dataDir string, l Location) error {
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return fmt.Errorf("backends record: %w", err)
	}
	path := LocationFile(dataDir)
	if err := os.WriteFile(path+".tmp", append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("backends record: %w", err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fmt.Errorf("backends record: %w", err)
	}
	return nil
}

// ReadLocation reads the data directory's record; found is false when there is none (a
// directory no node has run on since records began).
func ReadLocation(dataDir string) (l Location, found bool, err error) {
	path := LocationFile(dataDir)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Location{}, false, nil
	}
	if err != nil {
		return Location{}, false, fmt.Errorf("backends record: %w", err)
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return Location{}, false, fmt.Errorf("backends record %s: %w (remove it to start again)", path, err)
	}
	return l, true, nil
}

// Remembered reads the data directory's record as nodeconfig's Remembered source (for
// nodeconfig.LoadRemembering).
func Remembered(dataDir string) (nodeconfig.Remembered, bool, error) {
	l, found, err := ReadLocation(dataDir)
	if err != nil || !found {
		return nodeconfig.Remembered{}, found, err
	}
	return nodeconfig.Remembered{Values: l.values(), File: LocationFile(dataDir), Where: l.Where()}, true, nil
}
