// Package actors is a streamtier node: the API a Go broker embeds (Node) and the upload
// path behind it, as protoactor-go actors.
//
// Per node there is a governor (paces and bounds uploads, runs transfer tasks), a reaper
// (deletes what persisted manifests no longer reference) and a supervisor per stream. Per
// stream a replica reader (the shell around the pure readercore) drains committed chunk
// headers from the local log, cuts fragments, hands their uploads to the governor and
// persists the manifest (a root object in S3, then a conditional etcd write); only then does
// anything downstream happen. Files are named by the actor they hold: node_*, stream_*,
// reader_*, governor_*, reaper.go. The decisions live in the pure packages beside it
// (readercore, governorcore, divergence); the cross-tier reader is actors/read, the
// cluster (replicas, placement, failover) actors/cluster.
//
// An embedder's loop:
//
//	node, err := actors.Start(ctx, actors.Config{}, store, metadata.NewStore(etcd, ""))
//	if err != nil { ... }
//	defer node.Stop(ctx)
//	// Config.Events reports stalls, pauses, gaps, persisted offsets, ... as they happen
//	// (EventListener, docs/events.md); Config.Stream holds the per-stream settings.
//	log, err := segments.Open(dir, segments.Options{})
//	err = node.AddStream(actors.StreamSpec{ID: "orders", Log: log, Epoch: 1})
//
//	// The broker appends and commits (osiris semantics: the committed chunk's id);
//	// streamtier tiers what is committed.
//	h, _, err := log.Append(segments.ChunkSpec{Epoch: 1, Timestamp: now, Entries: entries})
//	err = log.SetCommitted(h.ChunkID)
//	err = node.Flush(ctx, "orders", h.ChunkID) // persisted now: in S3 and anchored in etcd
//	// (AwaitOffset waits without hurrying: a quiet tail is cut after FragmentMaxAge)
//
//	r, err := node.OpenReader(ctx, "orders", read.FromFirst())
//	defer r.Close()
//	for {
//		it, err := r.Next(ctx) // a chunk of either tier, a gap or a skipped range, in order
//		if err != nil { ... }
//		_ = it.Chunk // valid until the next Next
//	}
package actors
