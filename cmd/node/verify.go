package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/streamtier/streamtier/backends"
	"github.com/streamtier/streamtier/nodeconfig"
	"github.com/streamtier/streamtier/verify"
)

// verifyCmd checks a stream's remote tier object by object (through etcd, or the bucket
// alone with --from-bucket).
func verifyCmd(args []string, stdout, stderr io.Writer) int {
	var asJSON, fromBucket bool
	var logDir string
	s, pos, code, ok := parseFlags("verify", nodeconfig.ModeRun, args, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print JSON")
		fs.BoolVar(&fromBucket, "from-bucket", false, "verify the root the bucket alone names (the one `node recover` would choose), no etcd")
		fs.StringVar(&logDir, "log-dir", "", "the stream's local log directory to compare with (default: the declared or demo stream's)")
	})
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return badUsage(stderr, "verify", "give exactly one stream")
	}
	stream := pos[0]
	if !streamArg(stderr, "verify", stream) {
		return exitBadInput
	}
	if logDir == "" {
		logDir = defaultLogDir(s, stream)
	} else if abs, err := filepath.Abs(logDir); err == nil {
		logDir = abs // before the embedded S3 endpoint changes the working directory
	}
	ctx, cancel := commandContext()
	defer cancel()
	b, err := openFor(ctx, s, fromBucket)
	if err != nil {
		return fail(stderr, "verify", err)
	}
	defer b.Close()
	rep, err := verify.Stream(ctx, verify.Options{Store: b.Store, Meta: b.Meta, KeyPrefix: b.KeyPrefix, Stream: stream, LogDir: logDir, FromBucket: fromBucket})
	if err != nil {
		return fail(stderr, "verify", err)
	}
	if asJSON {
		writeJSON(stdout, rep)
	} else {
		printVerify(stdout, b, rep)
	}
	if !rep.OK() {
		if asJSON {
			fmt.Fprintf(stderr, "node verify: %s: %d findings\n", stream, len(rep.Findings))
		}
		return exitFailed
	}
	return exitOK
}

// defaultLogDir is the local log of a declared stream, or the data directory's stream
// directory when it exists (the demo's).
func defaultLogDir(s nodeconfig.Settings, stream string) string {
	for _, st := range s.Streams {
		if st.ID == stream {
			return st.LogDir
		}
	}
	dir := backends.StreamDir(s.DataDir, stream)
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return dir
	}
	return ""
}

func printVerify(out io.Writer, b *backends.Backends, r verify.Report) {
	verdict := "OK"
	if !r.OK() {
		verdict = fmt.Sprintf("%d FINDINGS", len(r.Findings))
	}
	fmt.Fprintf(out, "verify %s: %s (%s)\n", r.Stream, verdict, b.Describe())
	if r.RootKey != "" {
		fmt.Fprintf(out, "  root %s (epoch %d, revision %d): offsets [%d, %d), %s\n", r.RootKey, r.Epoch, r.Revision, r.FirstOffset, r.NextOffset, human(r.TotalSize))
		fmt.Fprintf(out, "  %d fragments (%d chunks, %s) and %d groups checked: layout, index, every chunk CRC, coverage and sizes\n",
			r.Fragments, r.Chunks, human(r.FragmentBytes), r.Groups)
		if r.Gaps > 0 {
			fmt.Fprintf(out, "  %d declared gaps covering %d offsets: lost from the local log before upload, never held remotely\n", r.Gaps, r.GapOffsets)
		}
	}
	if r.LocalDir != "" {
		fmt.Fprintf(out, "  %d chunks compared byte for byte with the local log %s; %d no longer held locally\n", r.LocalCompared, r.LocalDir, r.LocalAbsent)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(out, "  note: %s\n", n)
	}
	if !r.OK() {
		fmt.Fprintln(out)
		t := newTable(out)
		t.row("OFFSET", "OBJECT", "PROBLEM")
		for _, f := range r.Findings {
			t.row(fmt.Sprint(f.Offset), orDash(f.Key), f.Problem)
		}
		t.flush()
	}
}
