// Package segments is the local log: a stream directory in the osiris on-disk format that
// RabbitMQ streams use. It holds the chunk and file formats, the writer (with rolling and
// crash recovery), the committed offset and its listeners, the data reader that drains
// committed chunk headers, ranged reads of chunk bytes for uploads, retention, and a
// read-only scanner for tools. See docs/local-log.md for the design.
package segments
