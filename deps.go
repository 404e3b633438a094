//go:build tools

// Package streamtier pins the modules the project is built on, so that go.mod keeps them
// while the packages that use them are written.
package streamtier

import (
	_ "github.com/asynkron/protoactor-go/actor"
	_ "github.com/asynkron/protoactor-go/remote"
	_ "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	_ "github.com/aws/aws-sdk-go-v2/config"
	_ "github.com/aws/aws-sdk-go-v2/service/s3"
	_ "github.com/cockroachdb/datadriven"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/rs/zerolog"
	_ "github.com/versity/versitygw/backend/meta"
	_ "github.com/versity/versitygw/backend/posix"
	_ "github.com/versity/versitygw/embedgw"
	_ "go.etcd.io/etcd/client/v3"
	_ "go.etcd.io/etcd/server/v3/embed"
	_ "go.uber.org/goleak"
	_ "gopkg.in/yaml.v3"
	_ "pgregory.net/rapid"
)
