package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/streamtier/streamtier/netport"
	"github.com/streamtier/streamtier/s3io"
)

// Region is the region the test servers sign for.
const Region = "us-east-1"

// startTimeout bounds how long a server may take to answer its health check.
const startTimeout = 30 * time.Second

// stopTimeout bounds a graceful stop before the process is killed.
const stopTimeout = 10 * time.Second

// Options configure a test server.
type Options struct {
	TLS bool // serve https with a certificate from a throwaway CA (Server.CAFile)
}

// Server is a running versitygw process with a bucket.
type Server struct {
	Endpoint  string // http(s)://127.0.0.1:port
	Addr      string // 127.0.0.1:port
	AccessKey string
	SecretKey string
	Bucket    string // created at start
	CAFile    string // PEM of the CA to trust, TLS only
	DataDir   string // the posix backend's root (a bucket is a directory in it)

	ca     *testCA
	cmd    *exec.Cmd
	exited chan struct{}
	output *syncBuffer
	stop   sync.Once
}

// Start runs a versitygw server (posix backend in a temp directory) on a free loopback
// port, waits until it answers, creates a fresh bucket and stops the server on t.Cleanup.
// The executable is built once and cached (see Binary).
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	s, err := Launch(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	s.Bucket = s.newBucket(t)
	return s
}

// Launch runs a versitygw server as Start does, for programs that have no testing.TB (a
// soak harness): its files go under dir, which must exist and which the caller removes;
// no bucket is created (see CreateBucket), and the caller stops the server with Stop.
func Launch(dir string, opts Options) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	s := &Server{
		AccessKey: "streamtier-test-" + randomHex(4),
		SecretKey: randomHex(20),
		DataDir:   filepath.Join(dir, "data"),
	}
	if err := os.Mkdir(s.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("s3test: %w", err)
	}
	if opts.TLS {
		if s.ca, err = newTestCA(dir); err != nil {
			return nil, fmt.Errorf("s3test: TLS certificates: %w", err)
		}
		s.CAFile = s.ca.CAFile
	}
	// A port picked free can be taken before the server binds it; try a few.
	for attempt := 0; ; attempt++ {
		err = s.launch(bin)
		if err == nil || attempt == 4 {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("s3test: start versitygw: %w", err)
	}
	return s, nil
}

func (s *Server) launch(bin string) error {
	addr, err := netport.Free("127.0.0.1")
	if err != nil {
		return err
	}
	scheme := "http"
	args := []string{"--port", addr, "--health", "/healthz", "--quiet", "--keep-alive"}
	if s.ca != nil {
		scheme = "https"
		args = append(args, "--cert", s.ca.CertFile, "--key", s.ca.KeyFile)
	}
	args = append(args, "posix", s.DataDir)
	cmd := exec.Command(bin, args...)
	cmd.Dir = s.DataDir
	cmd.Env = []string{
		"ROOT_ACCESS_KEY_ID=" + s.AccessKey,
		"ROOT_SECRET_ACCESS_KEY=" + s.SecretKey,
		"VGW_REGION=" + Region,
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
	}
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { // owned by the Server: ends when the process does (Stop ends it)
		cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited, s.output = cmd, exited, out
	s.Addr, s.Endpoint = addr, scheme+"://"+addr
	if err := s.waitHealthy(); err != nil {
		s.kill()
		return fmt.Errorf("%w\n%s", err, out.String())
	}
	return nil
}

// waitHealthy polls the health endpoint until it answers 200, the process exits or the
// start timeout passes. Polling is the only way to learn that another process listens.
func (s *Server) waitHealthy() error {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: s.tlsConfig()}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(startTimeout)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		resp, err := client.Get(s.Endpoint + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.exited:
			return fmt.Errorf("versitygw exited before answering on %s", s.Addr)
		case <-time.After(wait):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("versitygw did not answer on %s within %v (last error: %v)", s.Addr, startTimeout, err)
		}
	}
}

func (s *Server) tlsConfig() *tls.Config {
	if s.ca == nil {
		return nil
	}
	return &tls.Config{RootCAs: s.ca.Pool}
}

// Config is an s3io configuration for the server's bucket, with short timeouts.
func (s *Server) Config() s3io.Config {
	return s.configFor(s.Endpoint, s.Bucket)
}

func (s *Server) configFor(endpoint, bucket string) s3io.Config {
	return s3io.Config{
		Endpoint:        endpoint,
		Region:          Region,
		Bucket:          bucket,
		PathStyle:       true,
		AccessKey:       s.AccessKey,
		SecretKey:       s.SecretKey,
		CAFile:          s.CAFile,
		RequestTimeout:  10 * time.Second,
		TransferTimeout: 60 * time.Second,
	}
}

// NewBucket creates another fresh bucket on the server and returns its configuration.
func (s *Server) NewBucket(t testing.TB) s3io.Config {
	t.Helper()
	return s.configFor(s.Endpoint, s.newBucket(t))
}

func (s *Server) newBucket(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	bucket, err := s.CreateBucket(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return bucket
}

// CreateBucket creates a fresh bucket with a random name on the server and returns it.
func (s *Server) CreateBucket(ctx context.Context) (string, error) {
	bucket := "test-" + randomHex(6)
	st, err := s3io.NewStore(ctx, s.configFor(s.Endpoint, bucket))
	if err != nil {
		return "", fmt.Errorf("s3test: %w", err)
	}
	if err := st.EnsureBucket(ctx); err != nil {
		return "", fmt.Errorf("s3test: create bucket %s: %w\n%s", bucket, err, s.output.String())
	}
	return bucket, nil
}

// Stop stops the server (SIGTERM, then SIGKILL after a grace period) and waits for it.
// Tests may call it early, to see refused connections; it is also registered on Cleanup.
func (s *Server) Stop() {
	s.stop.Do(func() {
		if s.cmd == nil || s.cmd.Process == nil {
			return
		}
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(stopTimeout):
			s.kill()
		}
	})
}

func (s *Server) kill() {
	s.cmd.Process.Kill()
	<-s.exited
}

// Output is what the server printed so far, for failure messages.
func (s *Server) Output() string { return s.output.String() }

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// syncBuffer collects process output from two pipes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 1<<20 { // keep the start, which says why it failed
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.TrimSpace(b.buf.String())
}
