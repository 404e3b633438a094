package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/streamtier/streamtier/admin"
	"github.com/streamtier/streamtier/backends"
)

// BuildNode builds the node binary (without the race detector: the soak wants the node
// fast) into dir and returns its path; ctx bounds the build.
func BuildNode(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "node")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/streamtier/streamtier/cmd/node")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the node binary: %v\n%s", err, out)
	}
	return bin, nil
}

// nodeProc is one run of the node binary (`node run --config`).
type nodeProc struct {
	cmd     *exec.Cmd
	done    chan struct{}
	logPath string
	logFile *os.File
	client  admin.Client
	started time.Time
}

// nodeEnv is the environment of node processes: none of the developer's STREAMTIER_ settings.
func nodeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STREAMTIER_") {
			env = append(env, kv)
		}
	}
	return env
}

// startNode starts `node run` and waits until its admin server answers; a process that
// exits during its start (etcd still electing a leader, say) is started again until
// timeout.
func (w *world) startNode(ctx context.Context, timeout time.Duration) (*nodeProc, error) {
	deadline := time.Now().Add(timeout)
	var lastErr error
	for attempt := 0; time.Now().Before(deadline); attempt++ {
		w.runs++
		logPath := filepath.Join(w.dir, "node-logs", fmt.Sprintf("run-%05d.log", w.runs))
		f, err := os.Create(logPath)
		if err != nil {
			return nil, err
		}
		p := &nodeProc{done: make(chan struct{}), logPath: logPath, logFile: f, started: time.Now()}
		p.cmd = exec.Command(w.nodeBin, "run", "--config", w.nodeConfig)
		p.cmd.Env = nodeEnv()
		p.cmd.Stdout, p.cmd.Stderr = f, f
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the harness
		if err := p.cmd.Start(); err != nil {
			f.Close()
			return nil, fmt.Errorf("start node: %w", err)
		}
		go func() { // owned by p: the process ending ends it
			p.cmd.Wait()
			p.logFile.Close()
			close(p.done)
		}()
		if err := p.awaitReady(ctx, w.nodeData, deadline); err == nil {
			return p, nil
		} else {
			lastErr = err
		}
		p.kill()
		w.hist.Add(w.cycle, "node-start-failed", "", false, "run %d: %v", w.runs, lastErr)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond): // the backends are coming back: try again shortly
		}
	}
	return nil, fmt.Errorf("node did not start within %v: %w", timeout, lastErr)
}

// awaitReady polls the node's run file and health endpoint (the node offers no event).
func (p *nodeProc) awaitReady(ctx context.Context, dataDir string, deadline time.Time) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		info, found, err := backends.ReadRunInfo(dataDir)
		if err == nil && found && info.PID == p.cmd.Process.Pid {
			p.client = admin.Client{Base: info.AdminURL}
			hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := p.client.Healthy(hctx)
			cancel()
			if err == nil {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("node exited during its start (%s): %s", p.cmd.ProcessState, tail(p.logPath, 5))
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node not ready: %s", tail(p.logPath, 5))
		}
	}
}

// kill sends SIGKILL and waits for the process to end.
func (p *nodeProc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// term sends SIGTERM and waits up to timeout for a clean stop, then kills; it returns the
// exit code (-1 when it had to kill).
func (p *nodeProc) term(timeout time.Duration) int {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		p.kill()
		return -1
	}
}

// crashed reports what the process's output shows of a panic, a fatal error or a race.
func (p *nodeProc) crashed() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	for _, bad := range []string{"panic:", "fatal error:", "DATA RACE"} {
		if i := bytes.Index(b, []byte(bad)); i >= 0 {
			end := min(len(b), i+2000)
			return string(b[i:end])
		}
	}
	return ""
}

// tail is the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// command runs a node command to completion (bounded by timeout) and returns its exit
// code and output.
func (w *world) command(ctx context.Context, timeout time.Duration, args ...string) (int, string, string, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, w.nodeBin, args...)
	cmd.Env = nodeEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := -1
	if cmd.ProcessState != nil {
		code = cmd.ProcessState.ExitCode()
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return code, out.String(), errb.String(), fmt.Errorf("node %v: %w", args, err)
	}
	return code, out.String(), errb.String(), nil
}
