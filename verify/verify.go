// Package verify checks one stream's remote tier end to end: the etcd record against the
// root object, the whole manifest tree (group objects, their CRCs, coverage of [first,
// next) without holes or overlaps, sizes), every live fragment object (layout, index,
// chunk CRCs) against its manifest entry, and the fragment bytes against the local log
// wherever it still holds the chunks. Every problem is a Finding; an error means the check
// could not run (etcd or S3 unreachable, unknown stream).
package verify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/streamtier/streamtier/chunk"
	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/manifest/resolve"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/recovery"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/segments"
)

// Options say which stream to verify and where its data is.
type Options struct {
	Store     *s3io.Store
	Meta      *metadata.Store
	KeyPrefix string // default manifest.DefaultKeyPrefix
	Stream    string
	// LogDir is the stream's local log directory to compare with; empty skips the
	// comparison (noted in the report).
	LogDir string
	// FromBucket verifies the newest persisted manifest the bucket alone names (the root
	// choice of `node recover`, recovery.Latest) and never asks etcd: Meta may be nil.
	// Revision is then the root's seq.
	FromBucket bool
}

// Finding is one problem: the object (or etcd key) it is in, the offset where it applies
// when there is one, and what is wrong.
type Finding struct {
	Key     string `json:"key,omitempty"`
	Offset  uint64 `json:"offset"`
	Problem string `json:"problem"`
}

// Report is the outcome of a verification.
type Report struct {
	Stream      string `json:"stream"`
	Epoch       uint64 `json:"epoch"`
	Revision    int64  `json:"revision"`
	RootKey     string `json:"root_key,omitempty"`
	FirstOffset uint64 `json:"first_offset"`
	NextOffset  uint64 `json:"next_offset"`
	TotalSize   uint64 `json:"total_size"`

	Fragments     int    `json:"fragments"`      // fragment objects read and checked
	Groups        int    `json:"groups"`         // group objects read and checked
	Chunks        int    `json:"chunks"`         // chunks in the fragments checked
	FragmentBytes uint64 `json:"fragment_bytes"` // chunk-region bytes checked
	Gaps          int    `json:"gaps"`           // declared gaps: ranges the local log lost before upload
	GapOffsets    uint64 `json:"gap_offsets"`    // offsets those gaps cover

	LocalDir      string `json:"local_dir,omitempty"`
	LocalCompared int    `json:"local_compared"` // chunks compared byte for byte with the local log
	LocalAbsent   int    `json:"local_absent"`   // chunks the local log no longer holds

	Findings []Finding `json:"findings"`
	Notes    []string  `json:"notes,omitempty"`

	keyPrefix string
}

// OK reports a verification without findings.
func (r Report) OK() bool { return len(r.Findings) == 0 }

// ErrUnknownStream is returned for a stream with neither an anchor nor a manifest record.
var ErrUnknownStream = errors.New("unknown stream")

func (r *Report) find(key string, offset uint64, format string, args ...any) {
	r.Findings = append(r.Findings, Finding{Key: key, Offset: offset, Problem: fmt.Sprintf(format, args...)})
}

