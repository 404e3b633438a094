package readercore

import (
	"fmt"
	"strings"
	"time"

	"github.com/streamtier/streamtier/actors/divergence"
	"github.com/streamtier/streamtier/fragment"
	"github.com/streamtier/streamtier/manifest"
)

// Effect is one thing the shell must do, as a value. String is stable: scenario files print it.
// The slice Step returns is only valid until the next Step; effects themselves may be kept,
// and the data they point at (descriptions, manifests, edits) is never changed afterwards.
type Effect interface {
	fmt.Stringer
	isEffect()
}

// GapReason says why the core declared a gap: the local log lost a range before it was
// uploaded, found at resolution or mid-stream.
type GapReason uint8

// Gap reasons: the local log starts above the manifest's next offset at resolution, or a
// segment vanished under the drain or an upload (the stream's own retention outran it).
const (
	GapLocalAhead GapReason = iota + 1
	GapSegmentGone
)

// String names the reason as logs and scenarios print it.
func (r GapReason) String() string {
	switch r {
	case GapLocalAhead:
		return "local-ahead"
	case GapSegmentGone:
		return "segment-gone"
	}
	return "gap(?)"
}

// StartDrain tells the shell to (re)open the data reader at From and drain. Reason is empty
// at a start, a gap or a truncation (their own effects say why); otherwise the drain is
// repositioned because its position disagreed with the core's, or retried after such a
// stall, and Reason says so (for the shell's log).
type StartDrain struct {
	From   uint64
	Reason string
}

// DeclareGap tells the shell the core gave up [From, To), which the local log no longer
// holds, and declared it as a gap entry in the manifest: everything already remote stays.
// Work not yet uploaded in order (DroppedTransfers, DroppedChunks) was dropped, and draining
// restarts at To. For the shell's log and metrics.
type DeclareGap struct {
	Reason           GapReason
	From, To         uint64
	DroppedTransfers int
	DroppedChunks    int
}

// TruncateReason says why the remote tier is cut back.
type TruncateReason uint8

// Truncate reasons: the local log diverged from the remote tier (a lost unsynced tail, an
// unclean failover), or an operator chose to truncate a remote tier sharing no chunk.
const (
	TruncateDiverged TruncateReason = iota + 1
	TruncateOperator
)

// String names the reason as logs and scenarios print it.
func (r TruncateReason) String() string {
	switch r {
	case TruncateDiverged:
		return "diverged"
	case TruncateOperator:
		return "operator"
	}
	return "truncate(?)"
}

// TruncateRemote tells the shell the core cut the remote tier back from OldNext to At: the
// manifest now ends there (a straddling fragment's prefix below At is put back by the
// shell's prefix copy before the comparison answers, or by re-draining it from the local
// log) and draining restarts at DrainFrom. Dropped and Alone are deleted only after the
// truncation is persisted. For the shell's log and metrics.
type TruncateRemote struct {
	Reason    TruncateReason
	At        uint64
	OldNext   uint64
	DrainFrom uint64
	Dropped   []manifest.Entry
	Alone     []manifest.Entry
	Copy      bool // the straddling fragment's prefix is copied from its remote object
}

// StalledBehind reports that the local log is a prefix of the remote tier that simply
// ends (a lost unsynced tail not yet written over, a wiped log filling again, a replica
// catching up): nothing is deleted, drained or published; the shell compares again as the
// log grows, until it reaches the remote next offset (a match) or writes a chunk of its own
// where the remote tier holds another (a fork, truncated then).
type StalledBehind struct {
	RemoteFirst, RemoteNext uint64
	LocalFirst, LocalNext   uint64
}

// StalledDiverged reports that the local log and the remote tier share no chunk: nothing is
// deleted, nothing drained, until an operator truncates the remote tier (OperatorTruncate)
// or restores the local log from it.
type StalledDiverged struct {
	RemoteFirst, RemoteNext uint64
	LocalFirst, LocalNext   uint64
	// GapFork, when set, says the two do share a prefix but fork inside a declared gap
	// with durable data above it, which the cut at the fork would delete.
	GapFork *divergence.GapFork
	// EpochAhead, when set, says the local log starts above the remote next offset with a
	// chunk of a higher epoch than the remote tier's last: possibly another timeline.
	EpochAhead *divergence.EpochAhead
	// Rewritten, when set, says the local log starts above the remote next offset after its
	// follower saw it rewritten: the rewrite cannot be compared with the remote tier.
	Rewritten *divergence.Rewritten
}

