//go:build e2e

package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// logBuffer collects a background command's output while the test reads it.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *logBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *logBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLogFollowsDenials: `agent-sandbox log` prints a line, with the
// session's directory, for a lookup the allowlist blocks in a session that
// started after it; the session itself summarises the same on exit.
func TestLogFollowsDenials(t *testing.T) {
	row(t, "log follows denials of a session started after it", testLogFollowsDenials)
}

func testLogFollowsDenials(t *testing.T) {
	var stdout, stderr logBuffer
	follow := exec.Command(harness.bin, "log")
	// Its trace says when its API service is up: it starts following right
	// after, and prints only what is logged from then on.
	follow.Env = sessionEnv(map[string]string{"AGENT_SANDBOX_TRACE": "1"})
	follow.Dir = mkdir(t, "log-")
	follow.Stdout, follow.Stderr = &stdout, &stderr
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = follow.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { done <- follow.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agent-sandbox log after SIGINT: %v, want exit 0; stderr:\n%s", err, indent(stderr.String()))
			}
		case <-time.After(30 * time.Second):
			_ = follow.Process.Kill()
			t.Errorf("agent-sandbox log did not stop on SIGINT")
		}
		// From now on its temp dirs and API service count as leftovers.
		launched.Store(follow.Process.Pid, true)
		assertNoLeftovers(t)
	}
	defer stop()
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(stderr.String(), " podman service start\n"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("agent-sandbox log never said its API service was up; stderr:\n%s", indent(stderr.String()))
		}
	}

	nonce := newNonce(t)
	name := nonce + ".denied.test"
	dir := launchDir(t)
	want := dir + ": blocked lookup of " + name
	// The router must still run when the follower gets to it: the agent
	// stays until the test has seen the line (touches seen), or 60s.
	seen := make(chan bool, 1)
	go func() {
		deadline := time.Now().Add(60 * time.Second)
		for !strings.Contains(stdout.String(), want) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		ok := strings.Contains(stdout.String(), want)
		if ok {
			_ = os.WriteFile(filepath.Join(dir, "seen"), nil, 0o644)
		}
		seen <- ok
	}()
	r := runSession(t, sessionOpts{
		Dir:       dir,
		Allowlist: "allowed.test\n",
		Cmd: []string{"sh", "-c", "getent hosts " + name +
			"; i=0; while [ ! -e seen ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; exit 0"},
	})
	wantCode(t, r, 0)
	if want := "agent-sandbox allow " + name; !strings.Contains(r.Stderr, want) {
		t.Errorf("the session's blocked summary lacks %q:\n%s", want, indent(r.Stderr))
	}
	if !<-seen {
		t.Errorf("agent-sandbox log printed no %q; stdout:\n%s\nstderr:\n%s", want, indent(stdout.String()), indent(stderr.String()))
	}
	// The denial was answered by the router alone.
	wantNeverArrived(t, nonce, "lookup of "+name)
	stop()
}
