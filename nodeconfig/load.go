package nodeconfig

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Sources are the three places settings come from, highest precedence first. Resolve is a
// pure function of them: no file or environment is read behind its back.
type Sources struct {
	// Flags holds the settings given on the command line, by setting name.
	Flags map[string]string
	// Env is the process environment as os.Environ returns it; only STREAMTIER_ variables
	// that name a setting are read (others are ignored).
	Env []string
	// File is the YAML configuration file's content (nil when there is none) and FileName
	// its name, for messages.
	File     []byte
	FileName string
	// Dir is the directory relative paths are resolved against (the working directory at
	// start: the embedded S3 endpoint changes the working directory later).
	Dir string
	// Remembered are the backend settings the data directory recorded when a node last
	// ran on it (see Remembered): below the file, above the defaults, and refused when a
	// higher source names other values.
	Remembered Remembered
}

// Remembered is what a data directory recorded of the etcd and bucket its streams are
// tiered to, by setting name (etcd_endpoints, etcd_prefix, s3_endpoint, s3_bucket,
// s3_region, s3_path_style, key_prefix; never a credential). A setting left at its
// default takes the remembered value. One given otherwise must agree with it where it
// says which data (the etcd prefix, the bucket, the key prefix, and whether etcd is the
// embedded one), or Resolve refuses with an error that says where the data went; the
// addresses of external servers (etcd endpoints, S3 endpoint, region, addressing) may
// differ: another route to the same servers (a proxy, another member of the cluster).
type Remembered struct {
	Values map[string]string
	// File is the record's path and Where describes the backends, for messages.
	File  string
	Where string
}

// rememberable are the settings a data directory may record: where its data went.
var rememberable = map[string]bool{"etcd_endpoints": true, "etcd_prefix": true, "s3_endpoint": true, "s3_bucket": true,
	"s3_region": true, "s3_path_style": true, "key_prefix": true}

// identifies are the remembered settings that say which data, not how to reach it.
var identifies = map[string]bool{"etcd_prefix": true, "s3_bucket": true, "key_prefix": true}

// conflicts reports whether a setting's value v disagrees with the remembered rv.
func conflicts(name, v, rv string) bool {
	v, rv = canonical(name, v), canonical(name, rv)
	switch {
	case identifies[name]:
		return v != rv
	case name == "etcd_endpoints": // the embedded etcd, or an external one
		return (v == "") != (rv == "")
	}
	return false
}

// canonical renders a setting's value for comparison with a remembered one.
func canonical(name, v string) string {
	switch name {
	case "etcd_endpoints":
		return strings.Join(ParseList(v), ",")
	case "s3_path_style":
		if b, err := ParseBool(v); err == nil {
			return strconv.FormatBool(b)
		}
	case "s3_endpoint":
		return strings.TrimRight(v, "/")
	}
	return v
}

// Resolve computes the settings of mode from src: for each setting the flag, else the
// environment variable, else the file, else the default. Every value is parsed and the
// whole is validated; the first problem is returned naming the setting and its origin.
func Resolve(mode Mode, src Sources) (Settings, error) {
	s, err := resolveSources(mode, src)
	if err != nil {
		return Settings{}, err
	}
	if err := s.Validate(); err != nil {
		return Settings{}, err
	}
	return s, nil
}

// resolveSources is Resolve without the validation of the whole.
func resolveSources(mode Mode, src Sources) (Settings, error) {
	file, streams, err := parseFile(src.FileName, src.File)
	if err != nil {
		return Settings{}, err
	}
	env := map[string]string{}
	for _, kv := range src.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(k, EnvPrefix) {
			continue
		}
		env[strings.ToLower(strings.TrimPrefix(k, EnvPrefix))] = v
	}
	for name := range src.Flags {
		if _, ok := lookup(name); !ok {
			return Settings{}, fmt.Errorf("unknown setting %q", name)
		}
	}
	for name := range src.Remembered.Values {
		if !rememberable[name] {
			return Settings{}, fmt.Errorf("%s: %q is not a setting a data directory records", src.Remembered.File, name)
		}
	}
	var clashes []string
	s := Settings{Origins: map[string]string{}, raw: map[string]string{}}
	for _, d := range table {
		v, origin := d.def, "default"
		if mode == ModeDemo && d.demo != "" {
			v = d.demo
		}
		rv, remembered := src.Remembered.Values[d.name]
		if remembered {
			v, origin = rv, "data dir record "+src.Remembered.File
		}
		if fv, ok := file[d.name]; ok {
			v, origin = fv, "file "+src.FileName
		}
		if ev, ok := env[d.name]; ok {
			v, origin = ev, "env "+envName(d.name)
		}
		if fv, ok := src.Flags[d.name]; ok {
			v, origin = fv, "flag --"+flagName(d.name)
		}
		if remembered && conflicts(d.name, v, rv) {
			clashes = append(clashes, fmt.Sprintf("%s is %q (from %s), the data dir's is %q", d.name, v, origin, rv))
		}
		if d.path && v != "" {
			v = absPath(src.Dir, v)
		}
		if err := d.apply(&s, v); err != nil {
			return Settings{}, fmt.Errorf("setting %s (from %s): %w", d.name, origin, err)
		}
		s.Origins[d.name] = origin
		s.raw[d.name] = v
	}
	for i, st := range streams {
		if st.LogDir == "" {
			st.LogDir = filepath.Join(s.DataDir, "streams", st.ID)
		} else {
			st.LogDir = absPath(src.Dir, st.LogDir)
		}
		streams[i] = st
	}
	if len(clashes) > 0 {
		return Settings{}, &ConflictError{Remembered: src.Remembered, DataDir: s.DataDir, Conflicts: clashes}
	}
	s.Streams = streams
	if src.FileName != "" {
		s.ConfigFile = absPath(src.Dir, src.FileName)
	}
	return s, nil
}

