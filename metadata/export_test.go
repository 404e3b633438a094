package metadata

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// StaleMemberWatch prepares a watcher of the members prefix that reported everything up to
// rev and then fell behind (as after a long disconnect); start runs it, so that tests can
// compact rev away in between.
func StaleMemberWatch(ctx context.Context, s *Store, rev int64) (start func() <-chan MemberEvent, err error) {
	w := &prefixWatcher{cli: s.cli, prefix: MembersPrefix(s.prefix)}
	resp, err := s.cli.Get(ctx, w.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		return nil, err
	}
	w.known = make(map[string][]byte)
	for _, kv := range resp.Kvs {
		w.known[string(kv.Key)] = kv.Value
	}
	w.rev = rev
	return func() <-chan MemberEvent {
		ch := make(chan MemberEvent, 16)
		go func() {
			defer close(ch)
			send := func(ev MemberEvent) bool {
				select {
				case ch <- ev:
					return true
				case <-ctx.Done():
					return false
				}
			}
			if err := w.run(ctx, func(c kvChange) bool { return send(memberEvent(w.prefix, c)) }); err != nil {
				send(MemberEvent{Err: err})
			}
		}()
		return ch
	}, nil
}

// LogAsEtcd logs msg with err and a path field at level through the hooks the embedded etcd's logger has,
// and returns what a start would have returned in its place.
func LogAsEtcd(level zapcore.Level, msg string, err error) (out error) {
	hook := &failureHook{}
	hook.starting.Store(true) // a start is running: Fatal raises the failure too
	lg := hook.on(zap.NewNop())
	defer func() {
		if r := recover(); r != nil {
			out = r.(EtcdFailure)
		}
	}()
	switch level {
	case zapcore.PanicLevel:
		lg.Panic(msg, zap.Error(err), zap.String("path", "/x"))
	case zapcore.FatalLevel:
		lg.Fatal(msg, zap.Error(err), zap.String("path", "/x"))
	}
	return nil
}
