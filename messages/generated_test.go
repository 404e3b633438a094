package messages

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
)

// protoField is one field as cluster.proto declares it.
type protoField struct {
	Name     string
	Number   int32
	Type     string // a scalar type name or a message name
	Repeated bool
}

// protoFile is what cluster.proto declares: its package, go_package and messages in order,
// with their fields and the field numbers and names they reserve.
type protoFile struct {
	Package       string
	GoPackage     string
	Messages      []string
	Fields        map[string][]protoField
	ReservedNums  map[string][]int32
	ReservedNames map[string][]string
}

var (
	lineComment = regexp.MustCompile(`//[^\n]*`)
	fieldRE     = regexp.MustCompile(`^(repeated\s+)?([A-Za-z_][A-Za-z0-9_.]*)\s+([A-Za-z_][A-Za-z0-9_]*)\s*=\s*([0-9]+)\s*$`)
	reservedRE  = regexp.MustCompile(`^reserved\s+(.*)$`)
	reservedNum = regexp.MustCompile(`^[0-9]+$`)
	reservedNm  = regexp.MustCompile(`^"([A-Za-z_][A-Za-z0-9_]*)"$`)
)

// parseProto reads the subset of proto3 cluster.proto uses: a package, a go_package option
// and flat messages of scalar, message and repeated fields, and reserved statements listing
// single field numbers or quoted names (no ranges). Anything else fails the parse, so that a
// richer .proto cannot slip past the check unverified.
func parseProto(src string) (protoFile, error) {
	src = lineComment.ReplaceAllString(src, "")
	f := protoFile{Fields: map[string][]protoField{}, ReservedNums: map[string][]int32{}, ReservedNames: map[string][]string{}}
	// Walk statements: split on ';', '{' and '}' while remembering which one ended each.
	var cur string
	var stmt strings.Builder
	quoted := false
	for _, r := range src {
		if r == '"' {
			quoted = !quoted
		}
		switch {
		case quoted:
			stmt.WriteRune(r)
		case r == ';' || r == '{' || r == '}':
			s := strings.TrimSpace(stmt.String())
			stmt.Reset()
			switch {
			case r == '{':
				name, ok := strings.CutPrefix(s, "message ")
				if !ok || cur != "" {
					return f, fmt.Errorf("unsupported block %q", s)
				}
				cur = strings.TrimSpace(name)
				f.Messages = append(f.Messages, cur)
			case r == '}':
				if s != "" || cur == "" {
					return f, fmt.Errorf("unexpected %q before '}'", s)
				}
				cur = ""
			case s == "":
			case cur != "" && reservedRE.MatchString(s):
				for _, item := range strings.Split(reservedRE.FindStringSubmatch(s)[1], ",") {
					item = strings.TrimSpace(item)
					switch {
					case reservedNum.MatchString(item):
						n, err := strconv.ParseInt(item, 10, 32)
						if err != nil {
							return f, err
						}
						f.ReservedNums[cur] = append(f.ReservedNums[cur], int32(n))
					case reservedNm.MatchString(item):
						f.ReservedNames[cur] = append(f.ReservedNames[cur], reservedNm.FindStringSubmatch(item)[1])
					default:
						return f, fmt.Errorf("message %s: unsupported reserved item %q in %q", cur, item, s)
					}
				}
			case cur != "":
				m := fieldRE.FindStringSubmatch(s)
				if m == nil {
					return f, fmt.Errorf("message %s: unsupported field %q", cur, s)
				}
				n, err := strconv.ParseInt(m[4], 10, 32)
				if err != nil {
					return f, err
				}
				f.Fields[cur] = append(f.Fields[cur], protoField{Name: m[3], Number: int32(n), Type: m[2], Repeated: m[1] != ""})
			case s == `syntax = "proto3"`:
			case strings.HasPrefix(s, "package "):
				f.Package = strings.TrimSpace(strings.TrimPrefix(s, "package "))
			case strings.HasPrefix(s, "option go_package = "):
				f.GoPackage = strings.Trim(strings.TrimPrefix(s, "option go_package = "), `"`)
			default:
				return f, fmt.Errorf("unsupported statement %q", s)
			}
		default:
			stmt.WriteRune(r)
		}
	}
	if quoted {
		return f, fmt.Errorf("unterminated string")
	}
	if cur != "" {
		return f, fmt.Errorf("message %s is not closed", cur)
	}
	return f, nil
}