// Stream verifies one stream. Problems in the data are findings in the report; the error
// is for what stops the check (etcd or S3 failing, an unknown stream).
func Stream(ctx context.Context, o Options) (Report, error) {
	if o.Store == nil || o.Meta == nil && !o.FromBucket {
		return Report{}, errors.New("verify: an object store and a metadata store (or FromBucket) are required")
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = manifest.DefaultKeyPrefix
	}
	if err := manifest.ValidateStreamID(o.Stream); err != nil {
		return Report{}, fmt.Errorf("verify: %w", err)
	}
	r := Report{Stream: o.Stream, Findings: []Finding{}, LocalDir: o.LogDir, keyPrefix: o.KeyPrefix}
	var root manifest.Root
	if o.FromBucket {
		in, err := recovery.Choose(ctx, o.Store, o.KeyPrefix, o.Stream)
		if err != nil {
			return r, fmt.Errorf("verify: %w", err)
		}
		if in.Choice.Outcome == resolve.TopEmpty {
			return r, fmt.Errorf("verify: stream %q: %w (nothing under %s in the bucket)", o.Stream, ErrUnknownStream, manifest.StreamPrefix(o.KeyPrefix, o.Stream))
		}
		r.RootKey = in.Choice.Root.Key
		if in.Check != nil || !in.Chosen() {
			why := in.Choice.Reason
			if in.Check != nil {
				why = in.Check.Error()
			}
			r.find(r.RootKey, 0, "the bucket names no root to verify (%s): %s", in.Choice.Outcome, why)
			return r, nil
		}
		root = in.Root
		r.Epoch, r.Revision = root.Lineage.Epoch, int64(root.Lineage.Seq)
		if root.Version < 3 {
			r.Epoch = in.Choice.Root.Epoch
		}
		m := root.Manifest
		r.FirstOffset, r.NextOffset, r.TotalSize = m.FirstOffset, m.NextOffset, m.TotalSize
		r.Notes = append(r.Notes, "from the bucket alone: the root recover would choose, etcd not read")
	} else {
		var done bool
		var err error
		if root, done, err = fromRecord(ctx, o, &r); err != nil || done {
			return r, err
		}
	}
	m := root.Manifest

	// Entries do not carry the uploader's epoch: one listing of the stream's prefix finds
	// the key (of either layout) of every object the manifest names.
	index := manifest.NewKeyIndex(o.KeyPrefix)
	if err := o.Store.List(ctx, manifest.StreamPrefix(o.KeyPrefix, o.Stream), func(oi s3io.ObjectInfo) error {
		index.Add(oi.Key) // keys that are not streamtier's are not indexed
		return nil
	}); err != nil {
		return r, fmt.Errorf("verify: %w", err)
	}
	var s3err error // an S3 failure that is not about the data: stops the check
	tier := o.Store.Tier(o.KeyPrefix, o.Stream)
	locate := func(e manifest.Entry) (string, error) {
		if key, ok := index.Lookup(o.Stream, e); ok {
			return key, nil
		}
		// Not listed: written after the listing (a persist meanwhile), or missing.
		key, err := tier.Locate(ctx, e)
		if err != nil && !s3io.IsNotFound(err) && s3err == nil {
			s3err = err
		}
		return key, err
	}
	groups := map[manifest.Entry][]manifest.Entry{}
	fetch := func(e manifest.Entry) ([]manifest.Entry, error) {
		if c, ok := groups[e]; ok {
			return c, nil
		}
		key, err := locate(e)
		if err != nil {
			return nil, err
		}
		r.checkKeyEpoch(key, e.FirstOffset)
		children, err := tier.ChildrenAt(ctx, key, e)
		if err != nil {
			if !errors.Is(err, manifest.ErrCorrupt) && !s3io.IsNotFound(err) && s3err == nil {
				s3err = err
			}
			return nil, err
		}
		groups[e] = children
		return children, nil
	}
	if err := manifest.CheckTree(m, fetch); err != nil {
		if s3err != nil {
			return r, fmt.Errorf("verify: %w", s3err)
		}
		r.find(r.RootKey, 0, "manifest tree: %v", err)
	}
	r.Groups = len(groups)

	local, err := scanLocal(o.LogDir, m.FirstOffset, m.NextOffset, &r)
	if err != nil {
		return r, err
	}
	defer local.close()

	it := manifest.Iterate(m, m.FirstOffset, fetch)
	for {
		fr, ok, err := it.Next()
		if err != nil {
			if s3err != nil {
				return r, fmt.Errorf("verify: %w", s3err)
			}
			r.find("", 0, "walking the manifest: %v", err)
			break
		}
		if !ok {
			break
		}
		if fr.Gap { // a declared hole: no object to check, only counted
			r.Gaps++
			r.GapOffsets += fr.End - fr.Entry.FirstOffset
			continue
		}
		key, err := locate(fr.Entry)
		if err != nil {
			if s3err != nil {
				return r, fmt.Errorf("verify: %w", s3err)
			}
			r.find(manifest.EntryListPrefix(o.KeyPrefix, o.Stream, fr.Entry), fr.Entry.FirstOffset, "fragment object is missing: %v", err)
			continue
		}
		r.checkKeyEpoch(key, fr.Entry.FirstOffset)
		obj, err := o.Store.ReadFragment(ctx, key)
		switch {
		case err == nil:
		case s3io.IsNotFound(err):
			r.find(key, fr.Entry.FirstOffset, "fragment object is missing")
			continue
		case errors.Is(err, fragment.ErrCorrupt):
			r.find(key, fr.Entry.FirstOffset, "%v", err)
			continue
		default:
			return r, fmt.Errorf("verify: %w", err)
		}
		r.Fragments++
		r.Chunks += len(obj.Layout.Chunks)
		r.FragmentBytes += obj.Layout.Size
		for _, p := range CheckFragment(fr.Entry, fr.End, obj.Layout) {
			r.find(key, fr.Entry.FirstOffset, "%s", p)
		}
		local.compare(key, obj, &r)
	}
	if r.Groups < len(groups) {
		r.Groups = len(groups)
	}
	return r, nil
}

