package shell

import (
	"context"
	"log/slog"

	"github.com/rs/zerolog"
)

// ZerologHandler routes protoactor's slog output into a zerolog logger. Its info chatter
// (actor lifecycle, dead letters of stale timers) is dropped; warnings and errors stay.
type ZerologHandler struct {
	Log   zerolog.Logger
	attrs []slog.Attr
}

// Enabled keeps warnings and errors.
func (h ZerologHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

// Handle writes r to the zerolog logger, its attributes as strings.
func (h ZerologHandler) Handle(_ context.Context, r slog.Record) error {
	ev := h.Log.Warn()
	if r.Level >= slog.LevelError {
		ev = h.Log.Error()
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

// WithAttrs adds attributes to every record.
func (h ZerologHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return ZerologHandler{Log: h.Log, attrs: append(append([]slog.Attr(nil), h.attrs...), attrs...)}
}

// WithGroup ignores groups: the attributes stay flat.
func (h ZerologHandler) WithGroup(string) slog.Handler { return h }
