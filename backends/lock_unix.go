//go:build unix

package backends

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// DirLock is an exclusive advisory lock on a data directory (flock on its lock file). The
// kernel releases it when the process dies, so a killed node never leaves it behind.
type DirLock struct {
	f *os.File
}

// Lock takes the data directory's lock without waiting; ErrLocked when another process
// holds it.
func Lock(dataDir string) (*DirLock, error) {
	f, err := os.OpenFile(LockFile(dataDir), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data dir %s: %w", dataDir, ErrLocked)
		}
		return nil, fmt.Errorf("lock data dir %s: %w", dataDir, err)
	}
	return &DirLock{f: f}, nil
}

// Unlock releases the lock; calling it on nil or twice is harmless.
func (l *DirLock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the descriptor releases the flock
	l.f = nil
	return err
}
