package actors

import (
	"context"
	"log/slog"

	"github.com/rs/zerolog"
)

// zerologHandler routes protoactor's slog output into the node's zerolog logger. Its info
// chatter (actor lifecycle, dead letters of stale timers) is dropped; warnings and errors stay.
type zerologHandler struct {
	log   zerolog.Logger
	attrs []slog.Attr
}

func (h zerologHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h zerologHandler) Handle(_ context.Context, r slog.Record) error {
	ev := h.log.Warn()
	if r.Level >= slog.LevelError {
		ev = h.log.Error()
	}
	for _, a := range h.attrs {
		ev = ev.Str(a.Key, a.Value.String())
	}
	r.Attrs(func(a slog.Attr) bool {
		ev = ev.Str(a.Key, a.Value.String())
		return true
	})
	ev.Msg(r.Message)
	return nil
}

func (h zerologHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return zerologHandler{log: h.log, attrs: append(append([]slog.Attr(nil), h.attrs...), attrs...)}
}

func (h zerologHandler) WithGroup(string) slog.Handler { return h }
