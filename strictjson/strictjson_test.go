package strictjson

import "testing"

func TestDecode(t *testing.T) {
	type doc struct {
		A *int `json:"a"`
	}
	for _, c := range []struct {
		in string
		ok bool
	}{{`{"a":1}`, true}, {`{"a":1,"b":2}`, false}, {`{"a":1} {}`, false}, {`{"a":1} x`, false}, {`{"a":`, false}, {`{"a":1}` + "\n", true}} {
		var d doc
		if err := Decode([]byte(c.in), &d); (err == nil) != c.ok {
			t.Errorf("Decode(%q): %v, want ok %t", c.in, err, c.ok)
		}
	}
}
