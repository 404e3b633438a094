// Package messages holds the messages streamtier nodes exchange across processes, as
// protobuf (cluster.proto, with the generated cluster.pb.go committed so that building needs
// no protoc), and the conversions between them and the manifest package's types.
package messages

//go:generate protoc --proto_path=. --go_out=. --go_opt=paths=source_relative cluster.proto
