// Package metadata keeps streamtier's records in etcd: each stream's anchor, its persisted
// manifest pointer and the highest epoch that persisted (written together by one conditional
// transaction), the members of the cluster (one key per node under a lease) and the placement
// of streams on nodes. It also runs a single-member etcd inside the process (Embedded) for
// `go run ./cmd/node` without an external etcd and for tests.
//
// Every error it returns is classified by IsRetriable: transient (etcd unreachable, no
// leader, deadline) or not (bad input, corrupt record, permission, caller canceled).
package metadata