func absPath(dir, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(dir, p)
}

func flagName(name string) string { return strings.ReplaceAll(name, "_", "-") }

func envName(name string) string { return EnvPrefix + strings.ToUpper(name) }

// parseFile reads the YAML file: a mapping of setting names to scalar values (a list for
// etcd_endpoints) and an optional "streams" list. Unknown keys are refused with their line.
func parseFile(name string, b []byte) (map[string]string, []StreamSettings, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, nil, nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, nil, fmt.Errorf("config file %s: %w", name, err)
	}
	if len(doc.Content) == 0 {
		return nil, nil, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, nil, fmt.Errorf("config file %s: line %d: want a mapping of setting names to values", name, root.Line)
	}
	values := map[string]string{}
	var streams []StreamSettings
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		key := k.Value
		if key == "streams" {
			ss, err := parseStreams(name, v)
			if err != nil {
				return nil, nil, err
			}
			streams = ss
			continue
		}
		if _, ok := lookup(key); !ok {
			return nil, nil, fmt.Errorf("config file %s: line %d: unknown setting %q", name, k.Line, key)
		}
		if _, dup := values[key]; dup {
			return nil, nil, fmt.Errorf("config file %s: line %d: setting %q given twice", name, k.Line, key)
		}
		s, err := scalarOrList(v)
		if err != nil {
			return nil, nil, fmt.Errorf("config file %s: line %d: setting %s: %w", name, v.Line, key, err)
		}
		values[key] = s
	}
	return values, streams, nil
}

func scalarOrList(v *yaml.Node) (string, error) {
	switch v.Kind {
	case yaml.ScalarNode:
		return v.Value, nil
	case yaml.SequenceNode:
		var items []string
		for _, it := range v.Content {
			if it.Kind != yaml.ScalarNode {
				return "", errors.New("a list of plain values is expected")
			}
			items = append(items, it.Value)
		}
		return strings.Join(items, ","), nil
	}
	return "", errors.New("a plain value is expected")
}

// streamKeys are the keys of a stream in the file.
var streamKeys = map[string]func(st *StreamSettings, v string) error{
	"id":      func(st *StreamSettings, v string) error { st.ID = v; return nil },
	"log_dir": func(st *StreamSettings, v string) error { st.LogDir = v; return nil },
	"epoch": func(st *StreamSettings, v string) error {
		n, err := strconv.ParseUint(v, 10, 64)
		switch {
		case err != nil:
			return fmt.Errorf("%q is not a positive integer", v)
		case n == 0:
			return fmt.Errorf("0: epochs start at 1 (leave the key out for 1)")
		}
		st.Epoch = n
		return nil
	},
	"retention_max_bytes": func(st *StreamSettings, v string) error {
		n, err := ParseSize(v)
		st.RetentionMaxBytes = n
		return err
	},
	"retention_max_age": func(st *StreamSettings, v string) error {
		d, err := ParseDuration(v)
		st.RetentionMaxAge = d
		return err
	},
	"fragment_target_size": func(st *StreamSettings, v string) error {
		n, err := ParseSize(v)
		st.FragmentTargetSize = n
		return err
	},
	"persist_threshold": func(st *StreamSettings, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%q is not an integer", v)
		}
		st.PersistThreshold = n
		return nil
	},
	"persist_interval": func(st *StreamSettings, v string) error {
		d, err := ParseDuration(v)
		st.PersistInterval = d
		return err
	},
	"follow": func(st *StreamSettings, v string) error {
		b, err := ParseBool(v)
		st.Follow = b
		if err != nil {
			return err
		}
		return nil
	},
	"fragment_max_age": func(st *StreamSettings, v string) error {
		d, err := ParseMaxAge(v) // off: no idle cut for this stream; left out: the node's
		st.FragmentMaxAge = d
		return err
	},
}

