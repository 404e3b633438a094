package segments

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrSegmentGone marks a segment file that was deleted (by retention) under a reader or an
// upload. The upload path treats it as its own kind of failure: the range is gone locally.
var ErrSegmentGone = errors.New("segment deleted")

// OpenSegment opens a segment file of the stream directory dir for ranged reads (ReadAt).
// A missing file is ErrSegmentGone. A file deleted after it was opened stays readable
// through the returned handle, so a reader never sees garbage.
func OpenSegment(dir, name string) (*os.File, error) {
	if name != filepath.Base(name) {
		return nil, fmt.Errorf("open segment %q: not a plain file name", name)
	}
	f, err := os.Open(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("open segment %s in %s: %w", name, dir, ErrSegmentGone)
	}
	if err != nil {
		return nil, fmt.Errorf("open segment %s in %s: %w", name, dir, err)
	}
	return f, nil
}
