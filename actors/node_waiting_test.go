package actors

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/s3test"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// TestStartRefusesWrongS3Setup: a missing bucket and a wrong secret fail Start with the
// cause (S3's own answer), before any stream is added; NewStore alone checks nothing.
func TestStartRefusesWrongS3Setup(t *testing.T) {
	w := newWorld(t, worldOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, c := range []struct {
		name   string
		change func(*s3io.Config)
		want   string
	}{
		{"missing bucket", func(c *s3io.Config) { c.Bucket = "no-such-bucket-here" }, "NoSuchBucket"},
		{"wrong secret", func(c *s3io.Config) { c.SecretKey = "not-the-secret" }, "SignatureDoesNotMatch"},
	} {
		cfg := w.S3Config
		c.change(&cfg)
		store, err := s3io.NewStore(ctx, cfg)
		if err != nil {
			t.Fatalf("%s: NewStore: %v", c.name, err)
		}
		n, err := Start(ctx, v3Config(t), store, w.Meta)
		if err == nil {
			n.Stop(ctx)
			t.Fatalf("%s: Start succeeded", c.name)
		}
		if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), cfg.Bucket) {
			t.Errorf("%s: Start: %v, want the cause (%s) and the bucket named", c.name, err, c.want)
		}
		if strings.Contains(err.Error(), "not-the-secret") {
			t.Errorf("%s: the secret is in the error: %v", c.name, err)
		}
	}
}

// TestStatusSaysWhyUploadsFail: uploads refused by S3 (403) leave the stream running and
// retrying; its status says so in one line with S3's answer, and the line clears once an
// upload succeeds.
func TestStatusSaysWhyUploadsFail(t *testing.T) {
	w := newWorld(t, worldOptions{})
	ctx := context.Background()
	n := startNode(w, v3Config(t))
	w.Inj.Add(s3test.Rule{Method: "PUT", KeyRegexp: `/data/`, Fault: s3test.FaultForbidden})
	lg := openLog(t, segments.Options{})
	writeLog(t, lg, 3, loadgen.Limit{Bytes: 40 << 10})
	if err := n.AddStream(StreamSpec{ID: "denied", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	until(t, 20*time.Second, "the status says uploads fail", func() (bool, string) {
		st, err := n.Status(ctx, "denied")
		return err == nil && strings.HasPrefix(st.Waiting, "uploads") && strings.Contains(st.Waiting, "AccessDenied"), st.Waiting
	})
	w.Inj.Clear()
	persisted(t, n, "denied", lg.NextOffset(), 60*time.Second)
	if st, _ := n.Status(ctx, "denied"); st.Waiting != "" {
		t.Fatalf("after the uploads went through the status still says %q", st.Waiting)
	}
}

// TestStatusNothingCommitted: a broker that reopened its log and forgot SetCommitted gets a
// stream that cannot move; the status says why and what the log holds.
func TestStatusNothingCommitted(t *testing.T) {
	w := newWorld(t, worldOptions{})
	ctx := context.Background()
	n := startNode(w, v3Config(t))
	lg := openLog(t, segments.Options{})
	g, err := loadgen.New(loadgen.Config{Seed: 1, MinDataBytes: 2000, MaxDataBytes: 6000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loadgen.Write(ctx, lg, g, loadgen.Limit{Bytes: 20 << 10}, loadgen.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := n.AddStream(StreamSpec{ID: "uncommitted", Log: lg, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	want := "nothing committed; the local log holds [0, " + strconv.FormatUint(lg.NextOffset(), 10) + ")"
	until(t, 20*time.Second, "the status says nothing is committed", func() (bool, string) {
		st, err := n.Status(ctx, "uncommitted")
		return err == nil && st.Phase == "running" && strings.HasPrefix(st.Waiting, want), st.Phase + ": " + st.Waiting
	})
	if err := lg.SetCommitted(lg.NextOffset() - 1); err != nil {
		t.Fatal(err)
	}
	persisted(t, n, "uncommitted", lg.NextOffset(), 30*time.Second)
	if st, _ := n.Status(ctx, "uncommitted"); st.Waiting != "" {
		t.Fatalf("after the commit the status still says %q", st.Waiting)
	}
}
