package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"unicode/utf8"

	"github.com/streamtier/streamtier/actors/read"
	"github.com/streamtier/streamtier/admin"
	"github.com/streamtier/streamtier/backends"
	"github.com/streamtier/streamtier/chunk"
	"github.com/streamtier/streamtier/nodeconfig"
	"github.com/streamtier/streamtier/segments"
)

// readCmd prints a stream's chunks across the tiers: through a running node's admin API
// (local log and remote tier, up to the committed next offset, or on with --follow), or,
// with no node running (or --offline), the remote tier alone from etcd and the bucket.
func readCmd(args []string, stdout, stderr io.Writer) int {
	var from, format string
	var to uint64
	var follow, offline, fromBucket bool
	s, pos, code, ok := parseFlags("read", nodeconfig.ModeRun, args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&from, "from", "first", "where to start: first, last, next, an offset, or @TIME (ms since the epoch or RFC 3339)")
		fs.Uint64Var(&to, "to", 0, "stop before the first chunk starting at or above this offset (0: at the end)")
		fs.StringVar(&format, "format", "json", "json (a line per chunk, gap or skip), records (a line per record) or raw (chunk bytes as written)")
		fs.BoolVar(&follow, "follow", false, "on a running node, wait for new chunks instead of stopping at the committed next offset")
		fs.BoolVar(&offline, "offline", false, "read the remote tier from etcd and the bucket even if a node runs")
		fs.BoolVar(&fromBucket, "from-bucket", false, "read the remote tier from the bucket alone, no etcd (the root `node recover` would choose)")
	})
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return badUsage(stderr, "read", "give exactly one stream")
	}
	stream := pos[0]
	if !streamArg(stderr, "read", stream) {
		return exitBadInput
	}
	spec, err := read.ParseFrom(from)
	if err != nil {
		return badUsage(stderr, "read", err.Error())
	}
	out := bufio.NewWriterSize(stdout, 1<<20)
	defer out.Flush()
	emit, err := itemPrinter(format, out, stderr)
	if err != nil {
		return badUsage(stderr, "read", err.Error())
	}
	ctx, cancel := commandContext()
	defer cancel()
	if fromBucket && follow {
		return badUsage(stderr, "read", "--follow needs a running node; --from-bucket reads the bucket alone")
	}
	if !offline && !fromBucket {
		if c, found := runningNode(ctx, s); found {
			err := c.Read(ctx, stream, admin.ReadQuery{From: spec.String(), To: to, Follow: follow}, func(ri admin.ReadInfo) error {
				noteAttached(stderr, ri.Attached)
				return nil
			}, emit)
			if err != nil {
				return fail(stderr, "read", err)
			}
			return exitOK
		}
		if follow {
			return fail(stderr, "read", errors.New("--follow needs a running node (none found)"))
		}
	}
	b, err := openFor(ctx, s, fromBucket)
	if err != nil {
		return fail(stderr, "read", err)
	}
	defer b.Close()
	r, err := read.OpenOffline(ctx, read.OfflineSource{Store: b.Store, Meta: b.Meta, KeyPrefix: b.KeyPrefix, Stream: stream, FromBucket: fromBucket}, spec)
	if err != nil {
		return fail(stderr, "read", err)
	}
	defer r.Close()
	noteAttached(stderr, r.Attached)
	for {
		it, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			return exitOK
		}
		if err != nil {
			return fail(stderr, "read", err)
		}
		if to > 0 && it.Offset >= to {
			return exitOK
		}
		if err := emit(it); err != nil {
			return fail(stderr, "read", err)
		}
	}
}

// openFor opens the backends of an offline command: the bucket alone with --from-bucket
// (no etcd contacted or started), etcd and the bucket otherwise.
func openFor(ctx context.Context, s nodeconfig.Settings, fromBucket bool) (*backends.Backends, error) {
	if fromBucket {
		return backends.ForBucket(ctx, s)
	}
	return backends.ForCommand(ctx, s)
}

func noteAttached(stderr io.Writer, a *read.Attached) {
	if a != nil {
		fmt.Fprintf(stderr, "node read: offset %d is held by no tier; reading from %d\n", a.Requested, a.At)
	}
}

// itemLine is the json format's line for one item.
type itemLine struct {
	Kind      string `json:"kind"`
	Offset    uint64 `json:"offset"`
	End       uint64 `json:"end"`
	Tier      string `json:"tier"`
	Type      string `json:"type,omitempty"`
	Epoch     uint64 `json:"epoch,omitempty"`
	Timestamp int64  `json:"timestamp,omitempty"`
	Records   uint32 `json:"records,omitempty"`
	Size      int    `json:"size,omitempty"`
	CRC       string `json:"crc,omitempty"`
}

// recordLine is the records format's line for one record (or compressed batch).
type recordLine struct {
	Offset      uint64 `json:"offset"`
	Timestamp   int64  `json:"timestamp"`
	Type        string `json:"type,omitempty"` // for chunks other than user chunks
	Size        int    `json:"size"`
	Body        string `json:"body,omitempty"`        // the record, when it is UTF-8
	BodyBase64  string `json:"body_base64,omitempty"` // else its bytes in base64
	Compression string `json:"compression,omitempty"` // a compressed sub-batch
	Records     uint32 `json:"records,omitempty"`     // the records such a batch holds
}

