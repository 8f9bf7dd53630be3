package gate

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// gateFIFOIn makes a FIFO in a temp dir and opens its writing end, as the
// launcher does.
func gateFIFOIn(t *testing.T) (string, *os.File) {
	t.Helper()
	fifo := filepath.Join(t.TempDir(), "open")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	return fifo, w
}

// The gate becomes the init, with podman's arguments, once the launcher
// writes its word; not before.
func TestTheGateRunsTheInitOnceOpened(t *testing.T) {
	fifo, w := gateFIFOIn(t)
	defer w.Close()
	execd := make(chan []string, 1)
	done := make(chan int, 1)
	args := []string{Arg0, "--", "claude", "--resume"}
	go func() {
		done <- Run(fifo, "/run/agent-sandbox/init", args, func(path string, argv, _ []string) error {
			execd <- append([]string{path}, argv...)
			return syscall.ENOEXEC
		})
	}()
	select {
	case got := <-execd:
		t.Fatalf("the gate ran %q before it was opened", got)
	case <-done:
		t.Fatal("the gate ended before it was opened")
	default:
	}
	if _, err := w.WriteString(Word); err != nil {
		t.Fatal(err)
	}
	got := <-execd
	if want := append([]string{"/run/agent-sandbox/init"}, args...); !slices.Equal(got, want) {
		t.Errorf("ran %q, want %q", got, want)
	}
	if code := <-done; code != ExitCode {
		t.Errorf("an init that cannot run: exit %d, want %d", code, ExitCode)
	}
}

// A launcher that ends without opening the gate leaves the agent's
// command unrun.
func TestTheGateStaysShutWhenTheLauncherEnds(t *testing.T) {
	fifo, w := gateFIFOIn(t)
	done := make(chan int, 1)
	ran := false
	go func() {
		done <- Run(fifo, "/init", []string{Arg0, "--", "sh"}, func(string, []string, []string) error { ran = true; return nil })
	}()
	w.Close()
	if code := <-done; code != ExitCode || ran {
		t.Errorf("exit %d, ran %v; want %d and nothing run", code, ran, ExitCode)
	}
}
