package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/streamtier/streamtier/actors"
)

// TestConfigValidate: a membership lease etcd's client cannot keep alive through a
// half-second stall is refused by name, as are negative timings; zero means the default.
func TestConfigValidate(t *testing.T) {
	open := func(string) (actors.StreamSpec, error) { return actors.StreamSpec{}, nil }
	for _, c := range []struct {
		cfg  Config
		want string // "" when valid
	}{
		{Config{OpenStream: open}, ""},
		{Config{OpenStream: open, MemberTTL: MinMemberTTL}, ""},
		{Config{OpenStream: open, MemberTTL: time.Second}, "member_ttl = 1s: must be at least 2s"},
		{Config{OpenStream: open, MemberTTL: 1999 * time.Millisecond}, "member_ttl = 1.999s"},
		{Config{OpenStream: open, MemberTTL: -time.Second}, "must not be negative"},
		{Config{}, "open_stream"},
	} {
		err := c.cfg.Validate()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: got %v, want %q", c.cfg.MemberTTL, err, c.want)
		}
	}
}
