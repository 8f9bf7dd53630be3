package main

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"

	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// errHangup is the cause of a context cancelled because the terminal hung
// up.
var errHangup = errors.New("the terminal hung up")

// withHangup returns a context that is cancelled, with errHangup as its
// cause, when one of fds that is a terminal hangs up: the terminal window
// was closed, the ssh connection dropped, the modem hung up.
//
// The kernel's SIGHUP for that goes to the terminal's session leader and,
// when that exits, to the foreground process group. A parent that takes it
// and passes nothing on, like `su` (its shell ignores the SIGTERM su sends),
// leaves the launcher running on a dead terminal with the whole session.
// So the launcher watches its terminal itself, and a hang-up ends the
// session as SIGHUP does: the same context is cancelled, so the exit code
// is 130 and teardown is the same.
//
// It never reads the terminal (the agent's attach does): it polls with no
// events asked for, and POLLHUP, POLLERR and POLLNVAL are reported anyway.
// stop ends the watch and cancels the context.
func withHangup(ctx context.Context, out io.Writer, fds ...int) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	var ttys []int
	for _, fd := range fds {
		if fd >= 0 && term.IsTerminal(fd) && !slices.Contains(ttys, fd) {
			ttys = append(ttys, fd)
		}
	}
	if len(ttys) == 0 {
		return ctx, func() { cancel(nil) }
	}
	// The read end of a pipe wakes the poll when stop closes the write end.
	var wake [2]int
	if err := unix.Pipe2(wake[:], unix.O_CLOEXEC); err != nil {
		iostreams.Say(out, "cannot watch the terminal for a hang-up: %v", err)
		return ctx, func() { cancel(nil) }
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer unix.Close(wake[0])
		if waitHangup(ttys, wake[0], out) {
			iostreams.Say(out, "%v", errHangup)
			cancel(errHangup)
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			_ = unix.Close(wake[1])
			<-done
		})
		cancel(nil)
	}
}

// waitHangup polls ttys until one of them hangs up (true) or wake becomes
// readable or is closed (false).
func waitHangup(ttys []int, wake int, out io.Writer) bool {
	pfds := make([]unix.PollFd, 0, len(ttys)+1)
	for _, fd := range ttys {
		pfds = append(pfds, unix.PollFd{Fd: int32(fd)})
	}
	pfds = append(pfds, unix.PollFd{Fd: int32(wake), Events: unix.POLLIN})
	for {
		_, err := unix.Poll(pfds, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			iostreams.Say(out, "cannot watch the terminal for a hang-up: %v", err)
			return false
		}
		if pfds[len(pfds)-1].Revents != 0 {
			return false
		}
		for _, p := range pfds[:len(pfds)-1] {
			if p.Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
				return true
			}
		}
	}
}
