package main

import (
	"strings"
	"testing"
)

// TestBinaryUsageErrors: an unknown flag or a wrong argument prints the problem, the
// command's one-line synopsis and where to look, not the flag package's dump of every
// setting; -h still lists the flags.
func TestBinaryUsageErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		args     []string
		problem  string
		synopsis string
	}{
		{[]string{"--no-such-flag"}, "node: flag provided but not defined: -no-such-flag", "usage: node [flags]"},
		{[]string{"run", "--no-such-flag"}, "node run: flag provided but not defined: -no-such-flag", "usage: node run [--config node.yaml]"},
		{[]string{"gc", "--delet"}, "node gc: flag provided but not defined: -delet", "usage: node gc [stream] [--delete]"},
		{[]string{"verify", "demo", "--jsn"}, "node verify: flag provided but not defined: -jsn", "usage: node verify <stream>"},
		{[]string{"status", "--data-dir"}, "node status: flag needs an argument: -data-dir", "usage: node status [stream]"},
		{[]string{"verify"}, "node verify: give exactly one stream", "usage: node verify <stream>"},
		{[]string{"run", "extra"}, `node run: unexpected argument "extra"`, "usage: node run"},
	} {
		r := node(t, dir, c.args...)
		lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
		if r.code != 2 || len(lines) != 3 || lines[0] != c.problem && !strings.HasPrefix(lines[0], c.problem) ||
			!strings.HasPrefix(lines[1], c.synopsis) || !strings.Contains(lines[2], "`node help`") || !strings.Contains(lines[2], "`node settings`") {
			t.Errorf("node %v: want exit 2 and three lines (%q, %q, a pointer to node help and node settings):\n%s", c.args, c.problem, c.synopsis, r)
		}
	}
	if r := node(t, dir, "gc", "-h"); r.code != 0 || !strings.Contains(r.stderr, "usage: node gc") || !strings.Contains(r.stderr, "-etcd-endpoints") {
		t.Errorf("gc -h: want the synopsis and the flags:\n%s", r)
	}
}
