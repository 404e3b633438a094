package actors

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/actors/readercore"
	"github.com/streamtier/streamtier/segments"
	"github.com/streamtier/streamtier/segments/loadgen"
)

// TestStreamOptionsReachTheCore: every StreamOptions field reaches the reader's core under
// its own name (nothing an embedder sets is ignored), a spec's non-zero options win over the
// node's, and a FragmentMaxAge means one thing: zero the default, negative no idle cut.
func TestStreamOptionsReachTheCore(t *testing.T) {
	var node, spec StreamOptions
	nv, sv := reflect.ValueOf(&node).Elem(), reflect.ValueOf(&spec).Elem()
	for i := range nv.NumField() {
		switch f := nv.Field(i); f.Kind() {
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(1000 + i))
		case reflect.Uint64:
			f.SetUint(uint64(1000 + i))
		default:
			t.Fatalf("field %s of kind %s: extend the test", nv.Type().Field(i).Name, f.Kind())
		}
	}
	cfg := Config{Stream: node}.coreConfig(StreamSpec{ID: "s", Epoch: 7})
	cv := reflect.ValueOf(cfg)
	for i := range nv.NumField() {
		name := nv.Type().Field(i).Name
		got := cv.FieldByName(name)
		if !got.IsValid() || !got.Equal(nv.Field(i)) {
			t.Errorf("StreamOptions.%s = %v reaches the core as %v", name, nv.Field(i), got)
		}
	}
	if cfg.StreamID != "s" || cfg.Epoch != 7 {
		t.Fatalf("core config %+v: want the spec's id and epoch", cfg)
	}
	sv.FieldByName("PersistInterval").SetInt(int64(time.Hour))
	spec.FragmentMaxAge = NoIdleCut
	cfg = Config{Stream: node}.coreConfig(StreamSpec{ID: "s", Epoch: 1, Options: spec})
	if cfg.PersistInterval != time.Hour || cfg.FragmentMaxAge != NoIdleCut || cfg.FragmentTargetSize != node.FragmentTargetSize {
		t.Fatalf("spec options over the node's: %+v", cfg)
	}
	if cfg := (Config{}).coreConfig(StreamSpec{ID: "s", Epoch: 1}); cfg.FragmentMaxAge != 0 {
		t.Fatalf("zero options give the core a max age of %v, want 0 (its default)", cfg.FragmentMaxAge)
	}
	if readercore.DefaultFragmentMaxAge <= 0 {
		t.Fatal("the default idle cut is off")
	}
}

// TestAddStreamRefusesBadEpochs: AddStream refuses epoch 0 and an epoch below the one the
// log's last chunk was written in, naming both; at the log's epoch or above the stream runs
// and status reports the epoch it writes at.
func TestAddStreamRefusesBadEpochs(t *testing.T) {
	w := newWorld(t, worldOptions{})
	log, _ := testLogger(t)
	n := startNode(w, Config{Logger: log, Stream: StreamOptions{FragmentTargetSize: 16 << 10, PersistThreshold: 1, PersistInterval: 50 * time.Millisecond}})
	lg := openLog(t, segments.Options{})
	g, err := loadgen.New(loadgen.Config{Seed: 1, Epoch: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loadgen.Write(context.Background(), lg, g, loadgen.Limit{Bytes: 16 << 10}, loadgen.WriteOptions{Commit: true}); err != nil {
		t.Fatal(err)
	}
	err = n.AddStream(StreamSpec{ID: "e", Log: lg})
	if !errors.Is(err, ErrBadEpoch) || !strings.Contains(err.Error(), "epoch 0") {
		t.Fatalf("epoch 0: %v", err)
	}
	err = n.AddStream(StreamSpec{ID: "e", Log: lg, Epoch: 2})
	if !errors.Is(err, ErrBadEpoch) || !strings.Contains(err.Error(), "epoch 2 is below epoch 3") {
		t.Fatalf("epoch 2 on a log at epoch 3: %v", err)
	}
	if len(n.Streams()) != 0 {
		t.Fatalf("refused specs left streams %v", n.Streams())
	}
	if err := n.AddStream(StreamSpec{ID: "e", Log: lg, Epoch: 3}); err != nil {
		t.Fatal(err)
	}
	persisted(t, n, "e", lg.NextOffset(), 30*time.Second)
	if st := status(t, n, "e"); st.Epoch != 3 || st.Core.Epoch != 3 {
		t.Fatalf("status epoch %d, core %d: want 3", st.Epoch, st.Core.Epoch)
	}
}
