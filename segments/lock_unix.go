//go:build unix

package segments

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// dirLock is an exclusive advisory lock (flock) on a stream directory's lock file. flock
// belongs to the open file, not the process: a second Open in the same process is refused
// like one in another process. The kernel releases it when the process dies.
type dirLock struct {
	f *os.File
}

// lockDir takes dir's lock without waiting; an error matching ErrLocked when another Log
// (in this process or another) holds it.
func lockDir(dir string) (*dirLock, error) {
	name := filepath.Join(dir, LockFileName)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", name, ErrLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	return &dirLock{f: f}, nil
}

// unlock releases the lock; harmless on nil or twice.
func (l *dirLock) unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the descriptor releases the flock
	l.f = nil
	if err != nil {
		return fmt.Errorf("release lock file: %w", err)
	}
	return nil
}