// checkKeyEpoch finds a referenced object whose key carries an epoch above the epoch of the
// root naming it: no writer can persist an object of a later epoch than its own.
func (r *Report) checkKeyEpoch(key string, offset uint64) {
	if k, err := manifest.ParseKey(r.keyPrefix, key); err == nil && k.KeyVersion >= 2 && k.Epoch > r.Epoch {
		r.find(key, offset, "object of epoch %d referenced by a root of epoch %d", k.Epoch, r.Epoch)
	}
}

// fromRecord reads etcd's manifest record and the root it names into r; done is true when
// the report is complete (a finding, or nothing to verify) or err is set.
func fromRecord(ctx context.Context, o Options, r *Report) (root manifest.Root, done bool, err error) {
	recKey := metadata.ManifestKey(o.Meta.Prefix(), o.Stream)
	rec, rev, found, err := o.Meta.ReadManifest(ctx, o.Stream)
	switch {
	case errors.Is(err, metadata.ErrCorruptRecord):
		r.find(recKey, 0, "%v", err)
		return root, true, nil
	case err != nil:
		return root, true, fmt.Errorf("verify: %w", err)
	case !found:
		anchored, err := o.Meta.HasAnchor(ctx, o.Stream, true)
		if err != nil {
			return root, true, fmt.Errorf("verify: %w", err)
		}
		if !anchored {
			return root, true, fmt.Errorf("verify: stream %q: %w (no anchor and no manifest record under %s)", o.Stream, ErrUnknownStream, o.Meta.Prefix())
		}
		r.Notes = append(r.Notes, "the stream is anchored but never persisted a manifest: nothing remote to verify")
		return root, true, nil
	}
	r.Epoch, r.Revision = rec.Epoch, rev
	r.RootKey = rec.RootKey(o.KeyPrefix, o.Stream)
	r.FirstOffset, r.NextOffset, r.TotalSize = rec.FirstOffset, rec.NextOffset, rec.TotalSize

	body, err := o.Store.GetObject(ctx, r.RootKey)
	if err != nil {
		if s3io.IsNotFound(err) {
			r.find(r.RootKey, 0, "root object named by the manifest record (%s) is missing", recKey)
			return root, true, nil
		}
		return root, true, fmt.Errorf("verify: get root: %w", err)
	}
	root, err = manifest.DecodeRootObject(body)
	if err != nil {
		r.find(r.RootKey, 0, "root object: %v", err)
		return root, true, nil
	}
	if rec.Seq > 0 && (root.Version < 3 || root.Lineage.Seq != rec.Seq || root.Lineage.UID != rec.RootUID) {
		r.find(r.RootKey, 0, "root object is %v (version %d), the manifest record names seq %d uid %016x", root.Lineage, root.Version, rec.Seq, rec.RootUID)
		return root, true, nil
	}
	m := root.Manifest
	if m.FirstOffset != rec.FirstOffset || m.NextOffset != rec.NextOffset || m.TotalSize != rec.TotalSize || m.FirstTimestamp != rec.FirstTimestamp {
		r.find(r.RootKey, 0, "root [%d,%d) size %d first ts %d disagrees with its etcd record [%d,%d) size %d first ts %d",
			m.FirstOffset, m.NextOffset, m.TotalSize, m.FirstTimestamp, rec.FirstOffset, rec.NextOffset, rec.TotalSize, rec.FirstTimestamp)
	}
	return root, false, nil
}

