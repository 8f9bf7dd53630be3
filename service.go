package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containers/podman/v5/pkg/bindings"
)

// service is the launcher's private `podman system service`. If it dies
// while a session uses it, the session ends (died is closed) and a
// replacement starts on the same socket for teardown: a connection dials
// the socket anew for every request, so the old one works again.
type service struct {
	podman, sock string
	out          io.Writer // where a death in use is told

	mu        sync.Mutex
	proc      *os.Process
	exited    chan struct{} // closed when proc has ended
	stderr    *strings.Builder
	connected bool // the session uses it: a death now is not a start-up failure
	stopping  bool

	died     chan struct{} // closed when the first service died in use
	diedErr  error
	replaced chan struct{} // closed when the replacement answers, or could not start
}

// openService starts a private podman API service for a session or a
// command, in a temp dir of its own under runtimeDir (never the one mounted
// into the router), and pushes what undoes it onto undo. The context it
// returns talks to the service and ends with ctx.
func openService(ctx context.Context, set settings, runtimeDir, name string, trace *tracer, undo *cleanupStack) (context.Context, engine, error) {
	apiDir, err := os.MkdirTemp(runtimeDir, name+"-api.")
	if err != nil {
		return nil, nil, refused(err)
	}
	undo.push("the API service's dir "+apiDir, func(context.Context) error { return os.RemoveAll(apiDir) })
	done := trace.step("podman service start")
	conn, eng, stop, err := startService(ctx, set.podman, apiDir, trace.out)
	done()
	undo.push("the podman API service", func(context.Context) error {
		defer trace.step("podman service stop")()
		stop()
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if trace.on {
		eng = tracedEngine{eng, trace}
	}
	opCtx, cancel := context.WithCancel(conn)
	context.AfterFunc(ctx, cancel)
	return opCtx, eng, nil
}

// withCommandService runs fn for a command other than a session (gc,
// build, log) against a private API service of its own, named like a
// session so that what a killed one leaves is collected like a session's.
// A signal makes it errInterrupted.
func withCommandService(ctx context.Context, set settings, out io.Writer, fn func(ctx context.Context, eng engine, runtimeDir, name string) error) error {
	runtimeDir, err := set.requireRuntimeDir()
	if err != nil {
		return err
	}
	name := newSessionName()
	var undo cleanupStack
	opCtx, eng, err := openService(ctx, set, runtimeDir, name, newTracer(set.trace, out), &undo)
	if err == nil {
		err = fn(opCtx, eng, runtimeDir, name)
	}
	if uerr := undo.unwind(context.Background()); uerr != nil && err == nil {
		err = uerr
	}
	if ctx.Err() != nil {
		return errInterrupted
	}
	return err
}

// startService runs a private `podman system service` on a socket in dir and
// connects to it; ctx's end gives up the wait for it to answer. The
// returned stop func is never nil and must be called even on error.
func startService(ctx context.Context, podman, dir string, out io.Writer) (context.Context, engine, func(), error) {
	s := &service{
		podman:   podman,
		out:      out,
		sock:     filepath.Join(dir, "podman.sock"),
		died:     make(chan struct{}),
		replaced: make(chan struct{}),
	}
	if err := s.spawn(); err != nil {
		return nil, nil, func() {}, err
	}
	conn, err := s.connect(ctx, 20*time.Second)
	if err != nil {
		return nil, nil, s.stop, err
	}
	if err := checkServiceVersion(conn); err != nil {
		return nil, nil, s.stop, err
	}
	s.mu.Lock()
	s.connected = true
	exited := s.exited
	s.mu.Unlock()
	go s.watch(exited)
	return conn, serviceEngine{podmanEngine{}, s}, s.stop, nil
}

func (s *service) spawn() error {
	cmd := exec.Command(s.podman, "system", "service", "--time=0", "unix://"+s.sock)
	stderr := &strings.Builder{}
	cmd.Stderr = &limitedWriter{w: stderr, n: 4096}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// A terminal's Ctrl-C goes to the foreground process group; the
		// service must outlive it so that teardown can still talk to it.
		Setpgid: true,
		// If the launcher is killed, the service must not linger.
		Pdeathsig: syscall.SIGTERM,
	}
	if err := cmd.Start(); err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("podman not found (%s): install podman %s or newer (for example: apt-get install podman), or point AGENT_SANDBOX_PODMAN at it", s.podman, minPodman)
		}
		return fmt.Errorf("cannot start the podman service %s: %w", s.podman, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.proc, s.exited, s.stderr = cmd.Process, exited, stderr
	s.mu.Unlock()
	return nil
}

// tooOld is how the bindings refuse a service older than their minimum.
var tooOld = regexp.MustCompile(`server API version is too old.* server "([^"]+)"`)

// connect waits for the current process to answer on the socket.
func (s *service) connect(ctx context.Context, timeout time.Duration) (context.Context, error) {
	s.mu.Lock()
	exited, stderr := s.exited, s.stderr
	s.mu.Unlock()
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(s.sock); err == nil {
			conn, err := bindings.NewConnection(context.Background(), "unix://"+s.sock)
			if err == nil {
				return conn, nil
			}
			if m := tooOld.FindStringSubmatch(err.Error()); m != nil {
				return nil, fmt.Errorf("podman %s is too old: agent-sandbox needs podman %s or newer", m[1], minPodman)
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("cannot connect to the podman service: %w", err)
			}
		}
		select {
		case <-exited:
			return nil, fmt.Errorf("the podman service exited: %s", strings.TrimSpace(stderr.String()))
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the podman service did not start within %s: check `podman info`", timeout)
		}
	}
}

