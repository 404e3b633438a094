package s3io

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/streamtier/streamtier/manifest"
)

// ErrNotFound marks an object this package looked for and did not find (no key in a
// listing names it). IsNotFound reports it like a 404; it classifies as non-transient.
var ErrNotFound = errors.New("object not found")

// errStopListing ends a listing early from its callback.
var errStopListing = errors.New("stop listing")

// locateListThreshold is the number of entries of one directory (data/ or meta/) from which
// LocateEntries lists the offset range they span once instead of one prefix per entry.
const locateListThreshold = 4

// LocateEntry finds the key of the object the manifest entry e of stream names: it lists
// manifest.EntryListPrefix (where its version 1 or version 2 key sorts) and returns the key
// that names e. None is an error wrapping ErrNotFound (IsNotFound); a failing listing is
// returned with its own class, so that callers can tell a missing object from S3 failing.
func (s *Store) LocateEntry(ctx context.Context, keyPrefix, stream string, e manifest.Entry) (string, error) {
	if e.IsGap() {
		return "", fmt.Errorf("%w: locate %s at %d: a gap entry names no object", ErrInvalidArgument, stream, e.FirstOffset)
	}
	prefix := manifest.EntryListPrefix(keyPrefix, stream, e)
	var found []string
	err := s.List(ctx, prefix, func(o ObjectInfo) error {
		if k, err := manifest.ParseKey(keyPrefix, o.Key); err == nil && k.Stream == stream && k.Names(e) {
			found = append(found, o.Key)
		}
		return nil
	})
	switch {
	case err != nil:
		return "", fmt.Errorf("locate %s %s at %d uid %016x: %w", stream, e.Kind, e.FirstOffset, e.UID, err)
	case len(found) == 0:
		return "", fmt.Errorf("locate %s %s at %d uid %016x: no key under s3://%s/%s: %w", stream, e.Kind, e.FirstOffset, e.UID, s.cfg.Bucket, prefix, ErrNotFound)
	case len(found) > 1:
		return "", fmt.Errorf("locate %s %s at %d uid %016x: %d keys name it (%s): refusing to guess", stream, e.Kind, e.FirstOffset, e.UID, len(found), strings.Join(found, ", "))
	}
	return found[0], nil
}

// LocateEntries finds the keys of the objects entries of stream name, with as few LISTs as
// the key order allows: the entries of one directory (data/ for fragments, meta/ for groups)
// are found by listing the offset range they span once, a few by one prefix each. Entries
// whose object is not listed are absent from the result (not an error: the caller decides,
// the reaper for one treats them as already deleted); gap entries are skipped.
func (s *Store) LocateEntries(ctx context.Context, keyPrefix, stream string, entries []manifest.Entry) (map[manifest.Entry]string, error) {
	out := make(map[manifest.Entry]string, len(entries))
	var data, meta []manifest.Entry
	for _, e := range entries {
		switch {
		case e.IsGap():
		case e.Kind == manifest.KindFragment:
			data = append(data, e)
		default:
			meta = append(meta, e)
		}
	}
	for _, es := range [][]manifest.Entry{data, meta} {
		if len(es) < locateListThreshold {
			for _, e := range es {
				key, err := s.LocateEntry(ctx, keyPrefix, stream, e)
				switch {
				case err == nil:
					out[e] = key
				case !IsNotFound(err):
					return out, err
				}
			}
			continue
		}
		if err := s.locateRange(ctx, keyPrefix, stream, es, out); err != nil {
			return out, err
		}
	}
	return out, nil
}

// locateRange lists the keys of one directory from the lowest to the highest offset of es
// (all fragments, or all groups) and records each key that names one of them.
func (s *Store) locateRange(ctx context.Context, keyPrefix, stream string, es []manifest.Entry, out map[manifest.Entry]string) error {
	sort.Slice(es, func(i, j int) bool { return es[i].FirstOffset < es[j].FirstOffset })
	lo, hi := es[0], es[len(es)-1]
	byUID := make(map[uint64][]manifest.Entry, len(es))
	for _, e := range es {
		byUID[e.UID] = append(byUID[e.UID], e)
	}
	first := manifest.EntryListPrefix(keyPrefix, stream, lo)
	dir := first[:strings.LastIndexByte(first[:len(first)-1], '/')+1] // .../data/ or .../meta/
	// Every key of an entry at lo's offset starts with <dir><off20>-: list from just after
	// <dir><off20>, which no key equals.
	in := listInput{prefix: dir, startAfter: first[:len(first)-1]}
	err := s.list(ctx, in, func(o ObjectInfo) error {
		k, err := manifest.ParseKey(keyPrefix, o.Key)
		if err != nil || k.Stream != stream {
			return nil
		}
		if k.Kind == manifest.ObjectRoot || k.Offset > hi.FirstOffset {
			return errStopListing // past the range (roots sort after every group key in meta/)
		}
		for _, e := range byUID[k.UID] {
			if _, dup := out[e]; !dup && k.Names(e) {
				out[e] = o.Key
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStopListing) {
		return fmt.Errorf("locate %d %s objects at %d..%d: %w", len(es), stream, lo.FirstOffset, hi.FirstOffset, err)
	}
	return nil
}

// listInput is a listing: every key under prefix that sorts after startAfter.
type listInput struct {
	prefix, startAfter string
}

func (in listInput) startAfterPtr() *string {
	if in.startAfter == "" {
		return nil
	}
	return aws.String(in.startAfter)
}
