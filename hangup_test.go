package main

import (
	"context"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/testpty"
)

// fdOf is f's descriptor; unlike f.Fd it leaves f non-blocking, so that
// its deadlines still work.
func fdOf(t *testing.T, f *os.File) int {
	t.Helper()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	fd := -1
	if err := rc.Control(func(u uintptr) { fd = int(u) }); err != nil {
		t.Fatal(err)
	}
	return fd
}

const hangupLimit = 5 * time.Second

// Closing the terminal (its master side) cancels the context with
// errHangup; while it stays open, input waiting unread and output written
// cancel nothing.
func TestHangupClosedTerminal(t *testing.T) {
	master, slave := testpty.Open(t)
	ctx, stop := withHangup(context.Background(), io.Discard, fdOf(t, slave))
	defer stop()

	// Activity the watcher must not take for a hang-up: typed input that
	// nobody reads, and output the terminal shows.
	if _, err := master.Write([]byte("typed but never read\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := slave.Write([]byte("shown\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
		t.Fatalf("cancelled while the terminal was open: %v", context.Cause(ctx))
	case <-time.After(300 * time.Millisecond):
	}

	closed := time.Now()
	if err := master.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
		t.Logf("cancelled %s after the terminal closed", time.Since(closed).Round(time.Microsecond))
	case <-time.After(hangupLimit):
		t.Fatalf("not cancelled %s after the terminal closed", hangupLimit)
	}
	if cause := context.Cause(ctx); !errors.Is(cause, errHangup) {
		t.Errorf("cause = %v, want %v", cause, errHangup)
	}
}

// The watcher reads nothing from the terminal: what is typed stays for the
// agent's attach.
func TestHangupReadsNothing(t *testing.T) {
	master, slave := testpty.Open(t)
	_, stop := withHangup(context.Background(), io.Discard, fdOf(t, slave))
	if _, err := master.Write([]byte("for the agent\n")); err != nil {
		t.Fatal(err)
	}
	// The line discipline has it once the echo comes back on the master.
	deadline := time.Now().Add(hangupLimit)
	_ = master.SetReadDeadline(deadline)
	_ = slave.SetReadDeadline(deadline)
	echo := make([]byte, 64)
	if _, err := master.Read(echo); err != nil {
		t.Fatal(err)
	}
	stop()
	buf := make([]byte, 64)
	n, err := slave.Read(buf)
	if err != nil || string(buf[:n]) != "for the agent\n" {
		t.Errorf("the agent's input = %q, %v; want %q", buf[:n], err, "for the agent\n")
	}
}

// stop ends the watch at once and cancels with context.Canceled, not
// errHangup; a hang-up after it is not reported.
func TestHangupStop(t *testing.T) {
	master, slave := testpty.Open(t)
	ctx, stop := withHangup(context.Background(), io.Discard, fdOf(t, slave))
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(hangupLimit):
		t.Fatalf("stop did not return within %s", hangupLimit)
	}
	if cause := context.Cause(ctx); !errors.Is(cause, context.Canceled) {
		t.Errorf("cause after stop = %v, want %v", cause, context.Canceled)
	}
	master.Close()
	stop() // a second stop is harmless
}

// Without a terminal there is nothing to watch: a pipe whose writer closes
// is EOF on stdin, not a hang-up.
func TestHangupNotATerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, stop := withHangup(context.Background(), io.Discard, fdOf(t, r), -1)
	defer stop()
	w.Close()
	select {
	case <-ctx.Done():
		t.Fatalf("cancelled for a pipe: %v", context.Cause(ctx))
	case <-time.After(300 * time.Millisecond):
	}
}

// A parent context's cancellation (a signal) passes through unchanged.
func TestHangupParentCancel(t *testing.T) {
	_, slave := testpty.Open(t)
	parent, cancel := context.WithCancel(context.Background())
	ctx, stop := withHangup(parent, io.Discard, fdOf(t, slave))
	defer stop()
	cancel()
	<-ctx.Done()
	if cause := context.Cause(ctx); !errors.Is(cause, context.Canceled) {
		t.Errorf("cause = %v, want the parent's %v", cause, context.Canceled)
	}
}
