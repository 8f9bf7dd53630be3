package podman

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
	"github.com/containers/podman/v5/libpod/define"
	"github.com/containers/podman/v5/pkg/bindings/containers"
	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

func (c bindingsClient) ContainerRun(ctx context.Context, name string, streams *iostreams.Streams, tty bool, begin func() error) (int, error) {
	defer c.step("container run " + name)()
	attachOpts := new(containers.AttachOptions).WithStream(true).WithDetachKeys("")
	attachErr := make(chan error, 1)
	ready := make(chan bool, 1)
	stderr := streams.Err
	if tty {
		stderr = nil
	}
	stdin, closeStdin := interruptibleStdin(streams)
	// Closed when the run ends: the attach's copy of stdin would otherwise
	// stay blocked on a read of the terminal, and take what the user types
	// at the next prompt while the keeper tears down.
	defer closeStdin()
	if tty {
		// Ours, not the attach's: it does these only for an *os.File,
		// whose Fd() would make the read above blocking again.
		restore, err := rawTerminal(streams)
		if err != nil {
			return -1, err
		}
		defer restore()
		defer followResize(ctx, name, streams)()
	}
	go func() { attachErr <- containers.Attach(ctx, name, stdin, streams.Out, stderr, ready, attachOpts) }()
	select {
	case <-ready:
	case err := <-attachErr:
		return -1, fmt.Errorf("attach to %s: %w", name, err)
	}
	if begin == nil {
		if err := containers.Start(ctx, name, new(containers.StartOptions).WithDetachKeys("")); err != nil {
			return -1, fmt.Errorf("start container %s: %w", name, err)
		}
	}
	if tty {
		// Attach sized the terminal before the start, when there was none;
		// a gated container gets its size before its command runs.
		if w, h, ok := streams.Size(); ok {
			_ = containers.ResizeContainerTTY(ctx, name, new(containers.ResizeTTYOptions).WithWidth(w).WithHeight(h))
		}
	}
	if begin != nil {
		if err := begin(); err != nil {
			return -1, err
		}
	}
	code, drained, err := waitRun(ctx, name, attachErr)
	if err != nil {
		return -1, fmt.Errorf("wait for %s: %w", name, err)
	}
	if !drained {
		// Let the last output drain before teardown closes the stream.
		select {
		case <-attachErr:
		case <-time.After(2 * time.Second):
		}
	}
	return int(code), nil
}

// interruptibleStdin is stdin for the attach, read only once poll(2) says
// there is input, so that closing it ends a wait in progress without
// taking anything the user types later. It is no *os.File to the attach,
// which would otherwise read the terminal itself and leave that read
// blocked when the agent exits: it would take what the user types at the
// next prompt while the keeper tears down.
func interruptibleStdin(streams *iostreams.Streams) (io.Reader, func()) {
	fd, isFile := streams.InFd()
	var wake [2]int
	if !isFile || unix.Pipe2(wake[:], unix.O_CLOEXEC) != nil {
		return &plainReader{streams.In}, func() {}
	}
	r := &pollReader{fd: fd, wake: wake[0]}
	var once sync.Once
	return r, func() {
		once.Do(func() {
			// The wake pipe's read end stays open: a Read may still be
			// polling it, and it is one fd for the session's length.
			_ = unix.Close(wake[1])
		})
	}
}

// plainReader hides what reads it from the attach. A pointer: the attach
// checks its stdin for nil by reflection.
type plainReader struct{ r io.Reader }

func (p *plainReader) Read(b []byte) (int, error) { return p.r.Read(b) }

// pollReader reads fd once poll(2) reports input, and ends (io.EOF) once
// wake is closed.
type pollReader struct{ fd, wake int }