func parseStreams(name string, v *yaml.Node) ([]StreamSettings, error) {
	if v.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("config file %s: line %d: streams: want a list of streams", name, v.Line)
	}
	var out []StreamSettings
	for i, item := range v.Content {
		if item.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("config file %s: line %d: streams[%d]: want a mapping (id, log_dir, epoch, ...)", name, item.Line, i)
		}
		st := StreamSettings{Epoch: 1}
		for j := 0; j+1 < len(item.Content); j += 2 {
			k, val := item.Content[j], item.Content[j+1]
			set, ok := streamKeys[k.Value]
			if !ok {
				keys := make([]string, 0, len(streamKeys))
				for key := range streamKeys {
					keys = append(keys, key)
				}
				sort.Strings(keys)
				return nil, fmt.Errorf("config file %s: line %d: streams[%d]: unknown key %q (known: %s)", name, k.Line, i, k.Value, strings.Join(keys, ", "))
			}
			if val.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("config file %s: line %d: streams[%d].%s: a plain value is expected", name, val.Line, i, k.Value)
			}
			if err := set(&st, val.Value); err != nil {
				return nil, fmt.Errorf("config file %s: line %d: streams[%d].%s: %w", name, val.Line, i, k.Value, err)
			}
		}
		if st.ID == "" {
			return nil, fmt.Errorf("config file %s: line %d: streams[%d]: id is required", name, item.Line, i)
		}
		out = append(out, st)
	}
	return out, nil
}

// Flags collects the settings given on a command line. Register it on a FlagSet, parse,
// then Load.
type Flags struct {
	set    map[string]string
	config string
}

type flagValue struct {
	f    *Flags
	name string
	bool bool
}

func (v *flagValue) String() string {
	if v.f == nil {
		return ""
	}
	return v.f.set[v.name]
}

func (v *flagValue) Set(s string) error {
	v.f.set[v.name] = s
	return nil
}

func (v *flagValue) IsBoolFlag() bool { return v.bool }

// RegisterFlags adds a flag for every setting (--fragment-target-size for
// fragment_target_size) and --config to fs, and returns what they collect.
func RegisterFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{set: map[string]string{}}
	fs.StringVar(&f.config, "config", "", "YAML configuration file (also "+EnvPrefix+"CONFIG)")
	for _, d := range table {
		fs.Var(&flagValue{f: f, name: d.name, bool: d.bool}, flagName(d.name), d.help)
	}
	return f
}

// Set records a setting as if it had been given as a flag (for command-specific aliases
// such as `node gc --grace`).
func (f *Flags) Set(name, value string) { f.set[name] = value }

// Load reads the configuration file named by --config (or STREAMTIER_CONFIG) and resolves
// the settings of mode from the flags, environ and that file; relative paths are resolved
// against the current working directory.
func Load(mode Mode, f *Flags, environ []string) (Settings, error) {
	return LoadRemembering(mode, f, environ, nil)
}

// ConflictError refuses settings that name other backends than the ones a data directory
// recorded: its streams' data went there, and a command on other backends would find
// nothing (or a node would tier the local logs a second time elsewhere).
type ConflictError struct {
	Remembered Remembered
	DataDir    string
	Conflicts  []string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("data dir %s was tiered to %s (recorded in %s), but %s: give the data dir's settings or leave them out (they are then taken from the record), "+
		"or use another --data-dir; if the data moved, remove %s",
		e.DataDir, e.Remembered.Where, e.Remembered.File, strings.Join(e.Conflicts, "; "), e.Remembered.File)
}

// LoadRemembering is Load, then, when remember finds a record in the resolved data
// directory, Load again with it as the Remembered source (the data directory is only known
// once the first pass resolved it). A nil remember reads no record.
func LoadRemembering(mode Mode, f *Flags, environ []string, remember func(dataDir string) (Remembered, bool, error)) (Settings, error) {
	wd, err := os.Getwd()
	if err != nil {
		return Settings{}, fmt.Errorf("working directory: %w", err)
	}
	src := Sources{Flags: f.set, Env: environ, Dir: wd}
	name := f.config
	if name == "" {
		for _, kv := range environ {
			if v, ok := strings.CutPrefix(kv, EnvPrefix+"CONFIG="); ok {
				name = v
			}
		}
	}
	if name != "" {
		b, err := os.ReadFile(name)
		if err != nil {
			return Settings{}, fmt.Errorf("config file: %w", err)
		}
		src.File, src.FileName = b, name
	}
	if remember != nil {
		// A first pass finds the data directory; the whole is validated only with the
		// record (a setting such as s3_access_key is valid only with the recorded bucket).
		s, err := resolveSources(mode, src)
		if err != nil {
			return Settings{}, err
		}
		rem, found, err := remember(s.DataDir)
		if err != nil {
			return Settings{}, err
		}
		if found {
			src.Remembered = rem
		}
	}
	return Resolve(mode, src)
}
