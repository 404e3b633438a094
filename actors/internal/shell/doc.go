// Package shell holds what every actor shell of streamtier uses and no core may: the clock
// (the wall clock in production, a manual one in tests), an incarnation's timers, one-shot
// task actors with deadlines and the bookkeeping of their results, a retry backoff, a
// latency window, and the bridge from protoactor's slog output to zerolog.
//
// It imports no other streamtier package: the upload path (actors), the read path
// (actors/read) and the cluster (actors/cluster) all build on it.
package shell