// RegisterOffsetListener tells the shell to register the one-shot offset listener for
// Offset and then check once more for committed data (the commit may have raced).
type RegisterOffsetListener struct{ Offset uint64 }

// SubmitTransfer hands a cut fragment to the governor: Size bytes are charged, the task
// uploads Fragment under a fresh uid and reports TransferResult{Ref, Attempt}.
type SubmitTransfer struct {
	Ref      Ref
	Attempt  int
	Fragment *fragment.Description
	Size     int64 // the object's length: what the governor charges
}

// ResubmitTransfer submits the same fragment again, now, as a new attempt under the same ref.
type ResubmitTransfer struct {
	Ref      Ref
	Attempt  int
	Fragment *fragment.Description
	Size     int64
}

// ArmTransferDeadline asks for TransferDeadline{Ref, Attempt} after After.
type ArmTransferDeadline struct {
	Ref     Ref
	Attempt int
	After   time.Duration
}

// Stalled reports that the upload pipeline cannot advance past Offset: the fragment there
// failed non-transiently (or its local chunk is corrupt) and waits for a delayed retry.
type Stalled struct {
	Offset   uint64
	Ref      Ref
	Failures int
	Reason   string
}

// Unstalled reports that the fragment at Offset, which had stalled, is now durable.
type Unstalled struct {
	Offset uint64
	Ref    Ref
}

// StartPersist asks the shell to PUT Root as a new root object (fresh uid) and then write the
// etcd record conditionally on ExpectedRevision and Epoch; it answers PersistResult{Ref}.
// Edits are the edits captured since the last persist: folded over the last persisted
// manifest (or, for a truncation, over the truncated manifest) they give Root.
type StartPersist struct {
	Ref              Ref
	Root             manifest.Manifest
	ExpectedRevision int64
	Epoch            uint64
	Edits            []manifest.Edit
	Reset            bool // persists a truncation of the remote tier: replicas get a sync instead of the edits
	// Seq is the version 3 root's seq and Parent the root the record names now (the one
	// resolved or last persisted; zero for a stream that never persisted).
	Seq    uint64
	Parent RootRef
}

// ArmPersistTimer asks for PersistTimer{Ref} after After.
type ArmPersistTimer struct {
	Ref   Ref
	After time.Duration
}

// CancelPersistTimer says the timer Ref is no longer wanted (firing it anyway is harmless).
type CancelPersistTimer struct{ Ref Ref }

// UploadGroup asks for one group object of Kind holding Children to be written under a
// fresh uid, directly (not through the governor); the answer is GroupUploadResult. Epoch is
// the writer's, for the object's key.
type UploadGroup struct {
	Ref      Ref
	Attempt  int
	Kind     manifest.Kind
	Children []manifest.Entry
	Epoch    uint64
}

// RetryGroupUploadAfter schedules a group upload retry: after Delay the shell delivers
// RetryTimer{Ref, Attempt}.
type RetryGroupUploadAfter struct {
	Ref     Ref
	Attempt int
	Delay   time.Duration
}

// FetchGroupForRetention asks for the group object Group to be downloaded (bounded by
// Timeout) and its entries returned as RetentionGroupFetched, or RetentionGroupFailed /
// RetentionTimeout.
type FetchGroupForRetention struct {
	Ref     Ref
	Group   manifest.Entry
	Timeout time.Duration
}

// RemoteRetention reports that remote retention dropped a prefix (or moved the first offset
// inside the head group) of the in-memory manifest. Nothing is deleted yet: Deferred goes to
// the reaper after the persist that records Edit. For the shell's log and metrics.
type RemoteRetention struct {
	Edit     manifest.Edit
	Deferred []manifest.Entry
}

