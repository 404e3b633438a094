package metadata

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/manifest"
)

// Placement says which node writes a stream at which epoch and which nodes hold its replicas.
// The embedding broker writes it (it knows the stream's leader); nodes read and watch it.
type Placement struct {
	Stream   string   `json:"stream"`
	Writer   string   `json:"writer"`
	Epoch    uint64   `json:"epoch"`
	Replicas []string `json:"replicas"`
}

// Validate refuses a bad stream id or node name, a duplicate replica or the writer listed as
// its own replica.
func (p Placement) Validate() error {
	if err := manifest.ValidateStreamID(p.Stream); err != nil {
		return fmt.Errorf("%w: placement: %w", ErrInvalidArgument, err)
	}
	if err := ValidateNodeName(p.Writer); err != nil {
		return fmt.Errorf("%w: placement of %s: writer: %w", ErrInvalidArgument, p.Stream, err)
	}
	seen := make(map[string]bool, len(p.Replicas))
	for i, r := range p.Replicas {
		if err := ValidateNodeName(r); err != nil {
			return fmt.Errorf("%w: placement of %s: replica %d: %w", ErrInvalidArgument, p.Stream, i, err)
		}
		if r == p.Writer {
			return fmt.Errorf("%w: placement of %s: writer %s is also listed as a replica", ErrInvalidArgument, p.Stream, r)
		}
		if seen[r] {
			return fmt.Errorf("%w: placement of %s: replica %s listed twice", ErrInvalidArgument, p.Stream, r)
		}
		seen[r] = true
	}
	return nil
}

func encodePlacement(p Placement) ([]byte, error) {
	if p.Replicas == nil {
		p.Replicas = []string{}
	}
	return json.Marshal(p)
}

// decodePlacement decodes the record stored under key for stream, strictly.
func decodePlacement(key, stream string, value []byte) (Placement, error) {
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.DisallowUnknownFields()
	var p Placement
	if err := dec.Decode(&p); err != nil {
		return Placement{}, fmt.Errorf("%w: %s: placement record: %w", ErrCorruptRecord, key, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Placement{}, fmt.Errorf("%w: %s: placement record: data after the document", ErrCorruptRecord, key)
	}
	if len(p.Replicas) == 0 {
		p.Replicas = nil
	}
	if p.Stream != stream {
		return Placement{}, fmt.Errorf("%w: %s: placement record names stream %q", ErrCorruptRecord, key, p.Stream)
	}
	if err := p.Validate(); err != nil {
		return Placement{}, fmt.Errorf("%w: %s: %w", ErrCorruptRecord, key, err)
	}
	return p, nil
}

// PutPlacement stores p. Its epoch may not go below the stored placement's (a late write
// from an earlier leadership must not undo a newer one): that is refused with ErrStaleEpoch.
// The same epoch may change the replicas.
func (s *Store) PutPlacement(ctx context.Context, p Placement) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("put placement: %w", err)
	}
	value, err := encodePlacement(p)
	if err != nil {
		return fmt.Errorf("put placement %s: encode: %w", p.Stream, err)
	}
	key := PlacementKey(s.prefix, p.Stream)
	for {
		// Compare-and-swap on the revision read, so the epoch check and the write are atomic.
		resp, err := s.cli.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("put placement %s: %w", p.Stream, err)
		}
		var modRev int64
		if len(resp.Kvs) > 0 {
			modRev = resp.Kvs[0].ModRevision
			// A corrupt stored record does not block the broker from writing a good one.
			if old, err := decodePlacement(key, p.Stream, resp.Kvs[0].Value); err == nil && old.Epoch > p.Epoch {
				return fmt.Errorf("put placement %s: %w: epoch %d is below the stored %d", p.Stream, ErrStaleEpoch, p.Epoch, old.Epoch)
			}
		}
		txn, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", modRev)).
			Then(clientv3.OpPut(key, string(value))).
			Commit()
		if err != nil {
			return fmt.Errorf("put placement %s: %w", p.Stream, err)
		}
		if txn.Succeeded {
			return nil
		}
		// Someone wrote in between: read again and re-check the epoch.
	}
}

// GetPlacement reads a stream's placement; found is false when there is none.
func (s *Store) GetPlacement(ctx context.Context, stream string) (Placement, bool, error) {
	if err := manifest.ValidateStreamID(stream); err != nil {
		return Placement{}, false, fmt.Errorf("get placement: %w", err)
	}
	key := PlacementKey(s.prefix, stream)
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return Placement{}, false, fmt.Errorf("get placement %s: %w", stream, err)
	}
	if len(resp.Kvs) == 0 {
		return Placement{}, false, nil
	}
	p, err := decodePlacement(key, stream, resp.Kvs[0].Value)
	if err != nil {
		return Placement{}, false, fmt.Errorf("get placement %s: %w", stream, err)
	}
	return p, true, nil
}

// PlacementEventKind says whether a placement was put or deleted.
type PlacementEventKind int

const (
	// PlacementPut: the stream's placement is now Placement (new or changed).
	PlacementPut PlacementEventKind = iota + 1
	// PlacementDeleted: the stream has no placement any more (the stream was deleted).
	PlacementDeleted
)

// String names the kind, for logs and test failures.
func (k PlacementEventKind) String() string {
	switch k {
	case PlacementPut:
		return "put"
	case PlacementDeleted:
		return "deleted"
	}
	return fmt.Sprintf("PlacementEventKind(%d)", int(k))
}

// PlacementEvent is one change of placement. On PlacementDeleted only Placement.Stream is
// meaningful. Err is set (wrapping ErrCorruptRecord) when a put record could not be decoded.
// An event with Err set and no Kind is the last one: it says why the watch stopped before its
// context ended.
type PlacementEvent struct {
	Kind      PlacementEventKind
	Placement Placement
	Err       error
}

// WatchPlacements delivers every current placement as a PlacementPut, then every later change,
// with nothing missed (after a long disconnect it lists again and reports the difference).
// The channel closes when ctx is done or the client is closed.
func (s *Store) WatchPlacements(ctx context.Context) (<-chan PlacementEvent, error) {
	prefix := PlacementsPrefix(s.prefix)
	w := &prefixWatcher{cli: s.cli, prefix: prefix}
	snap, err := w.start(ctx)
	if err != nil {
		return nil, fmt.Errorf("watch placements: %w", err)
	}
	ch := make(chan PlacementEvent, 16)
	send := func(c kvChange) bool {
		select {
		case ch <- placementEvent(prefix, c):
			return true
		case <-ctx.Done():
			return false
		}
	}
	go func() {
		defer close(ch)
		for _, c := range snap {
			if !send(c) {
				return
			}
		}
		if err := w.run(ctx, send); err != nil {
			select {
			case ch <- PlacementEvent{Err: fmt.Errorf("watch placements: stopped: %w", err)}:
			case <-ctx.Done():
			}
		}
	}()
	return ch, nil
}

func placementEvent(prefix string, c kvChange) PlacementEvent {
	stream := strings.TrimPrefix(c.key, prefix)
	if c.deleted {
		return PlacementEvent{Kind: PlacementDeleted, Placement: Placement{Stream: stream}}
	}
	p, err := decodePlacement(c.key, stream, c.value)
	if err != nil {
		return PlacementEvent{Kind: PlacementPut, Placement: Placement{Stream: stream}, Err: err}
	}
	return PlacementEvent{Kind: PlacementPut, Placement: p}
}
