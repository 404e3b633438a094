package messages

import (
	"errors"
	"fmt"
	"math"

	"github.com/streamtier/streamtier/manifest"
)

// ErrBadMessage marks a message whose content cannot be a manifest value: a missing part, an
// unknown entry kind, a splice index that does not fit an int. The receiver drops it.
var ErrBadMessage = errors.New("bad cluster message")

// FromEntry converts a manifest entry to its message form.
func FromEntry(e manifest.Entry) *Entry {
	return &Entry{
		FirstOffset: e.FirstOffset, FirstTimestamp: e.FirstTimestamp, LastTimestamp: e.LastTimestamp,
		Size: e.Size, Uid: e.UID, Kind: uint32(e.Kind),
	}
}

// ToEntry converts an entry message back, refusing a nil entry or an unknown kind.
func ToEntry(e *Entry) (manifest.Entry, error) {
	if e == nil {
		return manifest.Entry{}, fmt.Errorf("%w: missing entry", ErrBadMessage)
	}
	if e.Kind > uint32(manifest.KindGap) {
		return manifest.Entry{}, fmt.Errorf("%w: entry at %d has unknown kind %d", ErrBadMessage, e.FirstOffset, e.Kind)
	}
	return manifest.Entry{
		FirstOffset: e.FirstOffset, FirstTimestamp: e.FirstTimestamp, LastTimestamp: e.LastTimestamp,
		Size: e.Size, UID: e.Uid, Kind: manifest.Kind(e.Kind),
	}, nil
}

func fromEntries(es []manifest.Entry) []*Entry {
	if len(es) == 0 {
		return nil
	}
	out := make([]*Entry, len(es))
	for i, e := range es {
		out[i] = FromEntry(e)
	}
	return out
}

func toEntries(es []*Entry, what string) ([]manifest.Entry, error) {
	if len(es) == 0 {
		return nil, nil
	}
	out := make([]manifest.Entry, len(es))
	for i, e := range es {
		var err error
		if out[i], err = ToEntry(e); err != nil {
			return nil, fmt.Errorf("%s %d: %w", what, i, err)
		}
	}
	return out, nil
}

// FromManifest converts a manifest to its message form.
func FromManifest(m manifest.Manifest) *Manifest {
	return &Manifest{
		FirstOffset: m.FirstOffset, NextOffset: m.NextOffset, FirstTimestamp: m.FirstTimestamp,
		FirstLastTimestamp: m.FirstLastTimestamp, TotalSize: m.TotalSize, Entries: fromEntries(m.Entries),
	}
}

// ToManifest converts a manifest message back. It checks the form only; whether the
// manifest is consistent (manifest.Check) is the receiver's decision.
func ToManifest(m *Manifest) (manifest.Manifest, error) {
	if m == nil {
		return manifest.Manifest{}, fmt.Errorf("%w: missing manifest", ErrBadMessage)
	}
	entries, err := toEntries(m.Entries, "manifest entry")
	if err != nil {
		return manifest.Manifest{}, err
	}
	return manifest.Manifest{
		FirstOffset: m.FirstOffset, NextOffset: m.NextOffset, FirstTimestamp: m.FirstTimestamp,
		FirstLastTimestamp: m.FirstLastTimestamp, TotalSize: m.TotalSize, Entries: entries,
	}, nil
}

// FromEdit converts an edit to its message form.
func FromEdit(e manifest.Edit) *Edit {
	return &Edit{
		At: int64(e.At), Remove: int64(e.Remove), Insert: fromEntries(e.Insert),
		FirstOffset: e.FirstOffset, FirstTimestamp: e.FirstTimestamp, FirstLastTimestamp: e.FirstLastTimestamp,
		SetNextOffset: e.SetNextOffset, NextOffset: e.NextOffset, SizeDelta: e.SizeDelta,
	}
}

// ToEdit converts an edit message back, refusing negative or oversized splice indices.
func ToEdit(e *Edit) (manifest.Edit, error) {
	if e == nil {
		return manifest.Edit{}, fmt.Errorf("%w: missing edit", ErrBadMessage)
	}
	if e.At < 0 || e.At > math.MaxInt32 || e.Remove < 0 || e.Remove > math.MaxInt32 {
		return manifest.Edit{}, fmt.Errorf("%w: edit splice at %d removing %d is out of range", ErrBadMessage, e.At, e.Remove)
	}
	insert, err := toEntries(e.Insert, "inserted entry")
	if err != nil {
		return manifest.Edit{}, err
	}
	return manifest.Edit{
		At: int(e.At), Remove: int(e.Remove), Insert: insert,
		FirstOffset: e.FirstOffset, FirstTimestamp: e.FirstTimestamp, FirstLastTimestamp: e.FirstLastTimestamp,
		SetNextOffset: e.SetNextOffset, NextOffset: e.NextOffset, SizeDelta: e.SizeDelta,
	}, nil
}

// FromEdits converts a list of edits, keeping their order.
func FromEdits(es []manifest.Edit) []*Edit {
	out := make([]*Edit, len(es))
	for i, e := range es {
		out[i] = FromEdit(e)
	}
	return out
}

// ToEdits converts a list of edit messages back, naming the first one that is bad.
func ToEdits(es []*Edit) ([]manifest.Edit, error) {
	out := make([]manifest.Edit, len(es))
	for i, e := range es {
		var err error
		if out[i], err = ToEdit(e); err != nil {
			return nil, fmt.Errorf("edit %d of %d: %w", i+1, len(es), err)
		}
	}
	return out, nil
}
