// Package s3test runs real S3 servers for tests: a versitygw process (posix backend) on a
// free loopback port, over http or TLS, with a bucket ready, stopped on t.Cleanup; a fault
// injector (a reverse proxy in front of it) that returns S3 errors, delays, resets and
// drops by method, key pattern and count; and generated osiris logs to upload.
package s3test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// VersityVersion is the versitygw release the test servers run (the one go.mod pins).
const VersityVersion = "v1.8.0"

// versityPackage is the gateway's command.
const versityPackage = "github.com/versity/versitygw/cmd/versitygw"

// buildTimeout bounds the one-time build of the gateway.
const buildTimeout = 15 * time.Minute

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// Binary returns the path of the versitygw executable, building it once per machine (per
// cache directory) with `go install versitygw@VersityVersion`: in versitygw's own module,
// so this module's go.mod and go.sum stay as they are. The executable lives under
// $STREAMTIER_CACHE or the user cache directory; a file lock keeps parallel test packages
// from building it twice, and an atomic rename from ever seeing half a file.
func Binary() (string, error) {
	binOnce.Do(func() { binPath, binErr = buildBinary() })
	return binPath, binErr
}

// CacheDir is where test support keeps built tools: $STREAMTIER_CACHE, else
// <user cache dir>/streamtier.
func CacheDir() (string, error) {
	if d := os.Getenv("STREAMTIER_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("s3test: no cache directory (set STREAMTIER_CACHE): %w", err)
	}
	return filepath.Join(d, "streamtier"), nil
}

func buildBinary() (string, error) {
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, fmt.Sprintf("versitygw-%s-%s-%s", VersityVersion, runtime.GOOS, runtime.GOARCH))
	bin := filepath.Join(dir, "versitygw")
	if isExecutable(bin) {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("s3test: %w", err)
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("s3test: build lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("s3test: build lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if isExecutable(bin) { // built by another process while we waited
		return bin, nil
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", fmt.Errorf("s3test: %w", err)
	}
	defer os.RemoveAll(tmp)
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, "install", versityPackage+"@"+VersityVersion)
	cmd.Dir = tmp // outside any module: versitygw's go.mod decides its dependencies
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOWORK=off", "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("s3test: go install %s@%s: %w\n%s", versityPackage, VersityVersion, err, out)
	}
	if err := os.Rename(filepath.Join(tmp, "versitygw"), bin); err != nil {
		return "", fmt.Errorf("s3test: install versitygw: %w", err)
	}
	return bin, nil
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) || err != nil {
		return false
	}
	return st.Mode().IsRegular() && st.Mode()&0o111 != 0
}
