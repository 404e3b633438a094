package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/manifest/resolve"
	"github.com/streamtier/streamtier/recovery"
	"github.com/streamtier/streamtier/s3io"
)

// recoverFlags are `bench recover`'s flags.
type recoverFlags struct {
	commonFlags
	streams int
	rounds  int
}

// runRecover measures `node recover --yes` of every stream of a bucket whose etcd was
// wiped (list the streams, inspect each, take the claim, write the records) against a raw
// baseline that lists the same prefixes (the two-level stream listing and one LIST per
// stream), interleaved round by round; etcd is wiped before each recovery round.
//
// The streams are written directly (a fragment object and a version 3 root of it per
// stream, the claim of the key prefix) rather than tiered by a node: tiering 1,000 streams
// through a node takes minutes and recovery reads only what is written here.
func runRecover(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("recover", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fl := recoverFlags{}
	fl.register(fs)
	fs.IntVar(&fl.streams, "streams", 1000, "streams in the bucket")
	fs.IntVar(&fl.rounds, "rounds", 5, "rounds (each: etcd wiped, recover; then the raw listing)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fl.streams < 1 || fl.rounds < 1 {
		return fmt.Errorf("%w: --streams and --rounds must be at least 1", errUsage)
	}
	ctx, cancel := context.WithTimeout(ctx, fl.timeout)
	defer cancel()
	f, err := startFixture(ctx, fl.commonFlags, nil, stderr)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.close(); err == nil {
			err = cerr
		}
	}()
	if err := f.stopNode(); err != nil { // recovery runs with the nodes stopped
		return err
	}
	f.header(stdout, fmt.Sprintf("recover: %d streams, etcd wiped before each round", fl.streams))
	ids, err := writeRecoverStreams(ctx, f.b.Store, f.b.KeyPrefix, f.b.Meta.Prefix(), fl.streams)
	if err != nil {
		return err
	}
	var secsA, secsB, reqA, reqB []float64
	for round := 0; round < fl.rounds; round++ {
		if _, err := f.b.EtcdClient.Delete(ctx, f.b.Meta.Prefix()+"/", clientv3.WithPrefix()); err != nil {
			return fmt.Errorf("wipe etcd: %w", err)
		}
		before := totalRequests(f.b.Store)
		start := time.Now()
		n, err := recoverAll(ctx, f, ids)
		if err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
		secsA = append(secsA, time.Since(start).Seconds())
		reqA = append(reqA, float64(totalRequests(f.b.Store)-before)/float64(fl.streams))
		if n != fl.streams {
			return fmt.Errorf("round %d: %d of %d streams written", round, n, fl.streams)
		}
		before = totalRequests(f.b.Store)
		start = time.Now()
		if err := rawListing(ctx, f.b.Store, f.b.KeyPrefix, ids); err != nil {
			return err
		}
		secsB = append(secsB, time.Since(start).Seconds())
		reqB = append(reqB, float64(totalRequests(f.b.Store)-before)/float64(fl.streams))
	}
	r := report{stdout}
	r.columns("")
	r.row("A recover --yes seconds", secsA, 3)
	r.row("A S3 requests per stream", reqA, 2)
	r.row("B raw listing seconds", secsB, 3)
	r.row("B S3 requests per stream", reqB, 2)
	r.row("ratio A/B time (recover/raw)", ratios(secsA, secsB), 2)
	r.row("ratio A/B requests", ratios(reqA, reqB), 2)
	return nil
}

// recoverAll is what `node recover --yes --takeover` does: plan every stream (the
// inspection of the bucket), take the claim, write the records. It returns how many
// streams were written.
func recoverAll(ctx context.Context, f *fixture, ids []string) (int, error) {
	o := recovery.Options{Store: f.b.Store, Meta: f.b.Meta, KeyPrefix: f.b.KeyPrefix}
	reps, errs, err := recovery.All(ctx, o, nil)
	if err != nil {
		return 0, err
	}
	for id, e := range errs {
		return 0, fmt.Errorf("stream %s: %w", id, e)
	}
	if _, err := recovery.Claim(ctx, recovery.ClaimOptions{Store: f.b.Store, Meta: f.b.Meta, KeyPrefix: f.b.KeyPrefix, Takeover: true, Write: true}); err != nil {
		return 0, err
	}
	for _, rep := range reps {
		if rep.Plan.Action != resolve.RecoverWrite {
			return 0, fmt.Errorf("stream %s: %s: %s", rep.Stream, rep.Plan.Action, rep.Plan.Reason)
		}
	}
	reps, errs = recovery.ApplyAll(ctx, f.b.Meta, reps, nil, 0)
	for id, e := range errs {
		return 0, fmt.Errorf("stream %s: %w", id, e)
	}
	n := 0
	for _, rep := range reps {
		if rep.Written {
			n++
		}
	}
	return n, nil
}

// rawListing lists what recovery must at least list: the stream prefixes (two levels with
// a delimiter) and each stream's prefix once.
func rawListing(ctx context.Context, store *s3io.Store, keyPrefix string, ids []string) error {
	if _, err := recovery.ListStreams(ctx, store, keyPrefix); err != nil {
		return err
	}
	for _, id := range ids {
		if err := store.List(ctx, manifest.StreamPrefix(keyPrefix, id), func(s3io.ObjectInfo) error { return nil }); err != nil {
			return err
		}
	}
	return nil
}

func totalRequests(store *s3io.Store) uint64 {
	var n uint64
	for _, s := range store.Metrics().Snapshot() {
		n += s.Requests
	}
	return n
}

// writeRecoverStreams writes n streams (a fragment and a version 3 root naming it each, 16
// writers at a time) and the key prefix's claim when it has none, and returns the stream ids.
func writeRecoverStreams(ctx context.Context, store *s3io.Store, keyPrefix, etcdPrefix string, n int) ([]string, error) {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%05d", i)
	}
	// The fixture's node claimed the key prefix when it started; a bucket without one gets it.
	if _, found, err := store.ReadClaim(ctx, keyPrefix); err != nil {
		return nil, err
	} else if !found {
		id, err := s3io.NewClusterID(rand.Reader)
		if err != nil {
			return nil, err
		}
		if err := store.CreateClaim(ctx, keyPrefix, s3io.Claim{ClusterID: id, Generation: 1, EtcdPrefix: etcdPrefix, Created: time.Now().UTC()}); err != nil {
			return nil, err
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	for _, s := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() { // bounded by sem, joined by wg
			defer wg.Done()
			defer func() { <-sem }()
			errs <- writeRecoverStream(ctx, store, keyPrefix, s)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return ids, nil
}

func writeRecoverStream(ctx context.Context, store *s3io.Store, keyPrefix, stream string) error {
	uid := randUID()
	body := make([]byte, 4096)
	if err := store.PutObject(ctx, manifest.FragmentKey(keyPrefix, stream, 0, 1, uid), body); err != nil {
		return err
	}
	now := time.Now().UnixMilli()
	m := manifest.Manifest{FirstOffset: 0, NextOffset: 100, FirstTimestamp: now, FirstLastTimestamp: now, TotalSize: uint64(len(body)),
		Entries: []manifest.Entry{{FirstOffset: 0, FirstTimestamp: now, LastTimestamp: now, Size: uint64(len(body)), UID: uid, Kind: manifest.KindFragment}}}
	l := manifest.Lineage{Seq: 1, Epoch: 1, UID: randUID()}
	return store.PutObjectIfAbsent(ctx, manifest.SeqRootKey(keyPrefix, stream, 1), manifest.EncodeRootV3(l, m))
}

func randUID() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:]) | 1
}
