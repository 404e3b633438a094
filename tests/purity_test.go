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
	"github.com/streamtier/streamtier/actors/cluster/replicacore",
	"github.com/streamtier/streamtier/actors/governorcore",
	"github.com/streamtier/streamtier/actors/divergence",
	"github.com/streamtier/streamtier/actors/read/fetchcore",
}

// osImporters are the standard library packages a pure core may link that import os
// themselves: fmt for its printing functions (the cores never call them) and the
// randomness source below crypto. No other package in a core's closure may import os or
// path/filepath (segment names are checked with path, not path/filepath).
var osImporters = map[string]bool{"fmt": true, "crypto/internal/sysrand": true}

// TestPureCoresLinkNoIO lists each pure package's dependency closure (go list -deps) and
// fails on any package that does I/O: the project's shells (local log, S3, etcd, actors,
// binary), third-party clients, and the standard library's network, process and signal
// packages, and os imported by anything but the few standard packages in osImporters.
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
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(line)
			dep, imports := f[0], f[1:]
			if forbidden(dep) || dep == "path/filepath" {
				t.Errorf("pure package %s links %s", pkg, dep)
			}
			for _, imp := range imports {
				if imp == "os" && !osImporters[dep] {
					t.Errorf("pure package %s links %s, which imports os", pkg, dep)
				}
			}
		}
	}
}