// UpdateRange publishes a persisted manifest to the manifest cache and the range table.
type UpdateRange struct {
	Manifest manifest.Manifest
	Revision int64
	Root     RootRef // the root object the record names (its seq and uid key the cache)
}

// Broadcast sends every replica in To the edits of one persist: they make the root Root of
// the root Parent (the one the record named before). Replicas sequence by the roots' seq and
// uid (never by the record's etcd Version, which another etcd history reuses): a replica
// applies the edits only on top of exactly Parent.
type Broadcast struct {
	To     []string
	Edits  []manifest.Edit
	Root   RootRef
	Parent RootRef
	Epoch  uint64
}

// SyncReplica sends one replica the whole persisted manifest, the root Root (the zero
// RootRef for a stream that never persisted; seq 0 with a uid for a version 1 or 2 root).
type SyncReplica struct {
	Replica  string
	Manifest manifest.Manifest
	Root     RootRef
	Epoch    uint64
}

// EvaluateLocalRetention lets local retention delete segments wholly below PersistedNext.
type EvaluateLocalRetention struct{ PersistedNext uint64 }

// DeleteObjects hands objects to the reaper, only ever after the persist that stopped
// referencing them. A group entry means the group object and every object under it that
// holds offsets at or after From (manifest.CollectForDelete); objects below From went
// earlier, and deleting a key already gone is harmless. Alone are objects deleted without
// anything under them (groups a truncation expanded: their children stay referenced).
// Roots are replaced root objects.
type DeleteObjects struct {
	Entries []manifest.Entry
	From    uint64
	Alone   []manifest.Entry
	Roots   []RootRef
}

// ReplyWaiters answers await_offset callers: OK means their offset is persisted; otherwise
// Reason says why it never will be (lost locally before upload: a gap; the reader stopped).
type ReplyWaiters struct {
	Waiters []WaiterID
	OK      bool
	Reason  string
	// Retry says the answer is not known (the lookup of a gap inside a group object failed):
	// the caller may ask again; it is neither persisted nor lost.
	Retry bool
	// Gap says the offsets lie in a declared gap: lost from the local log before they were
	// uploaded, they will never be persisted (the stream itself goes on).
	Gap bool
}

// LookUpLeaves asks for the leaf of Manifest (the persisted manifest, an immutable
// snapshot) that holds each of Offsets: they lie inside group objects of the manifest the
// core resolved, which may hold gaps the core never saw (it reads no group object), so
// their waiters can be told neither "persisted" nor "lost" before. The shell walks the tree
// (one group download per level, bounded by Timeout) and answers LeavesLookedUp.
type LookUpLeaves struct {
	Ref      Ref
	Manifest manifest.Manifest
	Offsets  []uint64
	Timeout  time.Duration
}

// Reinitialize tells the shell another writer persisted (or the stream's anchor is
// missing): drop everything in flight, resolve the manifest again and feed Resolved and
// LogOpened. AnchorMissing says it answers a not-found at revision 0: a core that replaces
// this one is built with Config.AnchorReinitialized, so that a recurrence is retried and
// reported rather than reinitialized again.
type Reinitialize struct {
	Reason        string
	AnchorMissing bool
}

// Stop tells the shell the stream is gone: shut the reader down and write nothing more.
// DeposedBy, when not zero, is the higher epoch whose persist fenced this writer (it was
// deposed); zero means the stream was deleted. Epoch is this writer's epoch.
type Stop struct {
	Reason    string
	DeposedBy uint64
	Epoch     uint64
}

// Problem reports an operation the core gave up because a computed change did not apply (a
// bug, or a manifest function that disagreed with the core); the core carries on without it.
type Problem struct {
	Op  string
	Err error
}

