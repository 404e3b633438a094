package manifest

import "fmt"

// ValidateClusterID refuses anything but 32 lowercase hex digits: the id a bucket claim and
// etcd's cluster record share (remote-format.md, "Bucket claim").
func ValidateClusterID(id string) error {
	if len(id) != 32 {
		return fmt.Errorf("cluster id %q: want 32 lowercase hex digits", id)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return fmt.Errorf("cluster id %q: %q at %d is not a lowercase hex digit", id, c, i)
		}
	}
	return nil
}
