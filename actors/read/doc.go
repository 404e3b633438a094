// Package read is streamtier's cross-tier reader: a stream's chunks from any start (the
// first offset, an offset, a time, the last chunk, the next one), in order and exactly
// once, from the remote tier in S3 and then from the local log, handing off where the
// local log begins. It also reads the remote tier with no node at all (OpenOffline, from
// etcd and the bucket) and rebuilds a local osiris directory from it (Restore).
//
// A Reader runs in its caller's goroutine: Side says what it reads (the local log, the
// remote tier's Env, the manifest at hand), and a node builds it (actors.Node.OpenReader,
// the cluster's OpenReader). The remote tier is read by range GETs that the pure fetchcore
// schedules (concurrency search, read budget, in-order reassembly); the only actor here is
// the remote reader that runs those GETs as tasks.
//
// The package imports neither actors nor actors/cluster: they build on it.
package read