// CheckFragment compares a fragment object's layout with the manifest entry that names it
// (ending at end): chunk-region size, first and last chunk ids and timestamps. It returns
// one line per mismatch.
func CheckFragment(e manifest.Entry, end uint64, l fragment.Layout) []string {
	var out []string
	if len(l.Chunks) == 0 {
		return []string{"object holds no chunk"}
	}
	first, last := l.Chunks[0].Header, l.Chunks[len(l.Chunks)-1].Header
	if l.Size != e.Size {
		out = append(out, fmt.Sprintf("chunk region holds %d bytes, the manifest entry says %d", l.Size, e.Size))
	}
	if first.ChunkID != e.FirstOffset {
		out = append(out, fmt.Sprintf("first chunk id %d, the entry starts at %d", first.ChunkID, e.FirstOffset))
	}
	if last.NextID() != end {
		out = append(out, fmt.Sprintf("chunks end at offset %d, the manifest has the fragment end at %d", last.NextID(), end))
	}
	if first.Timestamp != e.FirstTimestamp || last.Timestamp != e.LastTimestamp {
		out = append(out, fmt.Sprintf("chunk timestamps %d..%d, the entry says %d..%d", first.Timestamp, last.Timestamp, e.FirstTimestamp, e.LastTimestamp))
	}
	return out
}

// localLog is the part of the local log verify compares with: the chunks in [first, next)
// it still holds, by id.
type localLog struct {
	dir    string
	chunks []segments.ScannedChunk // sorted by chunk id
	files  map[string]*os.File
}

func scanLocal(dir string, first, next uint64, r *Report) (*localLog, error) {
	l := &localLog{dir: dir, files: map[string]*os.File{}}
	if dir == "" {
		r.Notes = append(r.Notes, "no local log directory given: fragments were not compared with local chunks")
		return l, nil
	}
	if _, err := os.Stat(dir); err != nil {
		r.Notes = append(r.Notes, fmt.Sprintf("local log %s: %v: fragments were not compared with local chunks", dir, err))
		return l, nil
	}
	_, err := segments.Scan(dir, func(c segments.ScannedChunk) error {
		if c.Header.NextID() > first && c.Header.ChunkID < next {
			l.chunks = append(l.chunks, c)
		}
		return nil
	})
	if err != nil {
		// A node appending meanwhile leaves a chunk half written at the tail; what was
		// read before it is still worth comparing.
		r.Notes = append(r.Notes, fmt.Sprintf("local log scan stopped early (%v); compared the %d chunks read before", err, len(l.chunks)))
	}
	return l, nil
}

func (l *localLog) close() {
	for _, f := range l.files {
		f.Close()
	}
}

// compare checks every chunk of obj the local log holds byte for byte.
func (l *localLog) compare(key string, obj s3io.FragmentObject, r *Report) {
	if l.dir == "" {
		return
	}
	for _, c := range obj.Layout.Chunks {
		id := c.Header.ChunkID
		i := sort.Search(len(l.chunks), func(i int) bool { return l.chunks[i].Header.ChunkID >= id })
		if i == len(l.chunks) || l.chunks[i].Header.ChunkID != id {
			r.LocalAbsent++
			continue
		}
		lc := l.chunks[i]
		remote := obj.Bytes[c.Position : c.Position+c.Header.Size()]
		local, err := l.read(lc.Location)
		if err != nil {
			r.Notes = append(r.Notes, fmt.Sprintf("local chunk %d: %v", id, err))
			r.LocalAbsent++
			continue
		}
		r.LocalCompared++
		if !bytes.Equal(local, remote) {
			r.find(key, id, "chunk %d differs from the local log's (%s at %d)", id, lc.Location.Segment, lc.Location.Position)
		}
	}
}

func (l *localLog) read(loc chunk.Location) ([]byte, error) {
	f, ok := l.files[loc.Segment]
	if !ok {
		var err error
		if f, err = os.Open(filepath.Join(l.dir, loc.Segment)); err != nil {
			return nil, err
		}
		l.files[loc.Segment] = f
	}
	b := make([]byte, loc.Size)
	if _, err := f.ReadAt(b, loc.Position); err != nil {
		return nil, fmt.Errorf("read %s at %d: %w", loc.Segment, loc.Position, err)
	}
	return b, nil
}
