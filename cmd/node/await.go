package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/streamtier/streamtier/admin"
	"github.com/streamtier/streamtier/nodeconfig"
)

// Exit codes of `node await` besides exitOK (persisted), exitFailed (an unknown or stopped
// stream, no node, anything else) and exitBadInput (usage).
const (
	exitAwaitInGap     = 3 // the offset lies in a declared gap: lost before its upload, never persisted
	exitAwaitTimeout   = 4 // not persisted within --timeout: ask again to wait longer
	exitAwaitUndecided = 5 // the node could not tell now (a group object unreadable, the node stopping): ask again shortly
)

// awaitCmd waits until an offset of a stream is persisted on a running node (its admin
// server's POST /streams/{id}/await), for scripts: the exit code says how it ended.
func awaitCmd(args []string, stdout, stderr io.Writer) int {
	const name = "await"
	var asJSON bool
	var offset string
	var timeout time.Duration
	flush := true
	s, pos, code, ok := parseFlags(name, nodeconfig.ModeRun, args, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&flush, "flush", true, "cut and persist up to the offset at once; --flush=false waits for the node's own cut and persist (the idle cut may take a minute)")
		fs.StringVar(&offset, "offset", "committed", "the offset to wait for, or committed: the stream's last committed offset now (everything written so far)")
		fs.DurationVar(&timeout, "timeout", admin.DefaultAwaitTimeout, fmt.Sprintf("how long to wait (at most %v); exit 4 when it passes", admin.MaxAwaitTimeout))
		fs.BoolVar(&asJSON, "json", false, "print the node's answer as JSON")
	})
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return badUsage(stderr, name, "give exactly one stream")
	}
	if offset != "committed" && offset != "last" {
		if _, err := strconv.ParseUint(offset, 10, 64); err != nil {
			return badUsage(stderr, name, fmt.Sprintf("--offset %q: want an offset such as 1234, or committed", offset))
		}
	}
	if timeout <= 0 || timeout > admin.MaxAwaitTimeout {
		return badUsage(stderr, name, fmt.Sprintf("--timeout %v: want a duration above zero and at most %v", timeout, admin.MaxAwaitTimeout))
	}
	id := pos[0]
	if !streamArg(stderr, name, id) {
		return exitBadInput
	}
	ctx, cancel := commandContext()
	defer cancel()
	c, ok := runningNode(ctx, s)
	if !ok {
		return fail(stderr, name, errNoNode(s))
	}
	res, err := c.Await(ctx, id, admin.AwaitQuery{Offset: offset, Timeout: timeout, NoFlush: !flush})
	var ae *admin.AwaitError
	if err != nil && !errors.As(err, &ae) {
		return fail(stderr, name, err) // no answer from the node
	}
	if asJSON {
		if werr := writeJSON(stdout, res); werr != nil {
			return fail(stderr, name, werr)
		}
	}
	if err == nil {
		if !asJSON {
			switch {
			case res.NothingCommitted:
				fmt.Fprintf(stdout, "%s: nothing committed yet: nothing to wait for\n", id)
			default:
				fmt.Fprintf(stdout, "%s: offset %d persisted (persisted next %d, waited %s)\n", id, res.Offset, res.PersistedNext, secondsString(res.WaitedSeconds))
			}
		}
		return exitOK
	}
	fmt.Fprintf(stderr, "node %s: %s: %s\n", name, id, res.Error)
	switch res.ErrorClass {
	case admin.AwaitInGap:
		return exitAwaitInGap
	case admin.AwaitTimeout:
		return exitAwaitTimeout
	case admin.AwaitUndecided, admin.AwaitUnavailable:
		return exitAwaitUndecided
	case admin.AwaitBadRequest:
		return exitBadInput
	}
	return exitFailed
}

// secondsString formats a duration given in seconds as Go does ("530ms", "1.2s").
func secondsString(sec float64) string {
	return time.Duration(sec * float64(time.Second)).Round(time.Millisecond).String()
}
