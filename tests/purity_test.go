package tests

import (
	"os/exec"
	"strings"
	"testing"
)

// pureCores are the packages that decide: their dependency closure must hold no I/O.
var pureCores = []string{
	"github.com/streamtier/streamtier/chunk",
	"github.com/streamtier/streamtier/fragment",
	"github.com/streamtier/streamtier/manifest",
	"github.com/streamtier/streamtier/actors/readercore",
	"github.com/streamtier/streamtier/actors/replicacore",
	"github.com/streamtier/streamtier/actors/governorcore",
	"github.com/streamtier/streamtier/actors/divergence",
	"github.com/streamtier/streamtier/actors/fetchcore",
}

// TestPureCoresLinkNoIO lists each pure package's dependency closure (go list -deps) and
// fails on any package that does I/O: the project's shells (local log, S3, etcd, actors,
// binary), third-party clients, and the standard library's network, process and signal
// packages. (fmt links os for its printing functions; the cores never call them, which the
// standard library's layout leaves to review.)
func TestPureCoresLinkNoIO(t *testing.T) {
	forbidden := func(p string) bool {
		switch {
		case strings.HasPrefix(p, "github.com/streamtier/streamtier/"):
			for _, ok := range pureCores {
				if p == ok {
					return false
				}
			}
			return true
		case strings.Contains(strings.SplitN(p, "/", 2)[0], "."): // github.com/..., go.etcd.io/...
			return true
		case p == "net" || strings.HasPrefix(p, "net/"), p == "os/exec", p == "os/signal", p == "crypto/tls", p == "database/sql":
			return true
		}
		return false
	}
	for _, pkg := range pureCores {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if forbidden(dep) {
				t.Errorf("pure package %s links %s", pkg, dep)
			}
		}
	}
}
