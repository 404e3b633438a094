package actors

import (
	"testing"

	"github.com/streamtier/streamtier/actors/governorcore"
)

// What one stream may have in flight reaches its core, which sizes its default bound on
// bytes not yet durable from it: the node-wide bound when there is no per-stream cap (the
// default: a lone stream may take every slot), the cap when one is set.
func TestStreamUploadsInFlightFollowTheGovernor(t *testing.T) {
	for _, tc := range []struct {
		gov  governorcore.Config
		want int
	}{
		{governorcore.Config{}, DefaultMaxConcurrentUploads},
		{governorcore.Config{MaxConcurrent: 8}, 8},
		{governorcore.Config{MaxConcurrent: 8, PerStream: 3}, 3},
	} {
		c := Config{Governor: tc.gov}.withDefaults()
		if got := c.coreConfig(StreamSpec{ID: "s"}).UploadsInFlight; got != tc.want {
			t.Errorf("%+v: uploads in flight %d, want %d", tc.gov, got, tc.want)
		}
		if c.Governor.PerStream != tc.gov.PerStream {
			t.Errorf("%+v: per-stream cap became %d", tc.gov, c.Governor.PerStream)
		}
	}
}
