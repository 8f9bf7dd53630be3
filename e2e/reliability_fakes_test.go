//go:build e2e

package e2e

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

// fakePodmanEnv turns this test binary into a fake `podman system service`
// when the launcher runs it as AGENT_SANDBOX_PODMAN; its value is the
// Libpod API version the fake claims. A real old podman is not installable
// here, and its version check happens on the service's first answer.
const fakePodmanEnv = "ASB_E2E_FAKE_PODMAN_VERSION"

func init() {
	if v := os.Getenv(fakePodmanEnv); v != "" {
		os.Exit(fakePodmanService(v, os.Args[1:]))
	}
}

// fakePodmanService serves `podman system service --time=0 unix://SOCK`: every
// request gets the version headers and a 404, as from a podman that knows no
// newer endpoints.
func fakePodmanService(version string, args []string) int {
	if len(args) < 2 || args[0] != "system" || args[1] != "service" {
		fmt.Fprintf(os.Stderr, "fake podman %s: only `system service` is faked, not %q\n", version, args)
		return 125
	}
	sock := strings.TrimPrefix(args[len(args)-1], "unix://")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fake podman: %v\n", err)
		return 125
	}
	defer ln.Close()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-stop; ln.Close() }()
	_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Libpod-API-Version", version)
		w.Header().Set("API-Version", "1.40")
		w.Header().Set("Server", "Libpod/"+version+" (linux)")
		if strings.HasSuffix(r.URL.Path, "/_ping") {
			_, _ = w.Write([]byte("OK"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"cause":"no such endpoint","message":"fake podman %s: no %s","response":404}`, version, r.URL.Path)
	}))
	return 0
}

// suParentEnv turns this test binary into a parent like `su` (see
// suParent) when a row runs the launcher under it (sessionOpts.SuParent).
const suParentEnv = "ASB_E2E_SU_PARENT"

func init() {
	if os.Getenv(suParentEnv) != "" {
		os.Exit(suParent(os.Args[1:]))
	}
}

// suParent runs args, the launcher, on its terminal (stdin and stdout) the
// way `su user` and the shell it starts do, and takes the terminal's
// hang-up without passing anything on. It writes the launcher's pid to fd 3
// and exits as the launcher did.
//
// Why this is su: when a terminal's master closes, the kernel hangs up the
// terminal and sends SIGHUP to the session leader only (and, once that
// leader exits, to the foreground group it had). After `su user` in a
// terminal and `agent-sandbox` from su's shell, the launcher is not that
// leader: it is the shell's foreground job, in a process group of its own.
// The hang-up goes to the processes above it, su forwards only SIGTERM to
// its shell, and an interactive shell ignores SIGTERM and stays, so nothing
// ever signals the launcher. This process plays su and its shell in one:
// the session leader, with the terminal as its controlling terminal (the
// row starts it so), it catches SIGHUP and stays while the launcher runs,
// and it runs the launcher as the foreground job in a group of its own.
// Caught, not ignored: the launcher starts with SIGHUP at its default, as a
// shell's job does. Signals from the row's own guards go to the launcher's
// pid directly (launcher.send), never through here.
func suParent(args []string) int {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	syscall.CloseOnExec(3)
	pidOut := os.NewFile(3, "pid")
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "su-like parent: no command")
		return 125
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, suParentEnv+"=") })
	// The job's own group, made the terminal's foreground before it runs,
	// as a shell with job control does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Foreground: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "su-like parent: %v\n", err)
		return 125
	}
	pid := cmd.Process.Pid
	fmt.Fprintf(pidOut, "%d\n", pid)
	pidOut.Close()
	pgrp, _ := syscall.Getpgid(pid)
	var fg int32
	_ = ioctl(os.Stdin, syscall.TIOCGPGRP, unsafe.Pointer(&fg))
	sid, _, _ := syscall.RawSyscall(syscall.SYS_GETSID, 0, 0, 0)
	if int(sid) == os.Getpid() && pgrp == pid && int(fg) == pid {
		fmt.Fprintf(os.Stderr, "su-like parent: the launcher (pid %d) is the foreground job of session leader %d\n", pid, sid)
	} else {
		fmt.Fprintf(os.Stderr, "su-like parent: not set up as su: session %d (want %d), the launcher %d in group %d, foreground group %d\n",
			sid, os.Getpid(), pid, pgrp, fg)
	}
	go func() {
		for range hup {
			fmt.Fprintln(os.Stderr, "su-like parent: took SIGHUP and passed nothing on")
		}
	}()
	err := cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			// End as the launcher did, so the row sees the signal.
			signal.Reset()
			_ = syscall.Kill(os.Getpid(), ws.Signal())
			return 128 + int(ws.Signal())
		}
		return exit.ExitCode()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "su-like parent: %v\n", err)
		return 125
	}
	return 0
}

// fakePodman is a podman that runs this test binary as the fake of the
// given version. A script, because the launcher starts its API service
// with podman's own environment only (internal/apiservice), not the
// variable that makes this binary the fake.
func fakePodman(t *testing.T, version string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return writeScript(t, "podman", fmt.Sprintf("%s=%s exec %s \"$@\"\n", fakePodmanEnv, version, shellQuote(exe)))
}

func ioctl(f *os.File, req uintptr, arg unsafe.Pointer) error {
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), req, uintptr(arg)); e != 0 {
		return e
	}
	return nil
}

type winsize struct{ Rows, Cols, X, Y uint16 }

// setSize resizes the terminal; the kernel sends SIGWINCH to its
// foreground process group, as a terminal emulator's resize does.
func setSize(t *testing.T, master *os.File, rows, cols uint16) {
	t.Helper()
	ws := winsize{Rows: rows, Cols: cols}
	if err := ioctl(master, syscall.TIOCSWINSZ, unsafe.Pointer(&ws)); err != nil {
		t.Fatalf("resize pty: %v", err)
	}
}

func termios(t *testing.T, f *os.File) syscall.Termios {
	t.Helper()
	var tio syscall.Termios
	if err := ioctl(f, syscall.TCGETS, unsafe.Pointer(&tio)); err != nil {
		t.Fatalf("tcgets: %v", err)
	}
	return tio
}
