//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// followTimeout only backs up the row's own stop of the follower, which
// comes after the session it watches, however long that takes to fail.
const followTimeout = 10 * time.Minute

// TestLogFollowsDenials: `agent-sandbox log` prints a line, with the
// session's directory, for a lookup the allowlist blocks in a session that
// started after it; the session itself summarises the same on exit.
func TestLogFollowsDenials(t *testing.T) {
	row(t, "log follows denials of a session started after it", testLogFollowsDenials)
}

func testLogFollowsDenials(t *testing.T) {
	// Its trace says when its API service is up: it starts following right
	// after, and prints only what is logged from then on. Unattributed:
	// while it runs, its temp dirs and API service are not the session's
	// leftovers.
	follow := startLauncher(t, sessionOpts{Args: []string{"log"}, BareEnv: true, Trace: true, Unattributed: true,
		Dir: mkdir(t, "log-"), Timeout: followTimeout})
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = follow.send(syscall.SIGINT)
		select {
		case <-follow.exited:
			follow.wait()
			if follow.Err != nil {
				t.Errorf("agent-sandbox log after SIGINT: %v, want exit 0; stderr:\n%s", follow.Err, indent(follow.Stderr()))
			}
		case <-time.After(30 * time.Second):
			_ = follow.send(syscall.SIGKILL)
			t.Errorf("agent-sandbox log did not stop on SIGINT")
			follow.wait()
		}
		// From now on its temp dirs and API service count as leftovers.
		launched.Store(follow.Pid(), true)
		assertNoLeftovers(t)
	}
	defer stop()
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(follow.Stderr(), " podman service start\n"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("agent-sandbox log never said its API service was up; stderr:\n%s", indent(follow.Stderr()))
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
		for !strings.Contains(follow.Stdout(), want) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		ok := strings.Contains(follow.Stdout(), want)
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
	if want := "agent-sandbox allow " + name; !strings.Contains(r.Stderr(), want) {
		t.Errorf("the session's blocked summary lacks %q:\n%s", want, indent(r.Stderr()))
	}
	if !<-seen {
		t.Errorf("agent-sandbox log printed no %q; stdout:\n%s\nstderr:\n%s", want, indent(follow.Stdout()), indent(follow.Stderr()))
	}
	// The denial was answered by the router alone.
	wantNeverArrived(t, nonce, "lookup of "+name)
	stop()
}
