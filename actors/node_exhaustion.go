package actors

import (
	"errors"
	"syscall"
)

// ExhaustedResource names the local resource err ran out of: "EMFILE" (the process's file
// descriptors), "ENFILE" (the system's), "ENOSPC" (disk space), "EDQUOT" (disk quota),
// "ENOMEM"; "" when err is something else. Status, logs and metrics carry the name so that
// an operator sees at once why a stream stalled.
func ExhaustedResource(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, syscall.EMFILE):
		return "EMFILE"
	case errors.Is(err, syscall.ENFILE):
		return "ENFILE"
	case errors.Is(err, syscall.ENOSPC):
		return "ENOSPC"
	case errors.Is(err, syscall.EDQUOT):
		return "EDQUOT"
	case errors.Is(err, syscall.ENOMEM):
		return "ENOMEM"
	}
	return ""
}

// exhaustionCauses are the names ExhaustedResource gives, in the order metrics list them.
var exhaustionCauses = []string{"EMFILE", "ENFILE", "ENOSPC", "EDQUOT", "ENOMEM"}

// causeIndex is the position of cause in exhaustionCauses, len(exhaustionCauses) for "other".
func causeIndex(cause string) int {
	for i, c := range exhaustionCauses {
		if c == cause {
			return i
		}
	}
	return len(exhaustionCauses)
}
