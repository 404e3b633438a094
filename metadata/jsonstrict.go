package metadata

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// jsonDecodeStrict decodes one JSON document into v: no unknown field, nothing after it.
func jsonDecodeStrict(b []byte, v any) error {
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
