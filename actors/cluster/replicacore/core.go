// Package replicacore is the pure logic of a replica's manifest cache: which writer
// broadcasts and syncs it accepts, when it asks the writer for a sync, and what it publishes.
// It follows the spec's "Replicas" rules, with a persisted manifest named by its root's
// (seq, uid) as format version 3 names it (never by the etcd Version of the manifest record,
// which means nothing outside one etcd history): a broadcast applies only at the recorded
// epoch and on top of exactly the manifest it was built on (its parent's seq and uid are the
// held root's); a broadcast built on another manifest (a lost broadcast, another root at the
// held seq), an epoch change or an edit that does not apply keeps the last good manifest and
// asks for a sync; a sync older than what is held (epoch first, then seq) is ignored. Like
// readercore it is a state machine: events in, effects out, no I/O, no clock.
package replicacore

import (
	"errors"
	"fmt"
	"time"

	"github.com/streamtier/streamtier/manifest"
)

// DefaultResyncRetry is how long an unanswered registration or resync request waits before
// it is sent again.
const DefaultResyncRetry = time.Second

// Config is what a replica's core needs: the stream, this node's name and the retry delay.
type Config struct {
	Stream string
	Node   string
	// ResyncRetry is how long a request for a sync stays unanswered before Tick repeats it;
	// within it, further gaps do not send another request (default DefaultResyncRetry).
	ResyncRetry time.Duration
}

// Core is one stream's replica manifest cache. It is not safe for concurrent use: one actor
// owns it.
type Core struct {
	cfg Config

	writer      string // who to ask for syncs: the placement's writer
	writerEpoch uint64 // the placement's epoch

	has      bool // a sync was accepted: manifest, root and epoch mean something
	manifest manifest.Manifest
	root     Root   // the root the manifest is persisted as
	epoch    uint64 // the epoch of the writer whose message set it

	pending       bool   // a registration or resync request is unanswered
	pendingTo     string // the node it went to
	pendingResync bool
	pendingAt     int64 // ms, when it was last sent

	stats Counters
	out   []Effect
}

// Counters are the core's monotonic counts, for status and metrics.
type Counters struct {
	Applied        uint64 // broadcasts applied
	Gaps           uint64 // broadcasts built on a root above the one held (broadcasts were lost)
	Forks          uint64 // broadcasts built on another root than the one held, at or below its seq
	EpochChanges   uint64 // broadcasts of a higher epoch than the one held
	StaleEpoch     uint64 // broadcasts of a lower epoch (a deposed writer), ignored
	Duplicates     uint64 // broadcasts of the held root or below its seq, ignored
	BadEdits       uint64 // broadcasts whose edits did not apply, or that name no child of their parent
	BeforeSync     uint64 // broadcasts before any sync was accepted
	SyncsApplied   uint64
	SyncsIgnored   uint64 // older than what is held
	BadSyncs       uint64 // manifests that fail their checks
	Registrations  uint64 // registrations sent (start, writer change, writer back)
	ResyncRequests uint64 // resync requests sent (gap, epoch change, bad edit)
	Retries        uint64 // unanswered requests sent again
	Suppressed     uint64 // requests not sent because one was already pending
}

// New returns a core holding nothing; feed it WriterChanged to register.
func New(cfg Config) (*Core, error) {
	if err := manifest.ValidateStreamID(cfg.Stream); err != nil {
		return nil, fmt.Errorf("replica config: %w", err)
	}
	if cfg.Node == "" {
		return nil, fmt.Errorf("replica config for %s: node name is empty", cfg.Stream)
	}
	if cfg.ResyncRetry < 0 {
		return nil, fmt.Errorf("replica config for %s: resync_retry = %s: negative", cfg.Stream, cfg.ResyncRetry)
	}
	if cfg.ResyncRetry == 0 {
		cfg.ResyncRetry = DefaultResyncRetry
	}
	return &Core{cfg: cfg, manifest: manifest.Empty()}, nil
}

// Event is one input to the core.
type Event interface{ isEvent() }

// WriterChanged says which node writes the stream and at which epoch (from the placement):
// at start, and whenever the placement names another writer or epoch. The replica
// registers with that writer.
type WriterChanged struct {
	Writer string
	Epoch  uint64
	Now    int64 // ms
}

