// Command node is the streamtier node binary. Until the node itself exists it carries the
// tools: `node segments dump <dir>` lists a stream directory's chunks as JSON lines.
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes of the commands.
const (
	exitOK       = 0
	exitCRC      = 1 // the command ran, but some chunk failed its CRC
	exitBadInput = 2 // usage errors and input that cannot be read
)

// run dispatches a command line (without the program name) to its command and returns
// the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) >= 2 && args[0] == "segments" && args[1] == "dump":
		return segmentsDump(args[2:], stdout, stderr)
	}
	fmt.Fprint(stderr, usage)
	return exitBadInput
}

const usage = `usage:
  node segments dump <dir>   list every chunk of an osiris stream directory as JSON lines
`
