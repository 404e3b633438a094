package shell

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// Events written through ZerologToSlog reach the slog handler with their message, level and
// fields as typed attributes, in order; levels the handler drops are not formatted at all
// (the zerolog level follows the handler's).
func TestZerologToSlog(t *testing.T) {
	var buf bytes.Buffer
	l := ZerologToSlog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}})))
	if got := l.GetLevel().String(); got != "info" {
		t.Fatalf("zerolog level %s, want info (the handler's)", got)
	}
	l = l.With().Str("node", "n1").Logger()
	l.Warn().Str("stream", "orders").Uint64("offset", 42).Float64("ratio", 0.5).Bool("paused", true).
		Err(errors.New("boom")).Msg("drain paused")
	l.Debug().Msg("not wanted")
	l.Info().Msg("plain")
	want := "level=WARN msg=\"drain paused\" node=n1 stream=orders offset=42 ratio=0.5 paused=true error=boom\n" +
		"level=INFO msg=plain node=n1\n"
	if got := buf.String(); got != want {
		t.Fatalf("slog output\n%s\nwant\n%s", got, want)
	}
	if strings.Contains(buf.String(), "not wanted") {
		t.Fatal("a debug event passed an info handler")
	}
}
