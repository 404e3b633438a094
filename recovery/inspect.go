// Package recovery reads the bucket alone to find every stream of a key prefix and its
// newest persisted manifest (the same root choice for `node recover`, the --from-bucket
// readers and embedders), and rebuilds a stream's etcd records from it as
// remote-format.md ("Recovering the metadata from the bucket") says. The decisions are
// manifest/resolve's; this package lists, reads and writes.
package recovery

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/manifest/resolve"
	"github.com/streamtier/streamtier/s3io"
)

// ListStreams finds every stream prefix under keyPrefix (<key-prefix>/<h4>/<stream>/) by
// listing two levels with a delimiter, never a stream's objects; ids that are not valid
// stream ids, or not in their hash partition, are skipped.
func ListStreams(ctx context.Context, store *s3io.Store, keyPrefix string) ([]string, error) {
	_, parts, err := store.ListDir(ctx, keyPrefix+"/")
	if err != nil {
		return nil, fmt.Errorf("list streams: %w", err)
	}
	var out []string
	for _, h := range parts {
		if strings.HasSuffix(h, "/probe/") {
			continue
		}
		_, streams, err := store.ListDir(ctx, h)
		if err != nil {
			return nil, fmt.Errorf("list streams: %w", err)
		}
		for _, sp := range streams {
			id := strings.TrimSuffix(strings.TrimPrefix(sp, h), "/")
			if manifest.ValidateStreamID(id) == nil && manifest.StreamPrefix(keyPrefix, id) == sp {
				out = append(out, id)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// Inspection is what the bucket alone says of one stream.
type Inspection struct {
	Stream string
	Choice resolve.TopChoice
	// Root is the chosen root's manifest and lineage (TopV3, TopSingleV2), read and checked.
	Root manifest.Root
	// Check is why the chosen root failed its check (CRC, groups); nil when it passed.
	Check error
	// Requests counts the S3 requests the inspection made.
	Requests int
	// Newest is the LastModified of the newest root of the prefix (the store's clock; zero
	// when there is none): recovery's "a live cluster may own it" looks at it.
	Newest time.Time

	vanished bool // a listed root was not found when read (choose lists again)
}

// Inspect finds the stream's newest persisted manifest from the bucket alone: one listing
// of the stream prefix's top level (the deletion marker, whether objects exist), one of its
// roots, a read of each version 3 root (their lineage), then the chosen root's check: its
// CRC and every group below it (its fragments are checked only when verify is true). An
// error means the bucket could not be read; a root that fails its check is in Check.
func Inspect(ctx context.Context, store *s3io.Store, keyPrefix, stream string, verify bool) (Inspection, error) {
	in, obj, err := choose(ctx, store, keyPrefix, stream)
	if err != nil || !in.Chosen() {
		return in, err
	}
	n, err := checkTree(ctx, store, keyPrefix, stream, obj.Manifest, verify)
	in.Requests += n
	in.Check = err
	return in, nil
}

// Chosen says the inspection chose a root (Choice.Outcome TopV3 or TopSingleV2) and read it
// (Root); Check may still report that it failed its check.
func (in Inspection) Chosen() bool {
	return (in.Choice.Outcome == resolve.TopV3 || in.Choice.Outcome == resolve.TopSingleV2) && in.Root.Version > 0
}

// Choose is Inspect without the check of the chosen root's tree: the listing, the
// lineage and the chosen root, read and decoded. The --from-bucket readers use it (they
// read the tree anyway); Check is set only when the chosen root cannot be read.
func Choose(ctx context.Context, store *s3io.Store, keyPrefix, stream string) (Inspection, error) {
	in, _, err := choose(ctx, store, keyPrefix, stream)
	return in, err
}

// ErrNoRoot is returned by Latest for a stream whose prefix names no root to read.
var ErrNoRoot = errors.New("the bucket names no root to read")

// Latest is the newest persisted manifest of a stream from the bucket alone (the same root
// choice as `node recover`): the chosen root, or an error wrapping ErrNoRoot that says why
// there is none (deleted, several version 2 roots, an undecided lineage, nothing stored).
func Latest(ctx context.Context, store *s3io.Store, keyPrefix, stream string) (manifest.Root, error) {
	in, err := Choose(ctx, store, keyPrefix, stream)
	if err != nil {
		return manifest.Root{}, err
	}
	if in.Check != nil {
		return manifest.Root{}, fmt.Errorf("stream %s: %w", stream, in.Check)
	}
	if !in.Chosen() {
		why := in.Choice.Reason
		if why == "" {
			why = in.Choice.Outcome.String()
		}
		return manifest.Root{}, fmt.Errorf("stream %s under %s: %w: %s", stream, manifest.StreamPrefix(keyPrefix, stream), ErrNoRoot, why)
	}
	return in.Root, nil
}

// vanishedAttempts bounds how often choose lists again because a listed root was gone
// when read: a live writer's reaper deletes a superseded root right after a persist.
const vanishedAttempts = 5

// choose chooses the stream's top root; a root listed and then not found (a live writer
// persisted a later one and reaped it in between) makes it list again, a few times, rather
// than call the lineage undecided.
func choose(ctx context.Context, store *s3io.Store, keyPrefix, stream string) (Inspection, manifest.Root, error) {
	requests := 0
	for attempt := 1; ; attempt++ {
		in, obj, err := chooseListed(ctx, store, keyPrefix, stream)
		in.Requests += requests
		if err != nil || !in.vanished || attempt == vanishedAttempts {
			return in, obj, err
		}
		requests = in.Requests
	}
}

func chooseListed(ctx context.Context, store *s3io.Store, keyPrefix, stream string) (Inspection, manifest.Root, error) {
	in, obj := Inspection{Stream: stream}, manifest.Root{}
	if err := manifest.ValidateStreamID(stream); err != nil {
		return in, obj, fmt.Errorf("inspect: %w", err)
	}
	sp := manifest.StreamPrefix(keyPrefix, stream)
	top, dirs, err := store.ListDir(ctx, sp)
	in.Requests++
	if err != nil {
		return in, obj, fmt.Errorf("inspect %s: %w", stream, err)
	}
	var p resolve.Prefix
	for _, o := range top {
		if o.Key == manifest.MarkerKey(keyPrefix, stream) {
			p.Marker = true
		}
	}
	if p.Marker {
		in.Choice = resolve.ChooseTop(p)
		return in, obj, nil
	}
	p.Objects = len(dirs) // data/ or meta/ hold something
	var roots []s3io.ObjectInfo
	err = store.List(ctx, manifest.RootsPrefix(keyPrefix, stream), func(o s3io.ObjectInfo) error {
		roots = append(roots, o)
		return nil
	})
	in.Requests++
	if err != nil {
		return in, obj, fmt.Errorf("inspect %s: %w", stream, err)
	}
	objects := map[string]manifest.Root{}
	for _, o := range roots {
		k, err := manifest.ParseKey(keyPrefix, o.Key)
		if err != nil || k.Kind != manifest.ObjectRoot {
			continue // not a root key: not ours to judge here
		}
		r := resolve.FromKey(o.Key, k, o.LastModified)
		if o.LastModified.After(in.Newest) {
			in.Newest = o.LastModified
		}
		if r.Version >= 3 {
			obj, err := readRoot(ctx, store, o.Key)
			in.Requests++
			if err != nil {
				in.vanished = s3io.IsNotFound(err)
				// An unreadable root above the others may be the newest: never skip it.
				in.Choice = resolve.TopChoice{Outcome: resolve.TopUndecided, Reason: err.Error(), Candidates: []resolve.Root{r}}
				return in, obj, nil
			}
			if err := resolve.CheckRootObject(r, obj); err != nil {
				in.Choice = resolve.TopChoice{Outcome: resolve.TopUndecided, Reason: err.Error(), Candidates: []resolve.Root{r}}
				return in, obj, nil
			}
			r = r.WithLineage(obj.Lineage)
			objects[o.Key] = obj
		}
		p.Roots = append(p.Roots, r)
	}
	in.Choice = resolve.ChooseTop(p)
	if in.Choice.Outcome != resolve.TopV3 && in.Choice.Outcome != resolve.TopSingleV2 {
		return in, obj, nil
	}
	key := in.Choice.Root.Key
	obj, ok := objects[key]
	if !ok {
		var err error
		obj, err = readRoot(ctx, store, key)
		in.Requests++
		if err != nil {
			in.vanished = s3io.IsNotFound(err)
			in.Check = err
			return in, obj, nil
		}
	}
	in.Root = obj
	return in, obj, nil
}

func readRoot(ctx context.Context, store *s3io.Store, key string) (manifest.Root, error) {
	b, err := store.GetObject(ctx, key)
	if err != nil {
		return manifest.Root{}, fmt.Errorf("root %s: %w", key, err)
	}
	r, err := manifest.DecodeRootObject(b)
	if err != nil {
		return manifest.Root{}, fmt.Errorf("root %s: %w", key, err)
	}
	return r, nil
}

// checkTree reads every group below m (and, with verify, HEADs every live fragment) and
// checks the tree; it returns the requests it made.
func checkTree(ctx context.Context, store *s3io.Store, keyPrefix, stream string, m manifest.Manifest, verify bool) (int, error) {
	n := 0
	var fragments []manifest.Entry
	fetch := func(e manifest.Entry) ([]manifest.Entry, error) {
		key, err := store.LocateEntry(ctx, keyPrefix, stream, e)
		n++
		if err != nil {
			return nil, err
		}
		b, err := store.GetObject(ctx, key)
		n++
		if err != nil {
			return nil, err
		}
		_, children, err := manifest.DecodeGroup(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		for _, c := range children {
			if c.Kind == manifest.KindFragment {
				fragments = append(fragments, c)
			}
		}
		return children, nil
	}
	if err := manifest.CheckTree(m, fetch); err != nil {
		return n, fmt.Errorf("the root's tree: %w", err)
	}
	if !verify {
		return n, nil
	}
	for _, e := range m.Entries {
		if e.Kind == manifest.KindFragment {
			fragments = append(fragments, e)
		}
	}
	// Fragments starting at or above the first offset (the one straddling it is read by
	// `node verify`, which knows its end).
	live := fragments[:0]
	for _, e := range fragments {
		if e.FirstOffset >= m.FirstOffset {
			live = append(live, e)
		}
	}
	keys, err := store.LocateEntries(ctx, keyPrefix, stream, live)
	n++
	if err != nil {
		return n, fmt.Errorf("the root's fragments: %w", err)
	}
	for _, e := range live {
		if _, ok := keys[e]; !ok {
			return n, fmt.Errorf("fragment at %d uid %016x: %w", e.FirstOffset, e.UID, s3io.ErrNotFound)
		}
	}
	return n, nil
}
