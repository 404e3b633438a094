package actors_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/streamtier/streamtier/actors"
	"github.com/streamtier/streamtier/actors/read"
	"github.com/streamtier/streamtier/chunk"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/s3io"
	"github.com/streamtier/streamtier/s3io/embeds3"
	"github.com/streamtier/streamtier/segments"
)

// A broker embeds a node with the embedded etcd and S3 endpoint (both on loopback, in
// this process), appends three records to a local log and commits them, flushes them (they
// are persisted in S3 and etcd when Flush returns), and reads the stream from the first offset and from a
// time: the two oldest chunks come from S3 (local retention removed their segments once
// they were durable), the newest from the local log.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "streamtier-example")
	check(err)
	defer os.RemoveAll(dir)

	// The backends. embeds3 holds the process's working directory while it runs (use
	// absolute paths), and runs once per process.
	etcd, err := metadata.StartEmbedded(ctx, filepath.Join(dir, "etcd"))
	check(err)
	defer etcd.Close()
	s3srv, err := embeds3.Start(ctx, filepath.Join(dir, "s3"))
	check(err)
	defer s3srv.Close()
	store, err := s3io.NewStore(ctx, s3srv.Config("tier"))
	check(err)
	check(store.EnsureBucket(ctx))

	node, err := actors.Start(ctx, actors.Config{Logger: zerolog.Nop()}, store, metadata.NewStore(etcd.Client(), ""))
	check(err)

	// The broker's local log: one chunk per segment, so that local retention has sealed
	// segments to remove once they are in S3.
	lg, err := segments.Open(filepath.Join(dir, "orders"), segments.Options{MaxSegmentChunks: 1})
	check(err)
	defer lg.Close()
	start := time.UnixMilli(1_700_000_000_000)
	for i, body := range []string{"apple", "banana", "cherry"} {
		_, _, err := lg.Append(segments.ChunkSpec{Type: chunk.TypeUser, Epoch: 1, Timestamp: start.Add(time.Duration(i) * time.Minute).UnixMilli(),
			Entries: []segments.Entry{segments.SimpleEntry([]byte(body))}})
		check(err)
	}
	check(lg.SetCommitted(lg.NextOffset() - 1)) // the broker's commit: streamtier tiers only what is committed
	check(node.AddStream(actors.StreamSpec{ID: "orders", Log: lg, Epoch: 1}))

	// Persist through the last offset now (not at the idle cut, a minute away).
	last := lg.NextOffset() - 1
	check(node.Flush(ctx, "orders", last))
	fmt.Println("persisted through offset", last)
	for lg.FirstOffset() < last { // local retention runs right after the persist
		time.Sleep(10 * time.Millisecond)
	}

	readAll := func(from read.From) {
		r, err := node.OpenReader(ctx, "orders", from)
		check(err)
		defer r.Close()
		for {
			it, err := r.Next(ctx)
			check(err)
			recs, err := segments.ChunkRecords(it.Header, it.Chunk)
			check(err)
			fmt.Printf("offset %d from %s: %s\n", it.Offset, it.Tier, recs[0].Body)
			if it.End > last {
				return
			}
		}
	}
	readAll(read.FromFirst())
	readAll(read.FromTimestamp(start.Add(time.Minute).UnixMilli()))

	check(node.Stop(ctx))
	// Output:
	// persisted through offset 2
	// offset 0 from remote: apple
	// offset 1 from remote: banana
	// offset 2 from local: cherry
	// offset 1 from remote: banana
	// offset 2 from local: cherry
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
