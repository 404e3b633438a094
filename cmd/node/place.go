package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/streamtier/streamtier/backends"
	"github.com/streamtier/streamtier/manifest"
	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/nodeconfig"
)

// placeCmd writes a stream's placement record: which node writes it at which epoch and
// which nodes replicate it. Cluster members follow the record (docs/operations.md,
// "Cluster mode"); a lower epoch than the stored one is refused, as metadata.PutPlacement
// refuses it.
func placeCmd(args []string, stdout, stderr io.Writer) int {
	var writer, replicas string
	var epoch uint64
	s, pos, code, ok := parseFlags("place", nodeconfig.ModeRun, args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&writer, "writer", "", "the node that writes the stream (its node_id)")
		fs.Uint64Var(&epoch, "epoch", 0, "the writer's epoch: at least the stored placement's (raise it to move the writer)")
		fs.StringVar(&replicas, "replicas", "", "comma-separated nodes that hold replica manifests")
	})
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return badUsage(stderr, "place", "give exactly one stream")
	}
	p, err := placementArgs(pos[0], writer, epoch, replicas)
	if err != nil {
		fmt.Fprintf(stderr, "node place: %v\n", err)
		return exitBadInput
	}
	ctx, cancel := commandContext()
	defer cancel()
	b, err := backends.ForCommand(ctx, s)
	if err != nil {
		return fail(stderr, "place", err)
	}
	defer b.Close()
	old, found, err := b.Meta.GetPlacement(ctx, p.Stream)
	if err != nil && !errors.Is(err, metadata.ErrCorruptRecord) { // a corrupt record may be overwritten
		return fail(stderr, "place", err)
	}
	if err := b.Meta.PutPlacement(ctx, p); err != nil {
		if errors.Is(err, metadata.ErrStaleEpoch) {
			return fail(stderr, "place", fmt.Errorf("%w (raise --epoch above the stored placement's to move the writer)", err))
		}
		return fail(stderr, "place", err)
	}
	was := "no placement before"
	if found {
		was = "was " + describePlacement(old)
	}
	fmt.Fprintf(stdout, "placement of %s: %s (%s)\n", p.Stream, describePlacement(p), was)
	return exitOK
}

// placementArgs checks the command's arguments before any I/O, naming the flag at fault.
func placementArgs(stream, writer string, epoch uint64, replicas string) (metadata.Placement, error) {
	p := metadata.Placement{Stream: stream, Writer: writer, Epoch: epoch, Replicas: nodeconfig.ParseList(replicas)}
	if err := manifest.ValidateStreamID(stream); err != nil {
		return p, err
	}
	if writer == "" {
		return p, errors.New("--writer is required (the node_id of the node that writes the stream)")
	}
	if err := metadata.ValidateNodeName(writer); err != nil {
		return p, fmt.Errorf("--writer: %w", err)
	}
	if epoch < 1 {
		return p, errors.New("--epoch is required and at least 1")
	}
	for _, r := range p.Replicas {
		if err := metadata.ValidateNodeName(r); err != nil {
			return p, fmt.Errorf("--replicas: %w", err)
		}
	}
	if err := p.Validate(); err != nil {
		return p, err
	}
	return p, nil
}

func describePlacement(p metadata.Placement) string {
	r := "no replicas"
	if len(p.Replicas) > 0 {
		r = "replicas " + strings.Join(p.Replicas, ",")
	}
	return fmt.Sprintf("writer %s at epoch %d, %s", p.Writer, p.Epoch, r)
}
