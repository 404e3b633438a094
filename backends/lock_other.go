//go:build !unix

package backends

// DirLock is a no-op where flock is not available: only one process should use a data
// directory at a time.
type DirLock struct{}

// Lock does nothing on this platform.
func Lock(dataDir string) (*DirLock, error) { return &DirLock{}, nil }

// Unlock does nothing on this platform.
func (l *DirLock) Unlock() error { return nil }
