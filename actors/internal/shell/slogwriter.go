package shell

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/rs/zerolog"
)

// ZerologToSlog is a zerolog logger whose events go to an slog logger: each event's JSON
// fields become the record's attributes in their order, its "message" the record's message,
// its level the record's level ("level" and "time" are dropped: the record has its own).
// The zerolog level is the lowest the slog handler takes when this is called, so that
// nothing it would drop is formatted.
func ZerologToSlog(l *slog.Logger) zerolog.Logger {
	w := slogWriter{log: l}
	min := zerolog.Disabled
	for _, zl := range []zerolog.Level{zerolog.ErrorLevel, zerolog.WarnLevel, zerolog.InfoLevel, zerolog.DebugLevel, zerolog.TraceLevel} {
		if l.Enabled(context.Background(), slogLevel(zl)) {
			min = zl
		}
	}
	return zerolog.New(w).Level(min)
}

// slogWriter is the zerolog.LevelWriter behind ZerologToSlog.
type slogWriter struct {
	log *slog.Logger
}

func (w slogWriter) Write(p []byte) (int, error) { return w.WriteLevel(zerolog.NoLevel, p) }

// WriteLevel decodes one zerolog event and hands it to the slog handler. An event that does
// not decode (it always does: zerolog writes it) is passed on whole as the message.
func (w slogWriter) WriteLevel(zl zerolog.Level, p []byte) (int, error) {
	ctx := context.Background()
	level := slogLevel(zl)
	if !w.log.Enabled(ctx, level) {
		return len(p), nil
	}
	msg, attrs, err := decodeEvent(p)
	if err != nil {
		msg, attrs = string(bytes.TrimSpace(p)), nil
	}
	r := slog.NewRecord(time.Now(), level, msg, 0)
	r.AddAttrs(attrs...)
	if err := w.log.Handler().Handle(ctx, r); err != nil {
		return 0, fmt.Errorf("slog handler: %w", err)
	}
	return len(p), nil
}

// slogLevel maps zerolog's levels onto slog's (trace below debug, fatal and panic above
// error; an event without a level is info).
func slogLevel(l zerolog.Level) slog.Level {
	switch l {
	case zerolog.TraceLevel:
		return slog.LevelDebug - 4
	case zerolog.DebugLevel:
		return slog.LevelDebug
	case zerolog.WarnLevel:
		return slog.LevelWarn
	case zerolog.ErrorLevel:
		return slog.LevelError
	case zerolog.FatalLevel, zerolog.PanicLevel:
		return slog.LevelError + 4
	}
	return slog.LevelInfo
}

// decodeEvent reads a zerolog JSON event, keeping the order of its fields.
func decodeEvent(p []byte) (msg string, attrs []slog.Attr, err error) {
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", nil, fmt.Errorf("zerolog event: not a JSON object (%v)", err)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", nil, fmt.Errorf("zerolog event: %w", err)
		}
		key, _ := tok.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			return "", nil, fmt.Errorf("zerolog event field %s: %w", key, err)
		}
		switch key {
		case zerolog.MessageFieldName:
			msg, _ = v.(string)
		case zerolog.LevelFieldName, zerolog.TimestampFieldName:
		default:
			attrs = append(attrs, attr(key, v))
		}
	}
	return msg, attrs, nil
}

func attr(key string, v any) slog.Attr {
	switch v := v.(type) {
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return slog.Int64(key, i)
		}
		if f, err := v.Float64(); err == nil {
			return slog.Float64(key, f)
		}
		return slog.String(key, v.String())
	case string:
		return slog.String(key, v)
	case bool:
		return slog.Bool(key, v)
	}
	return slog.Any(key, v)
}
