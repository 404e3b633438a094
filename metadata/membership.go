package metadata

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Member is a node that is up: its name and the host:port its actor system listens on.
type Member struct {
	Node    string `json:"node"`
	Address string `json:"address"`
}

// Validate refuses an unsafe node name or an address that is not host:port.
func (m Member) Validate() error {
	if err := ValidateNodeName(m.Node); err != nil {
		return fmt.Errorf("%w: member: %w", ErrInvalidArgument, err)
	}
	host, port, err := net.SplitHostPort(m.Address)
	if err != nil {
		return fmt.Errorf("%w: member %s: address %q: %w", ErrInvalidArgument, m.Node, m.Address, err)
	}
	if host == "" {
		return fmt.Errorf("%w: member %s: address %q has no host", ErrInvalidArgument, m.Node, m.Address)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%w: member %s: address %q: port must be 1..65535", ErrInvalidArgument, m.Node, m.Address)
	}
	return nil
}

func decodeMember(key, node string, value []byte) (Member, error) {
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.DisallowUnknownFields()
	var m Member
	if err := dec.Decode(&m); err != nil {
		return Member{Node: node}, fmt.Errorf("%w: %s: member record: %w", ErrCorruptRecord, key, err)
	}
	if m.Node != node {
		return Member{Node: node}, fmt.Errorf("%w: %s: member record names node %q", ErrCorruptRecord, key, m.Node)
	}
	if err := m.Validate(); err != nil {
		return Member{Node: node}, fmt.Errorf("%w: %s: %w", ErrCorruptRecord, key, err)
	}
	return m, nil
}

// Registration keeps a node's member key alive under a lease. It owns the goroutine that
// consumes the keepalives and, should the lease be lost (etcd unreachable for longer than
// the TTL, or the lease revoked), registers again under a new lease until Close.
type Registration struct {
	store  *Store
	member Member
	ttl    int64 // seconds
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	lease   clientv3.LeaseID
	lastErr error
}

// Register puts m under the members prefix with a lease of ttl (rounded up to whole seconds;
// etcd may raise a very short TTL to its minimum) and keeps it alive until Close. When the
// node dies without Close, its key disappears once the lease expires and watchers see it
// leave. Registering the same node again takes its key over.
func (s *Store) Register(ctx context.Context, m Member, ttl time.Duration) (*Registration, error) {
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("register: %w", err)
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("register %s: %w: lease ttl %v must be positive", m.Node, ErrInvalidArgument, ttl)
	}
	secs := int64((ttl + time.Second - 1) / time.Second)
	r := &Registration{store: s, member: m, ttl: secs, done: make(chan struct{})}
	lease, err := r.grantAndPut(ctx)
	if err != nil {
		return nil, err
	}
	// The registration outlives the call: its goroutine stops on Close, not with ctx.
	kctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ch, err := s.cli.KeepAlive(kctx, lease)
	if err != nil {
		cancel()
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer rcancel()
		_, rerr := s.cli.Revoke(rctx, lease)
		return nil, errors.Join(fmt.Errorf("register %s: keepalive: %w", m.Node, err), rerr)
	}
	r.lease, r.cancel = lease, cancel
	go r.run(kctx, ch)
	return r, nil
}

// grantAndPut grants a lease and puts the member key under it.
func (r *Registration) grantAndPut(ctx context.Context) (clientv3.LeaseID, error) {
	cli := r.store.cli
	grant, err := cli.Grant(ctx, r.ttl)
	if err != nil {
		return 0, fmt.Errorf("register %s: grant lease: %w", r.member.Node, err)
	}
	value, err := json.Marshal(r.member)
	if err != nil {
		return 0, fmt.Errorf("register %s: encode: %w", r.member.Node, err)
	}
	if _, err := cli.Put(ctx, MemberKey(r.store.prefix, r.member.Node), string(value), clientv3.WithLease(grant.ID)); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_, rerr := cli.Revoke(rctx, grant.ID)
		return 0, errors.Join(fmt.Errorf("register %s: put: %w", r.member.Node, err), rerr)
	}
	return grant.ID, nil
}

