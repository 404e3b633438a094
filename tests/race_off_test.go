//go:build !race

package tests

// raceEnabled tells that this test binary runs under the race detector; the cluster test
// then builds its node processes with it too.
const raceEnabled = false
