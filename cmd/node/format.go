package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/streamtier/streamtier/nodeconfig"
)

// table writes aligned columns.
type table struct{ w *tabwriter.Writer }

func newTable(out io.Writer) *table {
	return &table{w: tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)}
}

func (t *table) row(cols ...string) { fmt.Fprintln(t.w, strings.Join(cols, "\t")) }

func (t *table) flush() { t.w.Flush() }

// human renders a byte count in binary units.
func human[T int64 | uint64 | float64](b T) string { return nodeconfig.FormatSize(float64(b)) }

// ago renders an age in seconds for a table ("0.8s", "3m12s", "-" when unknown).
func ago(seconds float64) string {
	if seconds < 0 {
		return "-"
	}
	return dur(time.Duration(seconds * float64(time.Second)))
}

// dur renders a duration rounded for people.
func dur(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// commandName is how the user runs this binary, for the hints printed at the end of the
// demo: "go run ./cmd/node" when the executable is one `go run` built (in a go-build
// temporary directory or the Go build cache), else the program path as typed.
func commandName() string {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	if builtByGoRun(exe, os.Getenv("GOCACHE"), os.Getenv("GOTMPDIR")) || builtByGoRun(os.Args[0], "", "") {
		return "go run ./cmd/node"
	}
	return os.Args[0]
}

// buildCacheDir is the name of an executable's directory in the Go build cache
// (<cache>/<2 hex>/<64 hex>-d/<name>), where `go run` keeps what it built since Go 1.24.
var buildCacheDir = regexp.MustCompile(`^[0-9a-f]{64}-d$`)

// builtByGoRun reports whether exe lies where `go run` puts the executables it builds: a
// "go-build*" directory (os.TempDir's or GOTMPDIR's, or the default build cache
// ~/.cache/go-build), the build cache at GOCACHE, or any directory shaped like a build
// cache entry. It is pure: the caller passes the environment.
func builtByGoRun(exe, goCache, goTmpDir string) bool {
	exe = filepath.Clean(exe)
	dir := filepath.Dir(exe)
	if buildCacheDir.MatchString(filepath.Base(dir)) {
		return true
	}
	for _, root := range []string{goCache, goTmpDir} {
		if root == "" {
			continue
		}
		if rel, err := filepath.Rel(filepath.Clean(root), exe); err == nil && !strings.HasPrefix(rel, "..") {
			return true
		}
	}
	for _, part := range strings.Split(filepath.ToSlash(dir), "/") {
		if strings.HasPrefix(part, "go-build") {
			return true
		}
	}
	return false
}