var scalarTypes = map[string]descriptorpb.FieldDescriptorProto_Type{
	"uint64": descriptorpb.FieldDescriptorProto_TYPE_UINT64,
	"int64":  descriptorpb.FieldDescriptorProto_TYPE_INT64,
	"uint32": descriptorpb.FieldDescriptorProto_TYPE_UINT32,
	"int32":  descriptorpb.FieldDescriptorProto_TYPE_INT32,
	"bool":   descriptorpb.FieldDescriptorProto_TYPE_BOOL,
	"string": descriptorpb.FieldDescriptorProto_TYPE_STRING,
	"bytes":  descriptorpb.FieldDescriptorProto_TYPE_BYTES,
}

// TestGeneratedCodeMatchesProto compares the descriptor compiled into cluster.pb.go with
// what cluster.proto declares: package, messages, every field's name, number, type and
// label, and the reserved field numbers and names. It fails when the .proto was edited
// without running `go generate ./messages`.
func TestGeneratedCodeMatchesProto(t *testing.T) {
	src, err := os.ReadFile("cluster.proto")
	if err != nil {
		t.Fatal(err)
	}
	want, err := parseProto(string(src))
	if err != nil {
		t.Fatalf("cluster.proto: %v", err)
	}
	got := protodesc.ToFileDescriptorProto(File_cluster_proto)
	if got.GetPackage() != want.Package || got.GetOptions().GetGoPackage() != want.GoPackage {
		t.Fatalf("generated package %q (go %q), cluster.proto says %q (go %q)",
			got.GetPackage(), got.GetOptions().GetGoPackage(), want.Package, want.GoPackage)
	}
	if len(got.MessageType) != len(want.Messages) {
		t.Fatalf("generated code has %d messages, cluster.proto %d (%v)", len(got.MessageType), len(want.Messages), want.Messages)
	}
	for i, m := range got.MessageType {
		name := want.Messages[i]
		if m.GetName() != name {
			t.Fatalf("message %d is %s in the generated code, %s in cluster.proto", i, m.GetName(), name)
		}
		fields := want.Fields[name]
		if len(m.Field) != len(fields) {
			t.Fatalf("%s: %d fields generated, %d declared", name, len(m.Field), len(fields))
		}
		for j, fd := range m.Field {
			w := fields[j]
			label := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
			if w.Repeated {
				label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED
			}
			typ, scalar := scalarTypes[w.Type]
			ok := fd.GetName() == w.Name && fd.GetNumber() == w.Number && fd.GetLabel() == label
			if scalar {
				ok = ok && fd.GetType() == typ
			} else {
				ok = ok && fd.GetType() == descriptorpb.FieldDescriptorProto_TYPE_MESSAGE &&
					fd.GetTypeName() == "."+want.Package+"."+w.Type
			}
			if !ok {
				t.Errorf("%s field %d: generated %s = %d (%s %s %s), declared %+v",
					name, j, fd.GetName(), fd.GetNumber(), fd.GetLabel(), fd.GetType(), fd.GetTypeName(), w)
			}
		}
		var nums []int32
		for _, r := range m.ReservedRange { // [start, end)
			for n := r.GetStart(); n < r.GetEnd(); n++ {
				nums = append(nums, n)
			}
		}
		slices.Sort(nums)
		wantNums := slices.Sorted(slices.Values(want.ReservedNums[name]))
		if !slices.Equal(nums, wantNums) {
			t.Errorf("%s: generated reserved numbers %v, declared %v", name, nums, wantNums)
		}
		names := slices.Sorted(slices.Values(m.ReservedName))
		wantNames := slices.Sorted(slices.Values(want.ReservedNames[name]))
		if !slices.Equal(names, wantNames) {
			t.Errorf("%s: generated reserved names %v, declared %v", name, names, wantNames)
		}
		for _, fd := range m.Field {
			if slices.Contains(wantNums, fd.GetNumber()) || slices.Contains(wantNames, fd.GetName()) {
				t.Errorf("%s: field %s = %d is reserved", name, fd.GetName(), fd.GetNumber())
			}
		}
	}
}