// watch notices the service dying in use and starts its replacement.
func (s *service) watch(exited <-chan struct{}) {
	<-exited
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return
	}
	msg := strings.TrimSpace(s.stderr.String())
	if msg == "" {
		msg = "(it wrote nothing)"
	}
	s.diedErr = fmt.Errorf("the private podman API service (pid %d) stopped; the session ends rather than run without it. Its output: %s", s.proc.Pid, msg)
	close(s.died)
	s.mu.Unlock()
	defer close(s.replaced)
	_ = os.Remove(s.sock)
	if err := s.spawn(); err != nil {
		say(s.out, "cannot start a podman service for teardown: %v", err)
		return
	}
	if _, err := s.connect(context.Background(), 15*time.Second); err != nil {
		say(s.out, "cannot start a podman service for teardown: %v", err)
	}
}

func (s *service) stop() {
	s.mu.Lock()
	s.stopping = true
	proc, exited := s.proc, s.exited
	s.mu.Unlock()
	if proc == nil {
		return
	}
	_ = proc.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = proc.Kill()
		<-exited
	}
	_ = os.Remove(s.sock)
}

func (s *service) isDead() bool {
	select {
	case <-s.died:
		return true
	default:
		return false
	}
}

// lost reports whether err came from the service going away; if so it
// waits for the replacement, so that the call can be made again.
func (s *service) lost(err error) bool {
	if err == nil || !isConnError(err) {
		return false
	}
	select {
	case <-s.died:
	case <-time.After(2 * time.Second):
		return false
	}
	select {
	case <-s.replaced:
	case <-time.After(20 * time.Second):
	}
	return true
}

func isConnError(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ENOENT) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	msg := err.Error()
	for _, s := range []string{"connection refused", "connection reset", "no such file or directory", "EOF", "broken pipe"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// serviceEngine ends the session with a clear error when the service dies,
// and makes teardown calls again through its replacement.
type serviceEngine struct {
	engine
	s *service
}

// ContainerRun ends when the service dies: the bindings retry a broken
// request, which would reach the replacement and leave the agent running
// with its terminal gone.
func (e serviceEngine) ContainerRun(ctx context.Context, name string, tty bool) (int, error) {
	rctx, cancel := e.untilDeath(ctx)
	defer cancel()
	code, err := e.engine.ContainerRun(rctx, name, tty)
	if e.s.lost(err) || e.s.isDead() {
		return code, e.s.diedErr
	}
	return code, err
}

func (e serviceEngine) ContainerWait(ctx context.Context, name string) error {
	wctx, cancel := e.untilDeath(ctx)
	defer cancel()
	err := e.engine.ContainerWait(wctx, name)
	if e.s.lost(err) || e.s.isDead() {
		return e.s.diedErr
	}
	return err
}

// untilDeath is ctx, cancelled also when the service dies.
func (e serviceEngine) untilDeath(ctx context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-e.s.died:
			cancel()
		case <-c.Done():
		}
	}()
	return c, cancel
}

// again makes a teardown call once more through the replacement when the
// first attempt failed because the service died.
func (e serviceEngine) again(call func() error) error {
	err := call()
	if e.s.lost(err) {
		err = call()
	}
	return err
}

func (e serviceEngine) ContainerStop(ctx context.Context, name string, timeout time.Duration) error {
	return e.again(func() error { return e.engine.ContainerStop(ctx, name, timeout) })
}

func (e serviceEngine) ContainerRemove(ctx context.Context, name string) error {
	return e.again(func() error { return e.engine.ContainerRemove(ctx, name) })
}

func (e serviceEngine) PodRemove(ctx context.Context, name string) error {
	return e.again(func() error { return e.engine.PodRemove(ctx, name) })
}

func (e serviceEngine) NetworkRemove(ctx context.Context, name string) error {
	return e.again(func() error { return e.engine.NetworkRemove(ctx, name) })
}
