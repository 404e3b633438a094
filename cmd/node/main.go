// Command node is the streamtier node binary. With no command it runs the demo: an
// embedded etcd and S3 endpoint under ./streamtier-data and a stream fed by the load
// generator, tiered live. `node run` runs a node on the configured etcd and S3; the other
// commands inspect and operate one (status, cut, await, retention, gc, recover, verify, read, restore), place a stream's
// writer and replicas for cluster members (place), or read a local log (segments dump). See docs/operations.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/backends"
	"github.com/streamtier/streamtier/nodeconfig"
)

func main() {
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00" // milliseconds in every log line
	// Durations carry their unit ("took":"530.24ms", not a bare 530.24).
	zerolog.DurationFieldFormat = zerolog.DurationFormatString
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes of the commands.
const (
	exitOK       = 0
	exitCRC      = 1 // the command ran, but some chunk failed its CRC
	exitFailed   = 1 // the command ran and failed: findings, an unknown stream, a backend unreachable
	exitBadInput = 2 // usage errors, bad settings and input that cannot be read
)

// run dispatches a command line (without the program name) to its command and returns
// the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") && !isHelp(args[0]) {
		return serve(nodeconfig.ModeDemo, args, stdout, stderr)
	}
	switch cmd, rest := args[0], args[1:]; {
	case isHelp(cmd) || cmd == "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case cmd == "run":
		return serve(nodeconfig.ModeRun, rest, stdout, stderr)
	case cmd == "status":
		return statusCmd(rest, stdout, stderr)
	case cmd == "cut":
		return cutCmd(rest, stdout, stderr)
	case cmd == "await":
		return awaitCmd(rest, stdout, stderr)
	case cmd == "truncate":
		return truncateCmd(rest, stdout, stderr)
	case cmd == "retention":
		return retentionCmd(rest, stdout, stderr)
	case cmd == "gc":
		return gcCmd(rest, stdout, stderr)
	case cmd == "recover":
		return recoverCmd(rest, stdout, stderr)
	case cmd == "verify":
		return verifyCmd(rest, stdout, stderr)
	case cmd == "read":
		return readCmd(rest, stdout, stderr)
	case cmd == "restore":
		return restoreCmd(rest, stdout, stderr)
	case cmd == "place":
		return placeCmd(rest, stdout, stderr)
	case cmd == "segments" && len(rest) >= 1 && rest[0] == "dump":
		return segmentsDump(rest[1:], stdout, stderr)
	case cmd == "settings":
		return settingsCmd(stdout)
	}
	fmt.Fprintf(stderr, "node: unknown command %q\n\n%s", args[0], usage)
	return exitBadInput
}

// usageLine is the synopsis of one command from the usage text ("node gc [stream] ..."),
// or "node <name> [flags]" for a command the text does not list.
func usageLine(name string) string {
	prefix := "  node " + name
	if name == demoName {
		prefix = "  node ["
	}
	for _, l := range strings.Split(usage, "\n") {
		if !strings.HasPrefix(l, prefix) {
			continue
		}
		l = strings.TrimSpace(l)
		if i := strings.Index(l, "   "); i > 0 {
			l = l[:i]
		}
		return l
	}
	return "node " + name + " [flags]"
}

// demoName is the demo's name in messages (it has no command word).
const demoName = "(demo)"

func isHelp(a string) bool { return a == "-h" || a == "-help" || a == "--help" }

