package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// cpuProfile starts a CPU profile of one side of one counted round into
// <prefix>-<side>-r<round>.pprof when prefix is set (--cpu-profile), so that the node's
// and the baseline's profiles stay apart; `go tool pprof` merges a side's rounds. The
// returned stop ends it; it is a no-op when prefix is empty or the round is a warm-up.
func cpuProfile(prefix, side string, round int, warm bool) (stop func() error, err error) {
	if prefix == "" || warm {
		return func() error { return nil }, nil
	}
	name := fmt.Sprintf("%s-%s-r%d.pprof", prefix, side, round)
	f, err := os.Create(name)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile %s: %w", name, err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("cpu profile %s: %w", name, err)
		}
		return nil
	}, nil
}

// profiled runs body under cpuProfile.
func profiled(prefix, side string, round int, warm bool, body func() error) error {
	stop, err := cpuProfile(prefix, side, round, warm)
	if err != nil {
		return err
	}
	berr := body()
	if serr := stop(); berr == nil {
		berr = serr
	}
	return berr
}