// itemPrinter returns the function writing items in format to out (and gaps of the raw
// format to stderr).
func itemPrinter(format string, out, stderr io.Writer) (func(read.Item) error, error) {
	enc := json.NewEncoder(out)
	gapLine := func(it read.Item) itemLine {
		return itemLine{Kind: it.Kind.String(), Offset: it.Offset, End: it.End, Tier: it.Tier.String()}
	}
	switch format {
	case "json":
		return func(it read.Item) error {
			l := gapLine(it)
			if it.Kind == read.ItemChunk {
				h := it.Header
				l.Type, l.Epoch, l.Timestamp, l.Records, l.Size = h.Type.String(), h.Epoch, h.Timestamp, h.Records, len(it.Chunk)
				l.CRC = fmt.Sprintf("%08x", h.DataCRC)
			}
			return enc.Encode(l)
		}, nil
	case "records":
		return func(it read.Item) error {
			if it.Kind != read.ItemChunk {
				return enc.Encode(gapLine(it))
			}
			recs, err := segments.ChunkRecords(it.Header, it.Chunk)
			if err != nil {
				return err
			}
			for _, r := range recs {
				l := recordLine{Offset: r.Offset, Timestamp: r.Timestamp, Size: len(r.Body)}
				if r.Type != chunk.TypeUser {
					l.Type = r.Type.String()
				}
				switch {
				case r.Compression != segments.CompressionNone:
					l.Compression, l.Records = compressionName(r.Compression), r.Count
					l.BodyBase64 = base64.StdEncoding.EncodeToString(r.Body)
				case utf8.Valid(r.Body):
					l.Body = string(r.Body)
				default:
					l.BodyBase64 = base64.StdEncoding.EncodeToString(r.Body)
				}
				if err := enc.Encode(l); err != nil {
					return err
				}
			}
			return nil
		}, nil
	case "raw":
		return func(it read.Item) error {
			if it.Kind != read.ItemChunk {
				fmt.Fprintf(stderr, "node read: %s [%d, %d): no chunk bytes\n", it.Kind, it.Offset, it.End)
				return nil
			}
			_, err := out.Write(it.Chunk)
			return err
		}, nil
	}
	return nil, fmt.Errorf("--format %q: want json, records or raw", format)
}

func compressionName(c segments.Compression) string {
	switch c {
	case segments.CompressionGzip:
		return "gzip"
	case segments.CompressionSnappy:
		return "snappy"
	case segments.CompressionLZ4:
		return "lz4"
	case segments.CompressionZstd:
		return "zstd"
	case segments.CompressionUser:
		return "user"
	}
	return "codec-" + strconv.Itoa(int(c))
}

// restoreCmd rebuilds a stream directory from the remote tier (etcd and the bucket; no
// node needed): the disaster recovery of a node that lost its disk.
func restoreCmd(args []string, stdout, stderr io.Writer) int {
	var dir, from string
	var until uint64
	var asJSON, fromBucket bool
	s, pos, code, ok := parseFlags("restore", nodeconfig.ModeRun, args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&dir, "to", "", "the stream directory to write (must be empty or absent)")
		fs.StringVar(&from, "from", "", "where the restored log starts: first, last, an offset or @TIME (default: the run after the last gap, which a broker can continue; an earlier run stops at its gap and must not be continued)")
		fs.Uint64Var(&until, "until", 0, "end the restored log before the first chunk at or above this offset (0: the remote tier's end)")
		fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
		fs.BoolVar(&fromBucket, "from-bucket", false, "restore from the bucket alone, no etcd (the root `node recover` would choose)")
	})
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return badUsage(stderr, "restore", "give exactly one stream")
	}
	stream := pos[0]
	if !streamArg(stderr, "restore", stream) {
		return exitBadInput
	}
	if dir == "" {
		return badUsage(stderr, "restore", "give the target directory with --to DIR")
	}
	var spec read.From // the zero From: the run after the last gap
	if from != "" {
		var err error
		if spec, err = read.ParseFrom(from); err != nil || spec.Kind == read.AtNext {
			return badUsage(stderr, "restore", fmt.Sprintf("--from %q: give first, last, an offset or @TIME", from))
		}
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs // before the embedded S3 endpoint changes the working directory
	}
	ctx, cancel := commandContext()
	defer cancel()
	b, err := openFor(ctx, s, fromBucket)
	if err != nil {
		return fail(stderr, "restore", err)
	}
	defer b.Close()
	rep, err := read.Restore(ctx, read.RestoreOptions{
		Source: read.OfflineSource{Store: b.Store, Meta: b.Meta, KeyPrefix: b.KeyPrefix, Stream: stream, FromBucket: fromBucket},
		Dir:    dir, From: spec, To: until,
	})
	if err == nil || rep.Chunks > 0 {
		printRestore(stdout, asJSON, rep)
	}
	if err != nil {
		return fail(stderr, "restore", err)
	}
	return exitOK
}

func printRestore(out io.Writer, asJSON bool, r read.RestoreReport) {
	if asJSON {
		writeJSON(out, r)
		return
	}
	if r.Attached != nil {
		fmt.Fprintf(out, "offset %d is held by no tier: restored from %d\n", r.Attached.Requested, r.Attached.At)
	}
	if g := r.AfterGap; g != nil {
		fmt.Fprintf(out, "the remote tier's last gap is [%d, %d): restored the run after it (--from first for the earlier runs, which a broker must not continue)\n", g.From, g.To)
	}
	fmt.Fprintf(out, "restored %s: offsets [%d, %d), %d chunks, %d bytes, %d segments\n", r.Dir, r.FirstOffset, r.NextOffset, r.Chunks, r.Bytes, r.Segments)
}