// run consumes keepalive replies; when the channel closes while the registration is still
// wanted, the lease is gone, so it registers again with a growing pause between failures.
func (r *Registration) run(ctx context.Context, ch <-chan *clientv3.LeaseKeepAliveResponse) {
	defer close(r.done)
	for {
		for range ch { // each reply renews the lease; nothing else to do
		}
		backoff := 50 * time.Millisecond
		for {
			if ctx.Err() != nil || r.store.cli.Ctx().Err() != nil {
				return
			}
			lease, err := r.grantAndPut(ctx)
			if err == nil {
				r.mu.Lock()
				r.lease = lease // recorded at once, so that Close revokes the newest lease
				r.mu.Unlock()
				if ch, err = r.store.cli.KeepAlive(ctx, lease); err == nil {
					r.mu.Lock()
					r.lastErr = nil
					r.mu.Unlock()
					break
				}
				if ctx.Err() != nil {
					return // Close revokes it
				}
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
				_, rerr := r.store.cli.Revoke(rctx, lease)
				cancel()
				err = errors.Join(fmt.Errorf("register %s: keepalive: %w", r.member.Node, err), rerr)
			}
			r.mu.Lock()
			r.lastErr = err
			r.mu.Unlock()
			if !sleepCtx(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, 5*time.Second)
		}
	}
}

// Member is the member this registration keeps alive.
func (r *Registration) Member() Member { return r.member }

// LeaseID is the lease the member key currently lives under (it changes after a re-register).
func (r *Registration) LeaseID() clientv3.LeaseID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lease
}

// Err is the last failure to register again after the lease was lost (nil when registered).
func (r *Registration) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}

// Close stops the keepalives, waits for the goroutine and revokes the lease, which deletes
// the member key at once (watchers see the node leave). A lease already expired is fine, and
// so is calling Close again (after a failure, it tries the revoke again).
func (r *Registration) Close(ctx context.Context) error {
	r.cancel()
	select {
	case <-r.done:
	case <-ctx.Done():
		return fmt.Errorf("deregister %s: waiting for keepalive to stop: %w", r.member.Node, ctx.Err())
	}
	lease := r.LeaseID()
	if _, err := r.store.cli.Revoke(ctx, lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("deregister %s: revoke lease %x: %w", r.member.Node, int64(lease), err)
	}
	return nil
}

// MemberEventKind says whether a node joined (or changed its address) or left.
type MemberEventKind int

const (
	// MemberJoined: the node's key was put (a join, or a re-registration).
	MemberJoined MemberEventKind = iota + 1
	// MemberLeft: the node's key is gone (Close, or its lease expired).
	MemberLeft
)

// String names the kind, for logs and test failures.
func (k MemberEventKind) String() string {
	switch k {
	case MemberJoined:
		return "joined"
	case MemberLeft:
		return "left"
	}
	return fmt.Sprintf("MemberEventKind(%d)", int(k))
}

// MemberEvent is one change of membership. Err is set (wrapping ErrCorruptRecord) when the
// node's record could not be decoded; Member then carries only the node name. An event with
// Err set and no Kind is the last one: it says why the watch stopped before its context ended.
type MemberEvent struct {
	Kind   MemberEventKind
	Member Member
	Err    error
}

// WatchMembers returns the members that are up now and a channel of later joins and leaves,
// in etcd order with nothing missed (after a long disconnect it lists again and reports the
// difference). The channel closes when ctx is done or the client is closed.
func (s *Store) WatchMembers(ctx context.Context) (initial []Member, events <-chan MemberEvent, err error) {
	prefix := MembersPrefix(s.prefix)
	w := &prefixWatcher{cli: s.cli, prefix: prefix}
	snap, err := w.start(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("watch members: %w", err)
	}
	var bad []MemberEvent
	for _, c := range snap {
		ev := memberEvent(prefix, c)
		if ev.Err != nil {
			bad = append(bad, ev)
			continue
		}
		initial = append(initial, ev.Member)
	}
	ch := make(chan MemberEvent, 16)
	send := func(ev MemberEvent) bool {
		select {
		case ch <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	go func() {
		defer close(ch)
		for _, ev := range bad {
			if !send(ev) {
				return
			}
		}
		if err := w.run(ctx, func(c kvChange) bool { return send(memberEvent(prefix, c)) }); err != nil {
			send(MemberEvent{Err: fmt.Errorf("watch members: stopped: %w", err)})
		}
	}()
	return initial, ch, nil
}

func memberEvent(prefix string, c kvChange) MemberEvent {
	node := strings.TrimPrefix(c.key, prefix)
	kind := MemberJoined
	if c.deleted {
		kind = MemberLeft
		if c.value == nil {
			return MemberEvent{Kind: kind, Member: Member{Node: node}}
		}
	}
	m, err := decodeMember(c.key, node, c.value)
	if c.deleted {
		err = nil // the node left: its last record's flaw was reported when it was put
	}
	return MemberEvent{Kind: kind, Member: m, Err: err}
}
