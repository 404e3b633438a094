package check

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// The key prefix outside the stream prefixes (remote-format.md, "Keys", "The bucket
// describes itself"): the bucket claim <key-prefix>/claim, and nothing else but leftovers
// of the conditional-create probe under <key-prefix>/probe/ (docs/recovery.md). etcd
// holds the claim's cluster id and generation at <etcd-prefix>/cluster.

// Claim is the bucket claim object, decoded strictly.
type Claim struct {
	Format     int    `json:"format"`
	ClusterID  string `json:"cluster_id"`
	Generation uint64 `json:"generation"`
	EtcdPrefix string `json:"etcd_prefix"`
	Created    string `json:"created"`
}

// ClusterRecord is etcd's <etcd-prefix>/cluster, decoded strictly.
type ClusterRecord struct {
	ClusterID  string `json:"cluster_id"`
	Generation uint64 `json:"generation"`
	Claimed    bool   `json:"claimed"`
}

var clusterID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// strictJSON decodes b into v: every field present (fields), nothing unknown, nothing after.
func strictJSON(what string, b []byte, v any, fields ...string) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	for _, f := range fields {
		if _, ok := m[f]; !ok {
			return fmt.Errorf("%s: field %s missing", what, f)
		}
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// DecodeClaim decodes a claim object: format 3, a 128-bit lowercase hex cluster id, a
// generation of at least 1, an etcd prefix, an RFC 3339 creation time.
func DecodeClaim(b []byte) (Claim, error) {
	var c Claim
	if err := strictJSON("claim", b, &c, "format", "cluster_id", "generation", "etcd_prefix", "created"); err != nil {
		return Claim{}, err
	}
	if _, err := time.Parse(time.RFC3339, c.Created); err != nil || c.Format != 3 || !clusterID.MatchString(c.ClusterID) || c.Generation < 1 || c.EtcdPrefix == "" {
		return Claim{}, fmt.Errorf("claim: format %d, cluster id %q, generation %d, etcd prefix %q, created %q", c.Format, c.ClusterID, c.Generation, c.EtcdPrefix, c.Created)
	}
	return c, nil
}

// DecodeClusterRecord decodes etcd's cluster record.
func DecodeClusterRecord(b []byte) (ClusterRecord, error) {
	var r ClusterRecord
	if err := strictJSON("cluster record", b, &r, "cluster_id", "generation", "claimed"); err != nil {
		return ClusterRecord{}, err
	}
	if !clusterID.MatchString(r.ClusterID) || r.Generation < 1 {
		return ClusterRecord{}, fmt.Errorf("cluster record: cluster id %q, generation %d", r.ClusterID, r.Generation)
	}
	return r, nil
}

// checkOutside lists the whole key prefix and judges what lies outside the stream
// prefixes: the claim (it decodes, names this etcd prefix and, when etcd's cluster record
// exists and says claimed, agrees with it), probe leftovers, nothing else (c.mu held, the
// node stopped).
func (c *Checker) checkOutside(ctx context.Context) error {
	kp := c.cfg.KeyPrefix + "/"
	objs, err := c.cfg.Bucket.List(ctx, kp)
	if err != nil {
		return err
	}
	var prefixes []string
	for _, id := range c.order {
		prefixes = append(prefixes, StreamPrefix(c.cfg.KeyPrefix, id))
	}
	c.outside = 0
	var claim []byte
	for _, o := range objs {
		inStream := false
		for _, p := range prefixes {
			inStream = inStream || strings.HasPrefix(o.Key, p)
		}
		switch {
		case inStream:
			continue
		case o.Key == kp+"claim":
			if claim, err = c.cfg.Bucket.Get(ctx, o.Key); errors.Is(err, ErrNoSuchKey) {
				continue
			} else if err != nil {
				return err
			}
		case strings.HasPrefix(o.Key, kp+"probe/"):
		default:
			c.violate("", "foreign-key", "%s: under the key prefix, in no stream prefix, neither the claim nor a probe key", o.Key)
		}
		c.outside++
	}
	if claim == nil {
		return nil
	}
	cl, err := DecodeClaim(claim)
	if err != nil {
		c.violate("", "corrupt-claim", "%v: %q", err, claim)
		return nil
	}
	if cl.EtcdPrefix != c.cfg.EtcdPrefix {
		c.violate("", "claim-mismatch", "the claim names etcd prefix %q, this cluster's is %q", cl.EtcdPrefix, c.cfg.EtcdPrefix)
	}
	resp, err := c.cfg.Etcd.Get(ctx, c.cfg.EtcdPrefix+"/cluster")
	if err != nil {
		return fmt.Errorf("etcd read %s/cluster: %w", c.cfg.EtcdPrefix, err)
	}
	if len(resp.Kvs) == 0 {
		return nil // not this check's business: the streams' records say what is lost
	}
	rec, err := DecodeClusterRecord(resp.Kvs[0].Value)
	if err != nil {
		c.violate("", "corrupt-record", "%v: %q", err, resp.Kvs[0].Value)
		return nil
	}
	if rec.Claimed && (rec.ClusterID != cl.ClusterID || rec.Generation != cl.Generation) {
		c.violate("", "claim-mismatch", "the claim names cluster %s generation %d, etcd's record cluster %s generation %d", cl.ClusterID, cl.Generation, rec.ClusterID, rec.Generation)
	}
	return nil
}

// OutsideObjects is how many objects the last check found under the key prefix outside
// every stream prefix (the claim, probe leftovers).
func (c *Checker) OutsideObjects() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.outside
}
