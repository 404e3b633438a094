package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// profiled runs body under a CPU profile of one side of one counted round, written to
// <prefix>-<side>-r<round>.pprof (--cpu-profile), so that the node's and the baseline's
// profiles stay apart; `go tool pprof` merges a side's rounds. With no prefix, or in a
// warm-up round, it just runs body.
func profiled(prefix, side string, round int, warm bool, body func() error) error {
	if prefix == "" || warm {
		return body()
	}
	name := fmt.Sprintf("%s-%s-r%d.pprof", prefix, side, round)
	f, err := os.Create(name)
	if err != nil {
		return fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("cpu profile %s: %w", name, err)
	}
	berr := body()
	pprof.StopCPUProfile()
	if cerr := f.Close(); cerr != nil && berr == nil {
		berr = fmt.Errorf("cpu profile %s: %w", name, cerr)
	}
	return berr
}
