// Package cluster is a streamtier node in a cluster: it keeps its membership lease in etcd,
// watches the placements, runs the writer of every stream placed on it (an actors.Node
// underneath, at the placement's epoch) and a replica manifest cache (the pure replicacore
// beside it) for every stream it replicates, and carries broadcasts, syncs and
// registrations between nodes over protoactor-go remote (transport.go). A writer fenced by
// a higher epoch stops; a replica promoted by the placement takes the stream over.
//
// Start it on a Listener (protoactor remote must start before anything uses gRPC):
//
//	lis, err := cluster.Listen("127.0.0.1:7000", log)
//	c, err := cluster.Start(ctx, lis, actors.Config{NodeID: "n1"}, cluster.Config{OpenStream: open}, store, meta)
//	r, err := c.OpenReader(ctx, "orders", read.FromFirst()) // a written or replicated stream
//	err = c.Stop(ctx)
package cluster
