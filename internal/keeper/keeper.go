// Package keeper gives the user's shell back the moment a session has said
// how the agent ended, while the session's teardown goes on behind it.
//
// The process the shell starts (the foreground) does nothing but run the
// session in a child, the keeper, with the same arguments and streams, and
// wait for the keeper to hand back an exit code over a pipe. The keeper is
// the session in every other respect: it names the session, owns its
// labels and its claim on the launch dir, and holds its share of the
// podman API service, so `gc` and the next session's start see a live
// owner until the teardown is done. A killed keeper leaves what any killed launcher leaves,
// which `gc` and the next start collect. A killed foreground takes the
// session down with it (the keeper gets SIGTERM), as a killed launcher's
// terminal would: the keeper holds the read end of a pipe whose only
// writer is the foreground, and its end of file before the hand-back means
// the foreground is gone. (Not PR_SET_PDEATHSIG: that is a property of the
// thread that exec'd, and a Go program cannot clear it from another one,
// so the foreground's normal exit after the hand-back would still have
// sent the teardown SIGTERM.)
package keeper

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
	"golang.org/x/sys/unix"
)

// envFD names the keeper's end of the pipe in its environment; the
// foreground sets it, and only the keeper ever sees it.
const envFD = "AGENT_SANDBOX_KEEPER_FD"

// envAliveFD names the keeper's end of the foreground's liveness pipe.
const envAliveFD = "AGENT_SANDBOX_KEEPER_ALIVE_FD"

