package metadata

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// DefaultDialTimeout bounds connecting (and authenticating) to etcd when ClientConfig leaves
// DialTimeout zero.
const DefaultDialTimeout = 5 * time.Second

// ClientConfig is how to reach an external etcd cluster. Its String, GoString and JSON forms
// redact the password, so logging the configuration never leaks it.
type ClientConfig struct {
	// Endpoints: host:port, http://host:port, https://host:port, unix://path or unixs://path.
	Endpoints []string
	// CAFile verifies the servers' certificates (PEM); empty uses the system roots for https.
	CAFile string
	// CertFile and KeyFile are the client certificate and key (PEM), for client-cert auth.
	CertFile, KeyFile string
	// Username and Password authenticate with etcd's auth (both or neither).
	Username, Password string
	// DialTimeout bounds connecting and authenticating (default DefaultDialTimeout).
	DialTimeout time.Duration
	// Logger receives the etcd client's own logs; nil discards them (every failure reaches
	// the caller as an error anyway).
	Logger *zap.Logger
}

func (c ClientConfig) redacted() map[string]any {
	pw := ""
	if c.Password != "" {
		pw = "<redacted>"
	}
	return map[string]any{
		"endpoints": c.Endpoints, "caFile": c.CAFile, "certFile": c.CertFile, "keyFile": c.KeyFile,
		"username": c.Username, "password": pw, "dialTimeout": c.DialTimeout.String(),
	}
}

// String describes the configuration with the password redacted.
func (c ClientConfig) String() string {
	b, _ := json.Marshal(c.redacted())
	return "etcd client " + string(b)
}

// GoString is String, so that %#v does not print the password either.
func (c ClientConfig) GoString() string { return c.String() }

// MarshalJSON encodes the configuration with the password redacted.
func (c ClientConfig) MarshalJSON() ([]byte, error) { return json.Marshal(c.redacted()) }

// usesTLS reports whether the endpoints or the files ask for TLS.
func (c ClientConfig) usesTLS() bool {
	if c.CAFile != "" || c.CertFile != "" {
		return true
	}
	for _, ep := range c.Endpoints {
		if strings.HasPrefix(ep, "https://") || strings.HasPrefix(ep, "unixs://") {
			return true
		}
	}
	return false
}

// Validate checks the configuration without I/O and names the first setting that is wrong.
func (c ClientConfig) Validate() error {
	if len(c.Endpoints) == 0 {
		return errors.New("etcd client: endpoints: none given")
	}
	plain, secure := false, false
	for i, ep := range c.Endpoints {
		s, err := endpointScheme(ep)
		if err != nil {
			return fmt.Errorf("etcd client: endpoints[%d] %q: %w", i, ep, err)
		}
		switch s {
		case "http", "unix":
			plain = true
		case "https", "unixs":
			secure = true
		}
	}
	if plain && secure {
		return errors.New("etcd client: endpoints mix plain (http, unix) and TLS (https, unixs) schemes")
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return errors.New("etcd client: certFile and keyFile must be given together")
	}
	if plain && (c.CAFile != "" || c.CertFile != "") {
		return errors.New("etcd client: TLS files are given but the endpoints are plain http:// or unix://")
	}
	if (c.Username == "") != (c.Password == "") {
		return errors.New("etcd client: username and password must be given together")
	}
	if c.DialTimeout < 0 {
		return fmt.Errorf("etcd client: dialTimeout %v is negative", c.DialTimeout)
	}
	return nil
}

// endpointScheme checks one endpoint's form and returns its scheme ("" for bare host:port).
func endpointScheme(ep string) (string, error) {
	if strings.TrimSpace(ep) != ep || ep == "" {
		return "", errors.New("empty or surrounded by spaces")
	}
	for _, s := range []string{"unix", "unixs"} {
		if rest, ok := strings.CutPrefix(ep, s+"://"); ok {
			if rest == "" {
				return "", errors.New("no socket path")
			}
			return s, nil
		}
	}
	hostport, scheme := ep, ""
	if strings.Contains(ep, "://") {
		u, err := url.Parse(ep)
		if err != nil {
			return "", err
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return "", fmt.Errorf("scheme %q (want http, https, unix or unixs)", u.Scheme)
		}
		if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return "", errors.New("only scheme://host:port is allowed")
		}
		hostport, scheme = u.Host, u.Scheme
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", err
	}
	if host == "" || port == "" {
		return "", errors.New("want host:port")
	}
	return scheme, nil
}

// tlsConfig loads the CA and client certificate; file errors name the file, never contents.
func (c ClientConfig) tlsConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("etcd client: caFile: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcd client: caFile %s: no PEM certificate in it", c.CAFile)
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("etcd client: certFile %s / keyFile %s: %w", c.CertFile, c.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// NewClient validates c, connects and checks that an endpoint answers within ctx and the dial
// timeout, so that a wrong configuration fails at start with a clear error. Unreachable
// endpoints give an error for which IsRetriable is true. The caller closes the client.
func NewClient(ctx context.Context, c ClientConfig) (*clientv3.Client, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	lg := c.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	cfg := clientv3.Config{
		Endpoints:            c.Endpoints,
		DialTimeout:          c.DialTimeout,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		Username:             c.Username,
		Password:             c.Password,
		Logger:               lg,
		// Reconnect quickly after etcd comes back (gRPC's default waits up to 2 minutes).
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: c.DialTimeout,
		})},
	}
	if c.usesTLS() {
		tc, err := c.tlsConfig()
		if err != nil {
			return nil, err
		}
		cfg.TLS = tc
	}
	where := strings.Join(c.Endpoints, ",")
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd client %s: %w", where, err)
	}
	if err := probe(ctx, cli, c.DialTimeout); err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd client %s: %w", where, err)
	}
	return cli, nil
}

// probe asks every endpoint for its status at once and succeeds when one answers (Status
// needs no permission, so it also works for users limited to a prefix).
func probe(ctx context.Context, cli *clientv3.Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	eps := cli.Endpoints()
	results := make(chan error, len(eps))
	for _, ep := range eps {
		go func() {
			_, err := cli.Status(ctx, ep)
			if err != nil {
				err = fmt.Errorf("%s: %w", ep, err)
			}
			results <- err
		}()
	}
	var errs []error
	answered := false
	for range eps { // wait for every probe, so none outlives the call
		if err := <-results; err != nil {
			errs = append(errs, err)
			continue
		}
		answered = true
		cancel() // one answered: stop the others
	}
	if answered {
		return nil
	}
	return fmt.Errorf("no endpoint answered: %w", errors.Join(errs...))
}
