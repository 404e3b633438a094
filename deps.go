//go:build tools

// Package streamtier pins modules that later packages use, so go.mod keeps them.
package streamtier

import (
	_ "github.com/cockroachdb/datadriven"
	_ "go.uber.org/goleak"
	_ "gopkg.in/yaml.v3"
	_ "pgregory.net/rapid"
)
