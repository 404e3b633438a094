// Package strictjson decodes the small JSON documents streamtier stores (etcd's cluster
// record, the bucket's claim and deletion markers) strictly: one document, no unknown
// field, nothing after it. A record a later version added a field to is refused by name
// rather than half understood.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// Decode decodes one JSON document into v: no unknown field, nothing after it.
func Decode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the document")
	}
	return nil
}