// TestRemovedFieldsStayReserved: the fields replica messages no longer carry (the manifest
// record's etcd Version) keep their numbers and names reserved, so that no later field
// reuses them with another meaning.
func TestRemovedFieldsStayReserved(t *testing.T) {
	src, err := os.ReadFile("cluster.proto")
	if err != nil {
		t.Fatal(err)
	}
	f, err := parseProto(string(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		msg  string
		num  int32
		name string
	}{{"ManifestEdits", 3, "seq"}, {"ManifestSync", 3, "revision"}} {
		if !slices.Contains(f.ReservedNums[r.msg], r.num) || !slices.Contains(f.ReservedNames[r.msg], r.name) {
			t.Errorf("%s: field %d %q is not reserved (reserved %v %v)", r.msg, r.num, r.name, f.ReservedNums[r.msg], f.ReservedNames[r.msg])
		}
	}
}

// TestParseProtoRefusesWhatItCannotCheck keeps the check honest: constructs outside the
// parsed subset fail instead of being ignored.
func TestParseProtoRefusesWhatItCannotCheck(t *testing.T) {
	for _, src := range []string{
		"message A { oneof x { int64 a = 1; } }",
		"message A { map<string, int64> m = 1; }",
		"enum K { A = 0; }",
		"message A { message B { } }",
		"message A { int64 a = 1 [deprecated = true]; }",
		"import \"x.proto\";",
		"message A { int64 a = 1;",
		"message A { reserved 3 to 5; }",
		"message A { reserved 2, \"b c\"; }",
		"reserved 3;",
	} {
		if _, err := parseProto(src); err == nil {
			t.Errorf("parseProto accepted %q", src)
		}
	}
}

// TestRegenerate runs protoc with protoc-gen-go (when both are installed, as for `go
// generate`) and compares the output with the committed cluster.pb.go byte for byte. CI has
// no protoc; there TestGeneratedCodeMatchesProto is the check.
func TestRegenerate(t *testing.T) {
	protoc, err := exec.LookPath("protoc")
	if err != nil {
		t.Skip("protoc not installed; TestGeneratedCodeMatchesProto covers the committed code")
	}
	if _, err := exec.LookPath("protoc-gen-go"); err != nil {
		t.Skip("protoc-gen-go not on PATH; TestGeneratedCodeMatchesProto covers the committed code")
	}
	out := t.TempDir()
	cmd := exec.Command(protoc, "--proto_path=.", "--go_out="+out, "--go_opt=paths=source_relative", "cluster.proto")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v\n%s", err, b)
	}
	fresh, err := os.ReadFile(filepath.Join(out, "cluster.pb.go"))
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile("cluster.pb.go")
	if err != nil {
		t.Fatal(err)
	}
	// The header names the tool versions; another protoc version is not a difference.
	strip := regexp.MustCompile(`(?m)^// \tprotoc .*\n`)
	if !bytes.Equal(strip.ReplaceAll(fresh, nil), strip.ReplaceAll(committed, nil)) {
		t.Fatal("cluster.pb.go differs from what protoc generates from cluster.proto: run `go generate ./messages`")
	}
}
