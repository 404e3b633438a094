package metadata_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/streamtier/streamtier/metadata"
	"github.com/streamtier/streamtier/metadata/etcdtest"
)

func TestClientConfigValidate(t *testing.T) {
	ok := []metadata.ClientConfig{
		{Endpoints: []string{"127.0.0.1:2379"}},
		{Endpoints: []string{"http://a:1", "http://b:2"}},
		{Endpoints: []string{"https://etcd.example:2379"}, CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "k.pem"},
		{Endpoints: []string{"unix:///run/etcd.sock"}},
		{Endpoints: []string{"h:1"}, Username: "u", Password: "p", DialTimeout: time.Second},
	}
	for _, c := range ok {
		if err := c.Validate(); err != nil {
			t.Errorf("Validate(%v) = %v", c, err)
		}
	}
	for _, tc := range []struct {
		c    metadata.ClientConfig
		want string
	}{
		{metadata.ClientConfig{}, "endpoints: none given"},
		{metadata.ClientConfig{Endpoints: []string{""}}, "endpoints[0]"},
		{metadata.ClientConfig{Endpoints: []string{"h:1", " h:2"}}, "endpoints[1]"},
		{metadata.ClientConfig{Endpoints: []string{"localhost"}}, "missing port"},
		{metadata.ClientConfig{Endpoints: []string{"ftp://h:1"}}, `scheme "ftp"`},
		{metadata.ClientConfig{Endpoints: []string{"http://h:1/path"}}, "only scheme://host:port"},
		{metadata.ClientConfig{Endpoints: []string{"http://user:pw@h:1"}}, "only scheme://host:port"},
		{metadata.ClientConfig{Endpoints: []string{"unix://"}}, "no socket path"},
		{metadata.ClientConfig{Endpoints: []string{"http://a:1", "https://b:2"}}, "mix plain"},
		{metadata.ClientConfig{Endpoints: []string{"h:1"}, CertFile: "c.pem"}, "certFile and keyFile"},
		{metadata.ClientConfig{Endpoints: []string{"http://h:1"}, CAFile: "ca.pem"}, "TLS files are given"},
		{metadata.ClientConfig{Endpoints: []string{"h:1"}, Username: "u"}, "username and password"},
		{metadata.ClientConfig{Endpoints: []string{"h:1"}, Password: "p"}, "username and password"},
		{metadata.ClientConfig{Endpoints: []string{"h:1"}, DialTimeout: -1}, "dialTimeout"},
	} {
		err := tc.c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%v) = %v, want an error saying %q", tc.c, err, tc.want)
		}
	}
}