// WriterRejoined says a node (re)joined the cluster; if it is the writer the replica
// registers again (the writer restarted, or came back from a partition).
type WriterRejoined struct {
	Node string
	Now  int64
}

// Root names a persisted manifest as replica messages do: its root object's seq and uid.
// Seq 0 is a manifest without a version 3 root: uid 0 the stream that never persisted (the
// empty manifest), another uid a version 1 or 2 root (the record's uid), which the writer's
// resolution replaces by a version 3 root at once. A replica sees seq 0 only briefly, and
// the first version 3 root names it as its parent like any other.
type Root struct {
	Seq uint64
	UID uint64
}

// String prints seq/uid (decimal; scenarios print it).
func (r Root) String() string { return fmt.Sprintf("%d/%d", r.Seq, r.UID) }

// Edits is a writer's broadcast: the edits of the persist that created the root Root on top
// of the root Parent (the manifest the writer last persisted or resolved).
type Edits struct {
	From   string
	Root   Root
	Parent Root
	Epoch  uint64
	Edits  []manifest.Edit
	Now    int64
}

// Sync is a writer's persisted manifest, the root Root, under the writer's Epoch.
type Sync struct {
	From     string
	Root     Root
	Epoch    uint64
	Manifest manifest.Manifest
	Now      int64
}

// Tick lets the core repeat a request that went unanswered for ResyncRetry.
type Tick struct{ Now int64 }

func (WriterChanged) isEvent()  {}
func (WriterRejoined) isEvent() {}
func (Edits) isEvent()          {}
func (Sync) isEvent()           {}
func (Tick) isEvent()           {}

// Effect is one thing the shell must do. String is stable: scenario files print it.
type Effect interface {
	fmt.Stringer
	isEffect()
}

// Register asks the shell to send To a registration (Resync false) or a resync request
// (Resync true) for the stream; the writer answers with a sync of its persisted manifest.
type Register struct {
	To     string
	Resync bool
	Reason string
}

// Publish says the cache now holds Manifest, the writer's persisted manifest of root Root
// (epoch Epoch): status and remote reads use it from now on.
type Publish struct {
	Manifest manifest.Manifest
	Root     Root
	Epoch    uint64
}

// EvaluateLocalRetention lets the replica's local retention delete segments wholly below
// PersistedNext, the next offset of the persisted manifest it now holds.
type EvaluateLocalRetention struct{ PersistedNext uint64 }

// Refused reports a message the core could not use (for the log); its counters say which.
type Refused struct {
	What string
	Err  error
}

func (Register) isEffect()               {}
func (Publish) isEffect()                {}
func (EvaluateLocalRetention) isEffect() {}
func (Refused) isEffect()                {}

func (e Register) String() string {
	kind := "register"
	if e.Resync {
		kind = "resync"
	}
	return fmt.Sprintf("%s to=%s reason=%q", kind, e.To, e.Reason)
}

func (e Publish) String() string {
	return fmt.Sprintf("publish root=%s epoch=%d %s", e.Root, e.Epoch, FormatManifest(e.Manifest))
}

func (e EvaluateLocalRetention) String() string {
	return fmt.Sprintf("local-retention persisted-next=%d", e.PersistedNext)
}

func (e Refused) String() string { return fmt.Sprintf("refused %s: %v", e.What, e.Err) }

// ErrBadEvent marks an event that breaks the shell's contract (an empty node name); the
// core refuses it and changes nothing.
var ErrBadEvent = errors.New("bad replica event")

