package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"

	"github.com/streamtier/streamtier/segments"
)

// dumpChunk is one line of `segments dump`: scripts read these keys, keep them stable.
type dumpChunk struct {
	Segment    string `json:"segment"`
	Position   int64  `json:"position"`
	ChunkID    uint64 `json:"chunk_id"`
	Type       string `json:"type"`
	Epoch      uint64 `json:"epoch"`
	Timestamp  int64  `json:"timestamp"`
	Entries    uint16 `json:"entries"`
	Records    uint32 `json:"records"`
	DataLen    uint32 `json:"data_len"`
	TrailerLen uint32 `json:"trailer_len"`
	BloomSize  uint8  `json:"bloom_size"`
	Size       int64  `json:"size"`
	CRCOK      bool   `json:"crc_ok"`
}

// dumpSummary is the last line of `segments dump`.
type dumpSummary struct {
	Summary     bool   `json:"summary"`
	FirstOffset uint64 `json:"first_offset"`
	NextOffset  uint64 `json:"next_offset"`
	Chunks      int    `json:"chunks"`
	Bytes       int64  `json:"bytes"`
	Segments    int    `json:"segments"`
}

// segmentsDump prints one JSON object per chunk of the stream directory in args, then a
// summary line. Exit code 1 when a chunk fails its CRC (it is listed with crc_ok false),
// 2 when the directory cannot be read as a stream (the error, naming the file and
// position, goes to stderr, and no summary is printed).
func segmentsDump(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprint(stderr, "usage: node segments dump <dir>\n")
		return exitBadInput
	}
	w := bufio.NewWriter(stdout)
	enc := json.NewEncoder(w)
	badCRC := 0
	sum, err := segments.Scan(args[0], func(c segments.ScannedChunk) error {
		h := c.Header
		if !c.CRCOK {
			badCRC++
		}
		return enc.Encode(dumpChunk{
			Segment: c.Location.Segment, Position: c.Location.Position, ChunkID: h.ChunkID,
			Type: h.Type.String(), Epoch: h.Epoch, Timestamp: h.Timestamp, Entries: h.Entries,
			Records: h.Records, DataLen: h.DataLen, TrailerLen: h.TrailerLen, BloomSize: h.BloomSize,
			Size: c.Location.Size, CRCOK: c.CRCOK,
		})
	})
	for _, s := range sum.Skipped {
		fmt.Fprintf(stderr, "segments dump: skipped %s\n", s)
	}
	if err == nil {
		err = enc.Encode(dumpSummary{Summary: true, FirstOffset: sum.FirstOffset, NextOffset: sum.NextOffset,
			Chunks: sum.Chunks, Bytes: sum.Bytes, Segments: sum.Segments})
	}
	if ferr := w.Flush(); err == nil && ferr != nil {
		err = fmt.Errorf("write output: %w", ferr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "segments dump: %v\n", err)
		return exitBadInput
	}
	if badCRC > 0 {
		fmt.Fprintf(stderr, "segments dump: %d chunk(s) failed the data CRC check\n", badCRC)
		return exitCRC
	}
	return exitOK
}
