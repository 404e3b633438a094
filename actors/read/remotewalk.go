package read

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/streamtier/streamtier/actors/read/fetchcore"
	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/s3io"
)

// walkBatch is how many leaves one walk returns at most.
const walkBatch = 16

// groupCacheSize bounds the group objects a walker keeps decoded (a mega-group's path
// plus its neighbours; a walk reads each group once in order).
const groupCacheSize = 64

// leafWalker walks a stream's manifest lazily for one remote reader: the freshest manifest
// when asked (a fresh walk), then leaf by leaf through manifest.Iterate, fetching group
// objects only when the walk reaches them (with a small cache) and locating the keys of the
// fragments it returns in batches (LocateEntries), through the keys the node knows
// (Env.Keys, or the walker's own when it has none). Walks run one at a time in task actors;
// the mutex keeps an abandoned walk (the core moved on) off the next one's state.
type leafWalker struct {
	env Env

	mu     sync.Mutex
	ctx    context.Context // the running walk's, for the iterator's group fetches
	m      manifest.Manifest
	have   bool
	it     *manifest.Iterator
	itNext uint64 // where the iterator's next leaf starts
	peek   *manifest.FragmentRef
	groups map[manifest.Entry][]manifest.Entry
}

func newLeafWalker(env Env) *leafWalker {
	if env.Keys == nil { // an offline read: the walks of this reader share their own keys
		env.Keys = NewKeys(4 * walkBatch)
	}
	return &leafWalker{env: env, groups: map[manifest.Entry][]manifest.Entry{}}
}

// outcomeOf classifies an error for the core: 404s, what retrying cannot fix (corrupt
// objects or manifests, 403s and other non-transient S3 answers), and everything else
// (5xx, throttling, resets, timeouts, etcd unavailable) as retriable.
func outcomeOf(err error) fetchcore.Outcome {
	switch {
	case err == nil:
		return fetchcore.OK
	case s3io.IsNotFound(err):
		return fetchcore.NotFound
	case errors.Is(err, fragment.ErrCorrupt), errors.Is(err, manifest.ErrCorrupt):
		return fetchcore.Fatal
	case s3io.Classify(err) == s3io.ClassNonTransient:
		return fetchcore.Fatal
	}
	return fetchcore.Retriable
}

func (w *leafWalker) fetchGroup(e manifest.Entry) ([]manifest.Entry, error) {
	if es, ok := w.groups[e]; ok {
		return es, nil
	}
	es, err := w.env.children(w.ctx, e)
	if err != nil {
		return nil, err
	}
	if len(w.groups) >= groupCacheSize {
		clear(w.groups)
	}
	w.groups[e] = es
	return es, nil
}

// walk returns the leaves from the one holding from (fresh: of the freshest manifest).
func (w *leafWalker) walk(ctx context.Context, id, from uint64, fresh bool) fetchcore.LeavesFetched {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ctx = ctx
	fail := func(err error) fetchcore.LeavesFetched {
		w.it, w.peek = nil, nil
		return fetchcore.LeavesFetched{ID: id, Outcome: outcomeOf(err), Err: err}
	}
	if fresh || !w.have {
		m, _, err := w.env.Latest(ctx)
		if err != nil {
			w.have = false
			return fail(fmt.Errorf("read the manifest of %s: %w", w.env.Stream, err))
		}
		w.m, w.have, w.it = m, true, nil
	}
	if w.it == nil || w.itNext != from {
		w.it, w.peek = manifest.Iterate(w.m, from, w.fetchGroup), nil
	}
	var refs []manifest.FragmentRef
	done := false
	for len(refs) < walkBatch {
		var ref manifest.FragmentRef
		if w.peek != nil {
			ref, w.peek = *w.peek, nil
		} else {
			r, ok, err := w.it.Next()
			if err != nil {
				if len(refs) > 0 {
					w.it = nil // the next walk starts again at the leaf that failed
					break
				}
				return fail(err)
			}
			if !ok {
				done = true
				break
			}
			ref = r
		}
		refs = append(refs, ref)
		w.itNext = ref.End
	}
	if !done && w.it != nil && len(refs) == walkBatch { // is there more?
		r, ok, err := w.it.Next()
		switch {
		case err != nil:
			w.it = nil
		case ok:
			w.peek = &r
		default:
			done = true
		}
	}
	// This walk's keys, held here: the shared cache may drop one before the answer is built.
	keys := make(map[manifest.Entry]string, len(refs))
	var missing []manifest.Entry
	for _, r := range refs {
		if r.Gap {
			continue
		}
		if k, ok := w.env.Keys.Get(w.env.Stream, r.Entry); ok {
			keys[r.Entry] = k // uploaded or located by this node before: no LIST
		} else {
			missing = append(missing, r.Entry)
		}
	}
	if len(missing) > 0 {
		found, err := w.env.Store.LocateEntries(ctx, w.env.KeyPrefix, w.env.Stream, missing)
		if err != nil {
			return fail(fmt.Errorf("locate the fragments of %s: %w", w.env.Stream, err))
		}
		for e, k := range found {
			keys[e] = k
			w.env.Keys.Put(w.env.Stream, e, k)
		}
	}
	out := fetchcore.LeavesFetched{ID: id, Done: done, First: w.m.FirstOffset, Next: w.m.NextOffset}
	for _, r := range refs {
		l := fetchcore.Leaf{First: r.Entry.FirstOffset, End: r.End, Gap: r.Gap}
		if !r.Gap {
			l.Key, l.Size = keys[r.Entry], r.Entry.Size // "" when no key names it: a 404
		}
		out.Leaves = append(out.Leaves, l)
	}
	return out
}
