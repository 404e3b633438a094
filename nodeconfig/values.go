package nodeconfig

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/streamtier/streamtier/actors"
)

// sizeUnits maps a lower-cased unit suffix to its multiplier: decimal (kB, MB, GB, TB) and
// binary (KiB, MiB, GiB, TiB), as people write them.
var sizeUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
	"ki": 1 << 10, "kib": 1 << 10, "mi": 1 << 20, "mib": 1 << 20, "gi": 1 << 30, "gib": 1 << 30, "ti": 1 << 40, "tib": 1 << 40,
}

// ParseSize reads a byte count: an integer or decimal number with an optional unit
// ("64MiB", "8 MiB", "1.5GB", "4096"). Fractions of a byte are dropped.
func ParseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		return 0, fmt.Errorf("%q is not a size (write e.g. 64MiB, 8MB or 4096)", s)
	}
	mult, ok := sizeUnits[unit]
	if !ok {
		return 0, fmt.Errorf("%q: unknown unit %q (use B, kB, MB, GB, TB, KiB, MiB, GiB or TiB)", s, t[i:])
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: %w", s, err)
	}
	b := v * mult
	if b >= math.MaxInt64 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return uint64(b), nil
}

// ParseRate reads a transfer rate in bytes per second: a size with an optional "/s"
// ("20MB/s", "100MiB"), or "unlimited" (also "none" or "0"), which is 0.
func ParseRate(s string) (int64, error) {
	t := strings.TrimSpace(s)
	switch strings.ToLower(t) {
	case "unlimited", "none", "0", "":
		return 0, nil
	}
	t = strings.TrimSuffix(strings.TrimSuffix(t, "/s"), "ps")
	v, err := ParseSize(t)
	if err != nil {
		return 0, fmt.Errorf("%q is not a rate (write e.g. 20MB/s, 100MiB/s or unlimited)", s)
	}
	return int64(v), nil
}

// ParseDuration reads a Go duration ("2s", "1h30m", "250ms"); "0", "none" and "" are zero.
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	switch strings.ToLower(t) {
	case "0", "none", "":
		return 0, nil
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (write e.g. 2s, 500ms or 1h)", s)
	}
	return d, nil
}

// ParseBool reads true/false, yes/no, on/off or 1/0.
func ParseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "yes", "on", "1":
		return true, nil
	case "false", "no", "off", "0":
		return false, nil
	}
	return false, fmt.Errorf("%q is not a boolean (write true or false)", s)
}

// ParseList splits a comma-separated list, dropping blanks around items and empty items.
func ParseList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// FormatSize renders a byte count in binary units with three significant digits
// ("64.0 MiB", "812 B"), for tables and logs.
func FormatSize(b float64) string {
	neg := b < 0
	if neg {
		b = -b
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	i := 0
	for b >= 1024 && i < len(units)-1 {
		b /= 1024
		i++
	}
	var s string
	switch {
	case i == 0:
		s = fmt.Sprintf("%d B", int64(b))
	case b < 10:
		s = fmt.Sprintf("%.2f %s", b, units[i])
	case b < 100:
		s = fmt.Sprintf("%.1f %s", b, units[i])
	default:
		s = fmt.Sprintf("%.0f %s", b, units[i])
	}
	if neg {
		return "-" + s
	}
	return s
}

// ParseMaxAge reads fragment_max_age: a positive duration, or "off" (also "none", "never"
// or any negative duration) for no idle cut, which it returns as actors.NoIdleCut. A 0 is
// refused: it used to turn the idle cut off, and in Go a zero takes the default; the two
// readings must not meet, so the file says "off" or leaves the key out (docs/events.md).
func ParseMaxAge(s string) (time.Duration, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	switch t {
	case "off", "none", "never":
		return actors.NoIdleCut, nil
	case "0", "":
		return 0, fmt.Errorf("%q is refused: write off to turn the idle cut off, or leave the setting out for the default (0 once meant off; it never means off now)", s)
	}
	d, err := time.ParseDuration(t)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q is not a duration (write e.g. 60s, 500ms, or off)", s)
	case d == 0:
		return 0, fmt.Errorf("%q is refused: write off to turn the idle cut off, or leave the setting out for the default (0 once meant off; it never means off now)", s)
	case d < 0:
		return actors.NoIdleCut, nil
	}
	return d, nil
}