// Forwarded are the signals the foreground passes to the keeper: one sent
// to the foreground's pid alone (kill, a supervisor, a test) must reach
// the session. A terminal's own signals reach both; the keeper takes a
// second one as it takes the first.
var Forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// Foreground starts the keeper (this same executable, with args and the
// given streams) and returns the exit code it hands back, at once; the
// keeper's teardown goes on. A keeper that ends without handing one back
// (a refusal, a --help, a crash) gives its own exit status. One that a
// forwarded signal ended before it could take signals gives interrupted,
// the code a signal gives at any later step; one killed by another signal
// makes the foreground die of the same signal.
func Foreground(args []string, stdin, stdout, stderr *os.File, interrupted int) int {
	r, w, err := os.Pipe()
	if err != nil {
		iostreams.Say(stderr, "cannot start the session: %v", err)
		return 125
	}
	// The liveness pipe: we hold its only writer (close-on-exec, so the
	// keeper does not) until we return.
	aliveR, aliveW, err := os.Pipe()
	if err != nil {
		r.Close()
		w.Close()
		iostreams.Say(stderr, "cannot start the session: %v", err)
		return 125
	}
	defer aliveW.Close()
	// /proc/self/exe, not os.Args[0]: the same binary even if a newer one
	// replaced it on disk meanwhile, and found without PATH.
	cmd := exec.Command("/proc/self/exe", args...)
	cmd.Args[0] = os.Args[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.ExtraFiles = []*os.File{w, aliveR}
	cmd.Env = append(os.Environ(), envFD+"=3", envAliveFD+"=4")
	// The keeper stays in our process group, so that it is the terminal's
	// foreground job as we are (it reads the terminal).
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, Forwarded...)
	err = cmd.Start()
	w.Close()
	aliveR.Close()
	if err != nil {
		r.Close()
		iostreams.Say(stderr, "cannot start the session: %v", err)
		return 125
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	if code, ok := readCode(r); ok {
		return code
	}
	_ = cmd.Wait()
	signal.Stop(sigs)
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() && slices.Contains(Forwarded, os.Signal(ws.Signal())) {
		return interrupted
	}
	if ws.Signaled() {
		die(ws.Signal())
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// readCode reads the code the keeper hands back: a number and a newline.
// ok is false if the pipe closed without one.
func readCode(r io.ReadCloser) (code int, ok bool) {
	defer r.Close()
	b, _ := io.ReadAll(io.LimitReader(r, 16))
	s, complete := strings.CutSuffix(string(b), "\n")
	if !complete {
		return 0, false
	}
	code, err := strconv.Atoi(s)
	return code, err == nil && code >= 0 && code <= 255
}

// die ends the foreground by sig, as the keeper ended: a shell then says
// "Killed" or "Terminated" as it would have for a single process.
func die(sig syscall.Signal) {
	signal.Reset(sig)
	_ = syscall.Kill(os.Getpid(), sig)
}

// Link is the keeper's end: where it hands the exit code back.
type Link struct {
	f        *os.File
	returned atomic.Bool // read by other goroutines (a signal's context)
}

// Inherited is the link of a process the foreground started, or nil. It
// takes the variable out of the environment, so that nothing the keeper
// starts inherits it, and keeps the pipe from being inherited too: a
// service holding it would keep the foreground waiting after a crash.
func Inherited() *Link {
	v, ok := os.LookupEnv(envFD)
	if !ok {
		return nil
	}
	os.Unsetenv(envFD)
	alive, _ := os.LookupEnv(envAliveFD)
	os.Unsetenv(envAliveFD)
	fd, ok := inheritedPipe(v)
	if !ok {
		return nil
	}
	l := &Link{f: os.NewFile(uintptr(fd), "keeper")}
	if afd, ok := inheritedPipe(alive); ok {
		go l.watchForeground(os.NewFile(uintptr(afd), "keeper-alive"), func() {
			_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
		})
	}
	return l
}

// inheritedPipe is the descriptor v names if it is a pipe, made
// close-on-exec. Only the foreground's pipes: a variable set by anyone
// else must not make a launch write its code into some other file.
func inheritedPipe(v string) (int, bool) {
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return 0, false
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return 0, false
	}
	syscall.CloseOnExec(fd)
	return fd, true
}

// watchForeground waits for the end of file on the liveness pipe (the
// foreground has exited or been killed) and calls terminate if the code
// had not been handed back by then: the session ends as it would on the
// terminal's SIGTERM. After the hand-back the foreground's exit is the
// expected one.
func (l *Link) watchForeground(alive *os.File, terminate func()) {
	defer alive.Close()
	_, _ = io.Copy(io.Discard, alive)
	if !l.returned.Load() {
		terminate()
	}
}

// HandBack gives the foreground code and lets it return; from then on the
// keeper is on its own. Its streams move to log (appended; /dev/null if
// ""), so that nothing waits on a pipe the user's shell or a caller reads
// (`$(agent-sandbox ...)`, `| tee`) and what the teardown still says is
// kept. It leaves the terminal's session: the terminal that closes later
// is not the keeper's. A second call does nothing.
func (l *Link) HandBack(code int, log string) error {
	// Set first: the foreground exits once it reads the code, and that
	// must not stop the teardown.
	if l == nil || l.returned.Swap(true) {
		return nil
	}
	errs := []error{redirect(log)}
	// As os.Exit would: the foreground takes 0 to 255.
	_, err := fmt.Fprintf(l.f, "%d\n", code&0xff)
	errs = append(errs, err, l.f.Close())
	// Best effort: setsid fails only for a process group leader, which the
	// keeper is not.
	_, _ = unix.Setsid()
	return errors.Join(errs...)
}

// Returned says whether the code has been handed back.
func (l *Link) Returned() bool { return l != nil && l.returned.Load() }

// maxLog is the size past which the log starts over.
const maxLog = 1 << 20

// redirect points stdin at /dev/null and stdout and stderr at log.
func redirect(log string) error {
	null, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer null.Close()
	out := null
	if f := openLog(log); f != nil {
		defer f.Close()
		out = f
	}
	return errors.Join(unix.Dup2(int(null.Fd()), 0), unix.Dup2(int(out.Fd()), 1), unix.Dup2(int(out.Fd()), 2))
}

// openLog opens log for appending: never through a link, only a regular
// file of this user's, started over past maxLog. nil if it cannot be.
func openLog(log string) *os.File {
	if log == "" {
		return nil
	}
	f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil
	}
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Getuid() {
		f.Close()
		return nil
	}
	if st.Size > maxLog {
		// Bounded: a trace on every session would grow it forever.
		_ = f.Truncate(0)
	}
	return f
}