func (StartDrain) isEffect()             {}
func (DeclareGap) isEffect()             {}
func (TruncateRemote) isEffect()         {}
func (StalledDiverged) isEffect()        {}
func (StalledBehind) isEffect()          {}
func (RegisterOffsetListener) isEffect() {}
func (SubmitTransfer) isEffect()         {}
func (ResubmitTransfer) isEffect()       {}
func (ArmTransferDeadline) isEffect()    {}
func (Stalled) isEffect()                {}
func (Unstalled) isEffect()              {}
func (StartPersist) isEffect()           {}
func (ArmPersistTimer) isEffect()        {}
func (CancelPersistTimer) isEffect()     {}
func (UploadGroup) isEffect()            {}
func (RetryGroupUploadAfter) isEffect()  {}
func (FetchGroupForRetention) isEffect() {}
func (LookUpLeaves) isEffect()           {}
func (RemoteRetention) isEffect()        {}
func (UpdateRange) isEffect()            {}
func (Broadcast) isEffect()              {}
func (SyncReplica) isEffect()            {}
func (EvaluateLocalRetention) isEffect() {}
func (DeleteObjects) isEffect()          {}
func (ReplyWaiters) isEffect()           {}
func (Reinitialize) isEffect()           {}
func (Stop) isEffect()                   {}
func (Problem) isEffect()                {}

func (e StartDrain) String() string {
	if e.Reason != "" {
		return fmt.Sprintf("start-drain from=%d reason=%q", e.From, e.Reason)
	}
	return fmt.Sprintf("start-drain from=%d", e.From)
}

func (e DeclareGap) String() string {
	return fmt.Sprintf("declare-gap reason=%s gap=[%d,%d) dropped-transfers=%d dropped-chunks=%d",
		e.Reason, e.From, e.To, e.DroppedTransfers, e.DroppedChunks)
}

func (e TruncateRemote) String() string {
	return fmt.Sprintf("truncate-remote reason=%s at=%d old-next=%d drain-from=%d copy=%t dropped=%s alone=%s",
		e.Reason, e.At, e.OldNext, e.DrainFrom, e.Copy, FormatEntries(e.Dropped), FormatEntries(e.Alone))
}

func (e StalledBehind) String() string {
	return fmt.Sprintf("stalled-behind remote=[%d,%d) local=[%d,%d)", e.RemoteFirst, e.RemoteNext, e.LocalFirst, e.LocalNext)
}

func (e StalledDiverged) String() string {
	s := fmt.Sprintf("stalled-diverged remote=[%d,%d) local=[%d,%d)", e.RemoteFirst, e.RemoteNext, e.LocalFirst, e.LocalNext)
	if g := e.GapFork; g != nil {
		s += fmt.Sprintf(" fork-at=%d in-gap=[%d,%d)", g.At, g.From, g.To)
	}
	if a := e.EpochAhead; a != nil {
		s += fmt.Sprintf(" local-first-epoch=%d remote-last-epoch=%d", a.LocalEpoch, a.RemoteEpoch)
	}
	if rw := e.Rewritten; rw != nil {
		s += fmt.Sprintf(" rewritten-below=%d (%s)", rw.SeenNext, rw.Detail)
	}
	return s
}

func (e RegisterOffsetListener) String() string { return fmt.Sprintf("listen offset=%d", e.Offset) }

func (e SubmitTransfer) String() string {
	return fmt.Sprintf("submit ref=%d attempt=%d %s bytes=%d", e.Ref, e.Attempt, formatFragment(e.Fragment), e.Size)
}

func (e ResubmitTransfer) String() string {
	return fmt.Sprintf("resubmit ref=%d attempt=%d %s bytes=%d", e.Ref, e.Attempt, formatFragment(e.Fragment), e.Size)
}

func (e ArmTransferDeadline) String() string {
	return fmt.Sprintf("arm-deadline ref=%d attempt=%d after=%s", e.Ref, e.Attempt, e.After)
}

func (e Stalled) String() string {
	return fmt.Sprintf("stalled offset=%d ref=%d failures=%d reason=%q", e.Offset, e.Ref, e.Failures, e.Reason)
}

func (e Unstalled) String() string { return fmt.Sprintf("unstalled offset=%d ref=%d", e.Offset, e.Ref) }

func (e StartPersist) String() string {
	return fmt.Sprintf("start-persist ref=%d expect-rev=%d epoch=%d reset=%t edits=%s root=%s",
		e.Ref, e.ExpectedRevision, e.Epoch, e.Reset, FormatEdits(e.Edits), FormatManifest(e.Root))
}

