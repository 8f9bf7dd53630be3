package podman

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/apiservice"
	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
	"github.com/agent-sandbox/agent-sandbox/internal/trace"
	"github.com/containers/podman/v5/pkg/bindings"
)

// service is the session's use of the podman API service the user's
// sessions share (internal/apiservice). If the service dies while a
// session uses it, the session ends (died is closed) and the service is
// started again on the same socket for teardown: a connection dials the
// socket anew for every request, so the old one works again.
type service struct {
	lease *apiservice.Lease
	out   io.Writer // where a death in use is told

	mu       sync.Mutex
	stopping bool

	died     chan struct{} // closed when the service died in use
	diedErr  error
	replaced chan struct{} // closed when the replacement answers, or could not start
}

// Open starts using the shared podman service (starting it if no
// session runs one) and connects to it; ctx's end gives up the wait for
// it. The returned stop func is never nil and must be called even on
// error: it lets go of the service, which stops if nobody else uses it.
func Open(ctx context.Context, podman, runtimeDir, cwd string, out io.Writer, tracer *trace.Tracer) (context.Context, Client, func(), error) {
	lease, err := apiservice.Acquire(ctx, apiservice.Spec{Podman: podman, RuntimeDir: runtimeDir, Env: os.Environ(), Cwd: cwd})
	if err != nil {
		var se *apiservice.StartError
		if errors.As(err, &se) && (errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist)) {
			err = fmt.Errorf("podman not found (%s): install podman %s or newer (for example: apt-get install podman), or point AGENT_SANDBOX_PODMAN at it", podman, MinVersion)
		}
		return nil, Client{}, func() {}, err
	}
	s := &service{lease: lease, out: out, died: make(chan struct{}), replaced: make(chan struct{})}
	conn, err := s.connect(ctx)
	if err != nil {
		return nil, Client{}, s.stop, err
	}
	if err := checkServiceVersion(conn); err != nil {
		return nil, Client{}, s.stop, err
	}
	go s.watch(lease.Exited())
	var traced *trace.Tracer
	if tracer.On {
		traced = tracer
	}
	return conn, Client{bindingsClient{trace: traced}, s}, s.stop, nil
}

// tooOld is how the bindings refuse a service older than their minimum.
var tooOld = regexp.MustCompile(`server API version is too old.* server "([^"]+)"`)

// connect connects the bindings to the service, which answers already.
func (s *service) connect(ctx context.Context) (context.Context, error) {
	conn, err := bindings.NewConnection(context.Background(), "unix://"+s.lease.Sock())
	if err == nil {
		return conn, nil
	}
	if m := tooOld.FindStringSubmatch(err.Error()); m != nil {
		return nil, fmt.Errorf("podman %s is too old: agent-sandbox needs podman %s or newer", m[1], MinVersion)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, fmt.Errorf("cannot connect to the podman service: %w", err)
}

// watch notices the service dying in use and starts it again.
func (s *service) watch(exited <-chan struct{}) {
	<-exited
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return
	}
	msg := s.lease.Output()
	if msg == "" {
		msg = "(it wrote nothing)"
	}
	s.diedErr = fmt.Errorf("the podman API service (pid %d, %s) stopped; the session ends rather than run without it. Its output: %s", s.lease.Pid(), s.lease.Sock(), msg)
	close(s.died)
	s.mu.Unlock()
	defer close(s.replaced)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.lease.Restart(ctx); err != nil {
		iostreams.Say(s.out, "cannot start a podman service for teardown: %v", err)
	}
}

// stop lets go of the service; the last user stops it.
func (s *service) stop() {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	if _, err := s.lease.Release(); err != nil {
		iostreams.Say(s.out, "cannot stop the podman service: %v", err)
	}
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

// Client is what a session talks to podman with (Open gives it). It ends
// the session with a clear error when the service dies, and makes
// teardown calls again through its replacement.
type Client struct {
	bindingsClient
	s *service
}

// ContainerRun ends when the service dies: the bindings retry a broken
// request, which would reach the replacement and leave the agent running
// with its terminal gone.
func (e Client) ContainerRun(ctx context.Context, name string, streams *iostreams.Streams, tty bool, begin func() error) (int, error) {
	rctx, cancel := e.untilDeath(ctx)
	defer cancel()
	code, err := e.bindingsClient.ContainerRun(rctx, name, streams, tty, begin)
	if e.s.lost(err) || e.s.isDead() {
		return code, e.s.diedErr
	}
	return code, err
}

func (e Client) ContainerWait(ctx context.Context, name string) error {
	wctx, cancel := e.untilDeath(ctx)
	defer cancel()
	err := e.bindingsClient.ContainerWait(wctx, name)
	if e.s.lost(err) || e.s.isDead() {
		return e.s.diedErr
	}
	return err
}

// untilDeath is ctx, cancelled also when the service dies.
func (e Client) untilDeath(ctx context.Context) (context.Context, context.CancelFunc) {
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
func (e Client) again(call func() error) error {
	err := call()
	if e.s.lost(err) {
		err = call()
	}
	return err
}

func (e Client) ContainerStop(ctx context.Context, name string, timeout time.Duration) error {
	return e.again(func() error { return e.bindingsClient.ContainerStop(ctx, name, timeout) })
}

func (e Client) ContainerRemove(ctx context.Context, name string) error {
	return e.again(func() error { return e.bindingsClient.ContainerRemove(ctx, name) })
}

func (e Client) PodRemove(ctx context.Context, name string) error {
	return e.again(func() error { return e.bindingsClient.PodRemove(ctx, name) })
}

func (e Client) NetworkRemove(ctx context.Context, name string) error {
	return e.again(func() error { return e.bindingsClient.NetworkRemove(ctx, name) })
}
