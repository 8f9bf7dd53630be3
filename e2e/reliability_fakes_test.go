//go:build e2e

package e2e

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
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

// fakePodman is the path to run as the fake podman.
func fakePodman(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// openPTY opens a pseudo-terminal pair with the kernel's ioctls, so the
// suite needs neither a pty module nor `script`.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	var unlock int32
	if err := ioctl(m, syscall.TIOCSPTLCK, unsafe.Pointer(&unlock)); err != nil {
		m.Close()
		t.Fatalf("unlock pty: %v", err)
	}
	var n uint32
	if err := ioctl(m, syscall.TIOCGPTN, unsafe.Pointer(&n)); err != nil {
		m.Close()
		t.Fatalf("pty number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatalf("open pty slave: %v", err)
	}
	t.Cleanup(func() { s.Close(); m.Close() })
	return m, s
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