// Step applies one event and returns the effects to execute, in order. The slice is reused
// by the next Step; the effects themselves may be kept.
func (c *Core) Step(ev Event) ([]Effect, error) {
	clear(c.out)
	c.out = c.out[:0]
	switch e := ev.(type) {
	case WriterChanged:
		if e.Writer == "" {
			return nil, fmt.Errorf("%w: stream %s: placement names no writer", ErrBadEvent, c.cfg.Stream)
		}
		if e.Epoch < c.writerEpoch {
			return c.out, nil // placements never go back; a late event changes nothing
		}
		if e.Writer == c.writer && e.Epoch == c.writerEpoch {
			return c.out, nil
		}
		reason := "start"
		if c.writer != "" {
			reason = fmt.Sprintf("writer changed from %s at epoch %d", c.writer, c.writerEpoch)
		}
		c.writer, c.writerEpoch = e.Writer, e.Epoch
		c.request(e.Writer, false, reason, e.Now, true)
	case WriterRejoined:
		if e.Node == "" {
			return nil, fmt.Errorf("%w: stream %s: rejoined node has no name", ErrBadEvent, c.cfg.Stream)
		}
		if e.Node == c.writer {
			c.request(c.writer, false, "writer rejoined", e.Now, true)
		}
	case Edits:
		if e.From == "" {
			return nil, fmt.Errorf("%w: stream %s: broadcast from no node", ErrBadEvent, c.cfg.Stream)
		}
		c.onEdits(e)
	case Sync:
		if e.From == "" {
			return nil, fmt.Errorf("%w: stream %s: sync from no node", ErrBadEvent, c.cfg.Stream)
		}
		c.onSync(e)
	case Tick:
		c.onTick(e.Now)
	default:
		return nil, fmt.Errorf("%w: stream %s: unknown event %T", ErrBadEvent, c.cfg.Stream, ev)
	}
	return c.out, nil
}

func (c *Core) emit(e Effect) { c.out = append(c.out, e) }

// request sends a registration or resync request to to, unless one to the same node is
// still within its retry delay (force sends anyway: the writer changed or came back).
func (c *Core) request(to string, resync bool, reason string, now int64, force bool) {
	if !force && c.pending && c.pendingTo == to && now-c.pendingAt < c.cfg.ResyncRetry.Milliseconds() {
		c.stats.Suppressed++
		return
	}
	c.pending, c.pendingTo, c.pendingResync, c.pendingAt = true, to, resync, now
	if resync {
		c.stats.ResyncRequests++
	} else {
		c.stats.Registrations++
	}
	c.emit(Register{To: to, Resync: resync, Reason: reason})
}

// target is who to ask for a sync after a broadcast from from at epoch: the placement's
// writer, unless the broadcast comes from a newer writer than the placement we know.
func (c *Core) target(from string, epoch uint64) string {
	if c.writer == "" || epoch > c.writerEpoch {
		return from
	}
	return c.writer
}

func (c *Core) onEdits(e Edits) {
	to := c.target(e.From, e.Epoch)
	what := func() string {
		return fmt.Sprintf("broadcast root=%s parent=%s epoch=%d from %s", e.Root, e.Parent, e.Epoch, e.From)
	}
	switch {
	case e.Root.Seq == 0 || e.Root.Seq <= e.Parent.Seq || e.Root.UID == 0:
		// A persist makes a version 3 root, above its parent: this message names none (a
		// writer's bug, or a sender of an older message format, whose fields read as zero).
		c.stats.BadEdits++
		c.emit(Refused{What: what(), Err: fmt.Errorf("root %s is not a version 3 root above its parent %s", e.Root, e.Parent)})
		c.request(to, true, fmt.Sprintf("broadcast of root %s names no child of %s", e.Root, e.Parent), e.Now, false)
	case !c.has:
		c.stats.BeforeSync++
		c.request(to, true, "broadcast before any sync", e.Now, false)
	case e.Epoch < c.epoch:
		c.stats.StaleEpoch++
	case e.Epoch > c.epoch:
		c.stats.EpochChanges++
		c.request(to, true, fmt.Sprintf("epoch changed from %d to %d", c.epoch, e.Epoch), e.Now, false)
	case e.Parent == c.root:
		m, err := c.manifest.ApplyAll(e.Edits)
		if err != nil {
			c.stats.BadEdits++
			c.emit(Refused{What: what(), Err: err})
			c.request(to, true, fmt.Sprintf("root %s does not apply", e.Root), e.Now, false)
			return
		}
		c.stats.Applied++
		c.pending = false // the writer knows this replica and it is in step
		c.accept(m, e.Root, e.Epoch)
	case e.Root == c.root || e.Root.Seq < c.root.Seq:
		c.stats.Duplicates++ // held already, or older than held (reordered): a sync would be older too
	case e.Parent.Seq > c.root.Seq:
		c.stats.Gaps++
		c.request(to, true, fmt.Sprintf("gap: hold root %s, got %s built on %s", c.root, e.Root, e.Parent), e.Now, false)
	default:
		// Built on another root than the one held, at or below its seq: another root at the
		// held seq (a history this replica followed was rolled back), or a parent older than
		// the held root. Only a sync tells which manifest the writer persisted.
		c.stats.Forks++
		c.request(to, true, fmt.Sprintf("fork: hold root %s, got %s built on %s", c.root, e.Root, e.Parent), e.Now, false)
	}
}