func (e ArmPersistTimer) String() string {
	return fmt.Sprintf("arm-persist-timer ref=%d after=%s", e.Ref, e.After)
}

func (e CancelPersistTimer) String() string { return fmt.Sprintf("cancel-persist-timer ref=%d", e.Ref) }

func (e UploadGroup) String() string {
	return fmt.Sprintf("upload-group ref=%d attempt=%d kind=%s children=%d %s", e.Ref, e.Attempt, e.Kind, len(e.Children), FormatEntries(e.Children))
}

func (e RetryGroupUploadAfter) String() string {
	return fmt.Sprintf("retry-group-after ref=%d attempt=%d delay=%s", e.Ref, e.Attempt, e.Delay)
}

func (e FetchGroupForRetention) String() string {
	return fmt.Sprintf("fetch-group ref=%d group=%s timeout=%s", e.Ref, FormatEntry(e.Group), e.Timeout)
}

func (e LookUpLeaves) String() string {
	offs := make([]string, len(e.Offsets))
	for i, o := range e.Offsets {
		offs[i] = fmt.Sprint(o)
	}
	return fmt.Sprintf("look-up-leaves ref=%d rev-next=%d offsets=[%s] timeout=%s", e.Ref, e.Manifest.NextOffset, strings.Join(offs, " "), e.Timeout)
}

func (e RemoteRetention) String() string {
	return fmt.Sprintf("remote-retention %s deferred-deletes=%s", FormatEdit(e.Edit), FormatEntries(e.Deferred))
}

func (e UpdateRange) String() string {
	return fmt.Sprintf("update-range rev=%d %s", e.Revision, FormatManifest(e.Manifest))
}

func (e Broadcast) String() string {
	return fmt.Sprintf("broadcast root=%d/%d parent=%d/%d epoch=%d to=[%s] edits=%s",
		e.Root.Seq, e.Root.UID, e.Parent.Seq, e.Parent.UID, e.Epoch, strings.Join(e.To, " "), FormatEdits(e.Edits))
}

func (e SyncReplica) String() string {
	return fmt.Sprintf("sync-replica %s root=%d/%d epoch=%d %s", e.Replica, e.Root.Seq, e.Root.UID, e.Epoch, FormatManifest(e.Manifest))
}

func (e EvaluateLocalRetention) String() string {
	return fmt.Sprintf("local-retention persisted-next=%d", e.PersistedNext)
}

func (e DeleteObjects) String() string {
	roots := make([]string, len(e.Roots))
	for i, r := range e.Roots {
		roots[i] = fmt.Sprintf("root-%d-%d", r.Epoch, r.UID)
	}
	alone := ""
	if len(e.Alone) > 0 {
		alone = " alone=" + FormatEntries(e.Alone)
	}
	return fmt.Sprintf("delete entries=%s from=%d%s roots=[%s]", FormatEntries(e.Entries), e.From, alone, strings.Join(roots, " "))
}

func (e ReplyWaiters) String() string {
	ids := make([]string, len(e.Waiters))
	for i, w := range e.Waiters {
		ids[i] = fmt.Sprint(w)
	}
	if e.OK {
		return fmt.Sprintf("reply-waiters ok [%s]", strings.Join(ids, " "))
	}
	if e.Retry {
		return fmt.Sprintf("reply-waiters undecided [%s] reason=%q", strings.Join(ids, " "), e.Reason)
	}
	if e.Gap {
		return fmt.Sprintf("reply-waiters in-gap [%s] reason=%q", strings.Join(ids, " "), e.Reason)
	}
	return fmt.Sprintf("reply-waiters failed [%s] reason=%q", strings.Join(ids, " "), e.Reason)
}

func (e Reinitialize) String() string {
	if e.AnchorMissing {
		return fmt.Sprintf("reinitialize reason=%q anchor-missing", e.Reason)
	}
	return fmt.Sprintf("reinitialize reason=%q", e.Reason)
}

func (e Stop) String() string {
	if e.DeposedBy != 0 {
		return fmt.Sprintf("stop deposed-by=%d epoch=%d reason=%q", e.DeposedBy, e.Epoch, e.Reason)
	}
	return fmt.Sprintf("stop reason=%q", e.Reason)
}