func (p *pollReader) Read(b []byte) (int, error) {
	fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}, {Fd: int32(p.wake), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return 0, err
		}
		if fds[1].Revents != 0 {
			return 0, io.EOF
		}
		if fds[0].Revents == 0 {
			continue
		}
		n, err := unix.Read(p.fd, b)
		switch {
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN):
			continue
		case err != nil:
			return 0, err
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// rawTerminal puts the terminal on stdin in raw mode, as `podman run -it`
// does, and returns what restores it.
func rawTerminal(streams *iostreams.Streams) (func(), error) {
	fd, isFile := streams.InFd()
	if !isFile {
		return nil, errors.New("cannot put the terminal in raw mode: stdin is no terminal")
	}
	state, err := term.MakeRaw(fd)
	if err != nil {
		return nil, fmt.Errorf("cannot put the terminal in raw mode: %w", err)
	}
	return func() { _ = term.Restore(fd, state) }, nil
}

// followResize passes the terminal's new size to the agent's on every
// SIGWINCH until the returned func is called.
func followResize(ctx context.Context, name string, streams *iostreams.Streams) func() {
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-winch:
				if w, h, ok := streams.Size(); ok {
					_ = containers.ResizeContainerTTY(ctx, name, new(containers.ResizeTTYOptions).WithWidth(w).WithHeight(h))
				}
			}
		}
	}()
	return func() { signal.Stop(winch); cancel() }
}

// waitRun waits for the attached container to exit. The attach stream
// ends the moment the container's process does, so its end is the first
// sign of the exit, in a session of any length; the service's wait, which
// polls the container's state, would see it only on its grid (250 ms
// after the first seconds). drained says the stream has ended, output
// and all.
func waitRun(ctx context.Context, name string, attachErr <-chan error) (code int32, drained bool, err error) {
	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	type result struct {
		code int32
		err  error
	}
	polled := make(chan result, 1)
	go func() {
		c, err := waitExited(pollCtx, name)
		polled <- result{c, err}
	}()
	select {
	case r := <-polled:
		return r.code, false, r.err
	case <-attachErr:
	}
	// Not waited for: a cancelled wait returns only when the service
	// answers, which is once conmon has exited (see exitedCode).
	stopPoll()
	// The exit is now, or the stream broke with the container running.
	code, err = exitedCode(ctx, name)
	return code, true, err
}

// exitedCode is the exit code of a container whose attach stream has
// ended. The service's wait would give it only once conmon has exited, and
// conmon waits for podman's exit command (`podman container cleanup`, a
// whole podman process: about 0.6 s here); an inspect reads the state from
// the runtime and conmon's exit file, which is there at once. A stream that
// broke with the container still running falls back to the wait.
func exitedCode(ctx context.Context, name string) (int32, error) {
	for range 20 {
		data, err := containers.Inspect(ctx, name, nil)
		if err != nil {
			return 0, err
		}
		if st := data.State; st != nil && !st.Running && (st.Status == define.ContainerStateExited.String() || st.Status == define.ContainerStateStopped.String()) {
			return st.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return waitExited(ctx, name)
}

// The service's wait polls the container's state (no pidfd through the
// API): on its default 250 ms grid a command that ends at once, such as
// `--exec true`, is seen ending up to a quarter second late. The first
// seconds are polled finely; after them an exit a little late costs
// nothing next to the session's length, and the coarse grid costs the
// service less.
const (
	waitFineInterval = "10ms"
	waitFineFor      = 2 * time.Second
)

// waitExited waits for the container to exit and returns its exit code.
func waitExited(ctx context.Context, name string) (int32, error) {
	exited := []define.ContainerStatus{define.ContainerStateExited, define.ContainerStateStopped}
	fine, cancel := context.WithTimeout(ctx, waitFineFor)
	code, err := containers.Wait(fine, name, new(containers.WaitOptions).WithCondition(exited).WithInterval(waitFineInterval))
	cancel()
	if err == nil || ctx.Err() != nil || fine.Err() == nil {
		return code, err
	}
	return containers.Wait(ctx, name, new(containers.WaitOptions).WithCondition(exited))
}