func (c *Core) onSync(e Sync) {
	what := func() string { return fmt.Sprintf("sync root=%s epoch=%d from %s", e.Root, e.Epoch, e.From) }
	if c.has && (e.Epoch < c.epoch || e.Epoch == c.epoch && e.Root.Seq < c.root.Seq) {
		c.stats.SyncsIgnored++
		return
	}
	var err error
	switch {
	case e.Root.Seq == 0 && e.Root.UID == 0 && !e.Manifest.NeverUploaded():
		err = fmt.Errorf("root 0/0 (never persisted) with a non-empty manifest %s", FormatManifest(e.Manifest))
	case e.Root.Seq > 0 && e.Root.UID == 0:
		err = fmt.Errorf("root %s: a version 3 root has a uid", e.Root)
	default:
		err = e.Manifest.Check()
	}
	if err != nil {
		c.stats.BadSyncs++
		c.emit(Refused{What: what(), Err: err})
		return // the pending request is repeated by Tick
	}
	c.stats.SyncsApplied++
	c.pending = false
	c.accept(e.Manifest, e.Root, e.Epoch)
}

func (c *Core) accept(m manifest.Manifest, root Root, epoch uint64) {
	c.has, c.manifest, c.root, c.epoch = true, m, root, epoch
	c.emit(Publish{Manifest: m, Root: root, Epoch: epoch})
	if root != (Root{}) {
		c.emit(EvaluateLocalRetention{PersistedNext: m.NextOffset})
	}
}

func (c *Core) onTick(now int64) {
	switch {
	case c.pending && now-c.pendingAt >= c.cfg.ResyncRetry.Milliseconds():
		to := c.pendingTo
		if c.writer != "" {
			to = c.writer
		}
		c.stats.Retries++
		c.request(to, c.pendingResync, "no sync yet: asking again", now, true)
	case !c.pending && !c.has && c.writer != "":
		c.request(c.writer, false, "no sync yet", now, true)
	}
}

// Status is what an operator sees of a replica cache.
type Status struct {
	Stream      string
	Writer      string // the placement's writer
	WriterEpoch uint64
	Synced      bool   // a sync was accepted
	Seq         uint64 // the held manifest's root: seq
	UID         uint64 // and uid
	Epoch       uint64 // epoch of the writer whose message set it
	FirstOffset uint64
	NextOffset  uint64
	TotalSize   uint64
	Entries     int
	Pending     bool // a registration or resync request is unanswered
	Counters    Counters
}

// Status reports the core's state.
func (c *Core) Status() Status {
	return Status{
		Stream: c.cfg.Stream, Writer: c.writer, WriterEpoch: c.writerEpoch, Synced: c.has,
		Seq: c.root.Seq, UID: c.root.UID, Epoch: c.epoch, FirstOffset: c.manifest.FirstOffset, NextOffset: c.manifest.NextOffset,
		TotalSize: c.manifest.TotalSize, Entries: len(c.manifest.Entries), Pending: c.pending, Counters: c.stats,
	}
}

// Manifest returns the manifest held, its root and epoch; ok is false before any sync.
func (c *Core) Manifest() (m manifest.Manifest, root Root, epoch uint64, ok bool) {
	return c.manifest, c.root, c.epoch, c.has
}

// FormatManifest prints a manifest's header and entries (fragment first offsets) on one line.
func FormatManifest(m manifest.Manifest) string {
	s := fmt.Sprintf("[%d,%d) size=%d entries=%d", m.FirstOffset, m.NextOffset, m.TotalSize, len(m.Entries))
	if len(m.Entries) > 0 && len(m.Entries) <= 8 {
		s += " {"
		for i, e := range m.Entries {
			if i > 0 {
				s += " "
			}
			s += fmt.Sprintf("%c%d", "fgkm?"[min(int(e.Kind), 4)], e.FirstOffset)
		}
		s += "}"
	}
	return s
}
