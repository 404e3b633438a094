package main

import "testing"

// TestBuiltByGoRun: the executables `go run` builds (a temporary go-build directory, the
// build cache at its default place or at GOCACHE) are told from an installed binary.
func TestBuiltByGoRun(t *testing.T) {
	hash := "95d86c562c2537f8d379ce63c893f3e4b37569a3981044b5fac039c42ee56ac3-d"
	for _, c := range []struct {
		exe, cache, tmp string
		want            bool
	}{
		{"/tmp/go-build4014526395/b001/exe/node", "", "", true},
		{"/root/.cache/go-build/95/" + hash + "/node", "", "", true},
		{"/work/.gocache/95/" + hash + "/node", "", "", true},
		{"/work/.gocache/95/abc/node", "/work/.gocache", "", true},
		{"/work/gotmp/b001/exe/node", "", "/work/gotmp", true},
		{"/usr/local/bin/node", "/work/.gocache", "/work/gotmp", false},
		{"/home/me/streamtier/node", "", "", false},
		{"/work/.gocache-other/node", "/work/.gocache", "", false},
		{"./node", "", "", false},
	} {
		if got := builtByGoRun(c.exe, c.cache, c.tmp); got != c.want {
			t.Errorf("builtByGoRun(%q, GOCACHE=%q, GOTMPDIR=%q) = %v, want %v", c.exe, c.cache, c.tmp, got, c.want)
		}
	}
}
