package manifest

import "fmt"

// The keys format version 3 adds to a bucket: roots named by seq, the deletion marker of a
// stream and the claim of a key prefix (remote-format.md, "Keys").

// SeqRootKey is the key of the version 3 root of seq: <stream prefix>meta/root-<seq20>.manifest,
// created only if absent (one root per seq, ever).
func SeqRootKey(keyPrefix, stream string, seq uint64) string {
	return fmt.Sprintf("%smeta/root-%020d.manifest", StreamPrefix(keyPrefix, stream), seq)
}

// RootsPrefix is the prefix under which every root of a stream, of any version, is listed.
func RootsPrefix(keyPrefix, stream string) string {
	return StreamPrefix(keyPrefix, stream) + "meta/root-"
}

// RootsStartAfter is the StartAfter of a listing of the stream's roots from seq on:
// <stream prefix>meta/root-<seq20>. root-<seq20>.manifest sorts after it, so the listing
// holds the root of seq itself (proof that the record's root is there) and every root above;
// version 1 and 2 root keys of an epoch of seq or more interleave with them.
func RootsStartAfter(keyPrefix, stream string, seq uint64) string {
	return fmt.Sprintf("%smeta/root-%020d", StreamPrefix(keyPrefix, stream), seq)
}

// MarkerKey is the stream's deletion marker: <stream prefix>deleted, the bucket's tombstone,
// never deleted and never collected.
func MarkerKey(keyPrefix, stream string) string { return StreamPrefix(keyPrefix, stream) + "deleted" }

// ClaimKey is the bucket claim of a key prefix: <key-prefix>/claim.
func ClaimKey(keyPrefix string) string { return keyPrefix + "/claim" }