const usage = `usage:
  node [flags]                      the demo: embedded etcd and S3 under ./streamtier-data, a stream
                                    fed by the load generator, tiered live (Ctrl-C stops cleanly)
  node run [--config node.yaml]     a node on the configured etcd and S3 with the declared streams
                                    (--cluster: a cluster member; placements say what it writes)
  node status [stream] [--json] [--from-bucket]
                                    a running node's status (or the persisted state of a stopped one;
                                    --from-bucket: what the bucket alone says, no etcd)
  node cut <stream>                 cut the stream's current fragment now (running node)
  node await <stream> [--offset N|committed] [--flush=false] [--timeout D] [--json]
                                    wait until the offset (default: everything committed now) is
                                    persisted (running node); exit 3 in a gap, 4 timeout, 5 ask again
  node truncate <stream> --yes      a stream whose local log shares no chunk with its remote tier
                                    (status "diverged"): cut the remote tier back and tier the log
  node retention <stream> [--max-bytes SIZE] [--max-age DURATION]
                                    evaluate remote retention now, optionally with a new policy
  node gc [stream] [--delete] [--json] [--grace DURATION]
                                    list (or delete) objects no persisted manifest references
  node recover [stream...] [--yes] [--verify] [--takeover] [--after-restore] [--claim] [--json]
                                    rebuild etcd's records from the bucket (dry run without --yes;
                                    see "metadata disaster recovery" in docs/operations.md)
  node verify <stream> [--json] [--log-dir DIR] [--from-bucket]
                                    check the stream's remote tier object by object
  node read <stream> [--from first|last|next|OFFSET|@TIME] [--to OFFSET] [--format json|records|raw] [--follow] [--from-bucket]
                                    read the stream's chunks across the tiers (running node: up to the
                                    committed next offset, or on with --follow; else the remote tier)
  node restore <stream> --to DIR [--from first|last|OFFSET|@TIME] [--until OFFSET] [--from-bucket]
                                    rebuild an osiris stream directory from the remote tier
  node place <stream> --writer NODE --epoch N [--replicas A,B]
                                    write the stream's placement (cluster mode: who writes, who replicates)
  node segments dump <dir>          list every chunk of an osiris stream directory as JSON lines
  node settings                     list every setting with its flag, environment variable and default

Every command takes the settings as flags (--data-dir, --etcd-endpoints, --s3-bucket, ...),
STREAMTIER_* environment variables or a YAML file (--config); see docs/operations.md.
`

// parseFlags parses a command's arguments: every setting, --config, and the command's own
// flags (added by extra), in any order with the positional arguments, which it returns.
// ok is false when the command must stop with code (help asked, or bad input reported).
func parseFlags(name string, mode nodeconfig.Mode, args []string, stderr io.Writer, extra func(*flag.FlagSet)) (s nodeconfig.Settings, positional []string, code int, ok bool) {
	fs := flag.NewFlagSet("node "+name, flag.ContinueOnError)
	// The flag package prints the error and then every flag (over a hundred lines) on bad
	// input: it writes nowhere, and a bad flag gets one line of usage and a pointer.
	fs.SetOutput(io.Discard)
	f := nodeconfig.RegisterFlags(fs)
	if extra != nil {
		extra(fs)
	}
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprintf(stderr, "usage: %s\n\nflags:\n", usageLine(name))
				fs.SetOutput(stderr)
				fs.PrintDefaults()
				return s, nil, exitOK, false
			}
			return s, nil, badUsage(stderr, name, err.Error()), false
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
	if grace := fs.Lookup("grace"); grace != nil && grace.Value.String() != "" {
		f.Set("gc_grace_period", grace.Value.String())
	}
	// The data directory's record of its backends fills the backend settings left out,
	// and refuses other ones (backends.LocationFile).
	s, err := nodeconfig.LoadRemembering(mode, f, os.Environ(), backends.Remembered)
	if err != nil {
		fmt.Fprintf(stderr, "node %s: %v\n", name, err)
		return s, nil, exitBadInput, false
	}
	return s, positional, exitOK, true
}

// settingsCmd lists every setting.
func settingsCmd(stdout io.Writer) int {
	w := newTable(stdout)
	w.row("SETTING", "FLAG", "ENVIRONMENT", "DEFAULT", "DEMO DEFAULT")
	for _, s := range nodeconfig.Table() {
		w.row(s.Name, s.Flag, s.Env, orDash(s.Default), s.DemoDefault)
	}
	w.flush()
	return exitOK
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