func TestClientConfigNeverShowsPassword(t *testing.T) {
	const secret = "hunter2-secret"
	c := metadata.ClientConfig{Endpoints: []string{"127.0.0.1:1"}, Username: "u", Password: secret}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%v %+v %#v %s", c, c, c, c), string(b), fmt.Sprintf("%v", &c)} {
		if strings.Contains(s, secret) {
			t.Fatalf("password shown in %q", s)
		}
	}
	// Nor in the error from an unreachable etcd.
	ctx := testCtx(t, 5*time.Second)
	c.Endpoints, c.DialTimeout = []string{closedPort(t)}, 200*time.Millisecond
	_, err = metadata.NewClient(ctx, c)
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("error %v (it must exist and not show the password)", err)
	}
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestUnreachableEtcdIsRetriableWithinDeadline(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	dead := closedPort(t)
	const timeout = 300 * time.Millisecond
	start := time.Now()
	_, err := metadata.NewClient(ctx, metadata.ClientConfig{Endpoints: []string{dead}, DialTimeout: timeout})
	if err == nil || !metadata.IsRetriable(err) || !strings.Contains(err.Error(), dead) {
		t.Fatalf("NewClient to %s: %v, want a retriable error naming the endpoint", dead, err)
	}
	// The bound is the dial timeout plus generous slack, not a measured speed.
	if waited := time.Since(start); waited > timeout+3*time.Second {
		t.Fatalf("NewClient took %v with a %v dial timeout", waited, timeout)
	}

	// An operation on a client whose etcd went away honours the caller's deadline.
	e := etcdtest.Start(t)
	cli, err := metadata.NewClient(ctx, metadata.ClientConfig{Endpoints: e.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	s := metadata.NewStore(cli, "")
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	for name, op := range map[string]func(context.Context) error{
		"ReadManifest": func(ctx context.Context) error { _, _, _, err := s.ReadManifest(ctx, "s1"); return err },
		"Persist": func(ctx context.Context) error {
			_, err := s.Persist(ctx, "s1", 1, 0, metadata.ManifestRecord{Epoch: 1, FirstTimestamp: -1})
			return err
		},
		"HasAnchor": func(ctx context.Context) error { _, err := s.HasAnchor(ctx, "s1", true); return err },
		"Anchor":    func(ctx context.Context) error { return s.Anchor(ctx, "s1") },
	} {
		octx, cancel := context.WithTimeout(ctx, timeout)
		start := time.Now()
		err := op(octx)
		cancel()
		if err == nil || !metadata.IsRetriable(err) {
			t.Errorf("%s with etcd down: %v, want a retriable error", name, err)
		}
		if waited := time.Since(start); waited > timeout+3*time.Second {
			t.Errorf("%s took %v with a %v deadline", name, waited, timeout)
		}
	}
	// The caller's own cancellation is not retriable.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, _, err := s.ReadManifest(cctx, "s1"); err == nil || metadata.IsRetriable(err) {
		t.Fatalf("canceled read: %v, want a non-retriable error", err)
	}
}

func TestNewClientWithPassword(t *testing.T) {
	e := etcdtest.Start(t)
	ctx := testCtx(t, 20*time.Second)
	root := e.Client()
	const pw = "s3cr3t-root"
	for _, step := range []func() error{
		func() error { _, err := root.RoleAdd(ctx, "root"); return err },
		func() error { _, err := root.UserAdd(ctx, "root", pw); return err },
		func() error { _, err := root.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := root.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	cli, err := metadata.NewClient(ctx, metadata.ClientConfig{Endpoints: e.Endpoints(), Username: "root", Password: pw})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if err := metadata.NewStore(cli, "").Anchor(ctx, "s1"); err != nil {
		t.Fatalf("anchor as root: %v", err)
	}
	const wrong = "not-the-password"
	_, err = metadata.NewClient(ctx, metadata.ClientConfig{Endpoints: e.Endpoints(), Username: "root", Password: wrong})
	if err == nil || metadata.IsRetriable(err) || strings.Contains(err.Error(), wrong) {
		t.Fatalf("wrong password: %v, want a non-retriable error that does not show the password", err)
	}
}

func TestNewClientTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCA(t)
	writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", ca.Raw)
	issue(t, dir, "server", ca, caKey, x509.ExtKeyUsageServerAuth)
	issue(t, dir, "client", ca, caKey, x509.ExtKeyUsageClientAuth)

	addr := closedPort(t)
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = "tls", filepath.Join(dir, "data")
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(etcdtest.Logger())
	cfg.TickMs, cfg.ElectionMs = 10, 100
	cfg.UnsafeNoFsync = true
	curl := url.URL{Scheme: "https", Host: addr}
	purl := url.URL{Scheme: "http", Host: closedPort(t)}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{curl}, []url.URL{curl}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{purl}, []url.URL{purl}
	cfg.InitialCluster = "tls=" + purl.String()
	cfg.ClientTLSInfo.CertFile = filepath.Join(dir, "server.pem")
	cfg.ClientTLSInfo.KeyFile = filepath.Join(dir, "server-key.pem")
	cfg.ClientTLSInfo.TrustedCAFile = filepath.Join(dir, "ca.pem")
	cfg.ClientTLSInfo.ClientCertAuth = true
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	select {
	case <-srv.Server.ReadyNotify():
	case <-time.After(20 * time.Second):
		t.Fatal("TLS member not ready")
	}

	ctx := testCtx(t, 20*time.Second)
	good := metadata.ClientConfig{
		Endpoints: []string{"https://" + addr}, CAFile: filepath.Join(dir, "ca.pem"),
		CertFile: filepath.Join(dir, "client.pem"), KeyFile: filepath.Join(dir, "client-key.pem"),
	}
	cli, err := metadata.NewClient(ctx, good)
	if err != nil {
		t.Fatal(err)
	}
	if err := metadata.NewStore(cli, "").Anchor(ctx, "s1"); err != nil {
		t.Fatalf("anchor over TLS: %v", err)
	}
	cli.Close()

	noCert := good
	noCert.CertFile, noCert.KeyFile, noCert.DialTimeout = "", "", 500*time.Millisecond
	if _, err := metadata.NewClient(ctx, noCert); err == nil {
		t.Fatal("a client without a certificate was let in")
	}
	missing := good
	missing.CAFile = filepath.Join(dir, "nope.pem")
	if _, err := metadata.NewClient(ctx, missing); err == nil || !strings.Contains(err.Error(), "caFile") || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing CA file: %v", err)
	}
	notPEM := good
	notPEM.CAFile = filepath.Join(dir, "not-a-cert.pem")
	if err := os.WriteFile(notPEM.CAFile, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := metadata.NewClient(ctx, notPEM); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("CA file without a certificate: %v", err)
	}
}

func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return ca, key
}

func issue(t *testing.T, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, usage x509.ExtKeyUsage) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, name+".pem"), "CERTIFICATE", der)
	writePEM(t, filepath.Join(dir, name+"-key.pem"), "EC PRIVATE KEY", kb)
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
