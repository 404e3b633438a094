//go:build !unix

package segments

// dirLock is a no-op where flock is not available: nothing refuses a second writer there.
type dirLock struct{}

func lockDir(string) (*dirLock, error) { return &dirLock{}, nil }

func (l *dirLock) unlock() error { return nil }