func (e Problem) String() string { return fmt.Sprintf("problem op=%s err=%q", e.Op, e.Err) }

// formatFragment prints a fragment description compactly: offsets, chunk bytes, chunks, spans.
func formatFragment(d *fragment.Description) string {
	if d == nil {
		return "frag=<nil>"
	}
	spans := make([]string, len(d.Spans))
	for i, s := range d.Spans {
		spans[i] = fmt.Sprintf("%s[%d,%d)", s.Segment, s.Start, s.End)
	}
	return fmt.Sprintf("frag=[%d,%d) size=%d chunks=%d ts=%d..%d spans=%s",
		d.FirstOffset, d.NextOffset, d.Size, len(d.Chunks), d.FirstTimestamp, d.LastTimestamp, strings.Join(spans, ","))
}

// FormatEntry prints an entry as kind letter, first offset, '#', uid: f100#7, g0#900.
func FormatEntry(e manifest.Entry) string {
	k := "?"
	switch e.Kind {
	case manifest.KindFragment:
		k = "f"
	case manifest.KindGroup:
		k = "g"
	case manifest.KindKiloGroup:
		k = "k"
	case manifest.KindMegaGroup:
		k = "m"
	case manifest.KindGap:
		return fmt.Sprintf("gap%d", e.FirstOffset)
	}
	return fmt.Sprintf("%s%d#%d", k, e.FirstOffset, e.UID)
}

// FormatEntries prints entries in braces, eliding the middle of long lists.
func FormatEntries(es []manifest.Entry) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, e := range es {
		if len(es) > 8 && i == 3 {
			fmt.Fprintf(&b, " ..%d more..", len(es)-5)
		}
		if len(es) > 8 && i >= 3 && i < len(es)-2 {
			continue
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(FormatEntry(e))
	}
	b.WriteByte('}')
	return b.String()
}

// FormatManifest prints a manifest's header and entries on one line.
func FormatManifest(m manifest.Manifest) string {
	return fmt.Sprintf("[%d,%d) ts=%d/%d size=%d entries=%s",
		m.FirstOffset, m.NextOffset, m.FirstTimestamp, m.FirstLastTimestamp, m.TotalSize, FormatEntries(m.Entries))
}

// FormatEdit prints one edit by its shape: an append (fragment or gap), a gap extension, the
// move of an empty manifest (a gap declared on it), a replace (rebalance), a truncate
// (retention) or a header move (retention stopping inside a group).
func FormatEdit(e manifest.Edit) string {
	switch {
	case e.SetNextOffset && e.Remove == 0 && len(e.Insert) == 1:
		return fmt.Sprintf("append %s next=%d", FormatEntry(e.Insert[0]), e.NextOffset)
	case e.SetNextOffset && e.Remove == 1 && len(e.Insert) == 1 && e.Insert[0].IsGap():
		return fmt.Sprintf("extend %s next=%d", FormatEntry(e.Insert[0]), e.NextOffset)
	case e.SetNextOffset && e.Remove == 0 && len(e.Insert) == 0:
		return fmt.Sprintf("move-empty next=%d", e.NextOffset)
	case e.Remove > 0 && len(e.Insert) > 0:
		return fmt.Sprintf("replace@%d -%d +%s", e.At, e.Remove, FormatEntries(e.Insert))
	case e.Remove > 0:
		return fmt.Sprintf("truncate@%d -%d first=%d size-delta=%d", e.At, e.Remove, e.FirstOffset, e.SizeDelta)
	case len(e.Insert) == 0 && !e.SetNextOffset:
		return fmt.Sprintf("move first=%d size-delta=%d", e.FirstOffset, e.SizeDelta)
	}
	return fmt.Sprintf("edit@%d -%d +%s first=%d size%+d next=%t/%d", e.At, e.Remove, FormatEntries(e.Insert), e.FirstOffset, e.SizeDelta, e.SetNextOffset, e.NextOffset)
}

// FormatEdits prints a list of edits in brackets.
func FormatEdits(es []manifest.Edit) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = FormatEdit(e)
	}
	return "[" + strings.Join(parts, "; ") + "]"
}
