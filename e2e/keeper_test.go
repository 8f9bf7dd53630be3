//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/testpty"
)

// TestReliabilityKeeper: the launcher returns with the agent's code as
// soon as the session has said how it ended, while the session's keeper
// tears down behind it (internal/keeper, issue 23).
func TestReliabilityKeeper(t *testing.T) {
	vol := createVolume(t)
	row(t, "the launcher returns at the exit report, its streams closed, while the keeper tears down; the next session in the same dir starts at once", func(t *testing.T) {
		base := takeInventory(t)
		nonce := newNonce(t)
		// A blocked lookup, so that the exit report has something to say.
		first := startLauncher(t, sessionOpts{Trace: true, HomeVolume: vol, Cmd: agentCmd(
			"getent hosts blocked-" + nonce + ".test >/dev/null; echo out-" + nonce + "; exit 7")})
		<-first.exited
		returned := time.Now()
		// Started before the first keeper is done: the claim on the dir is
		// free and the first session's objects are still its keeper's.
		second := startLauncher(t, sessionOpts{Trace: true, Dir: first.Dir, HomeVolume: vol, Cmd: agentCmd("echo again-" + nonce)})
		first.wait()
		first.wantCode(7)
		if !first.KeeperRanAtReturn {
			t.Errorf("the keeper had ended when the launcher returned: the teardown was on the user's path")
		}
		if !strings.Contains(first.Stdout(), "out-"+nonce) {
			t.Errorf("the agent's output is missing: %q", first.Stdout())
		}
		if !strings.Contains(first.Stderr(), "blocked-"+nonce+".test") {
			t.Errorf("the exit report (the blocked lookup) was not on stderr when the launcher returned:\n%s", indent(first.Stderr()))
		}
		if first.OutClosed.IsZero() || first.OutClosed.Sub(first.Ended) > time.Second {
			t.Errorf("the launcher's streams closed %s after it returned, want with it: `$(agent-sandbox ...)` would wait for the teardown",
				first.OutClosed.Sub(first.Ended).Round(time.Millisecond))
		}
		second.wait()
		second.wantCode(0)
		if !strings.Contains(second.Stdout(), "again-"+nonce) {
			t.Errorf("the session started right after the last one returned did not run its agent:\n%s", indent(second.Stderr()))
		}
		t.Logf("the second session started %s after the first returned", second.Started.Sub(returned).Round(time.Millisecond))
		log, _ := os.ReadFile(filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), teardownLog))
		for _, l := range []*launcher{first, second} {
			if name := l.sessionName(); name == "" || strings.Contains(string(log), "session "+name+" ") {
				t.Errorf("the teardown of %q failed: %s", name, log)
			}
		}
		wantInventory(t, base, "after both keepers")
	})
	row(t, "with a terminal, what is typed once the launcher returned reaches the shell, not the keeper", func(t *testing.T) {
		master, slave := testpty.Open(t)
		go drain(master)
		l := startLauncher(t, sessionOpts{Trace: true, PTY: slave, HomeVolume: vol, Cmd: agentCmd("exit 3")})
		<-l.exited
		// The shell has its prompt back and reads the terminal: what the
		// user types now is its own, while the keeper still tears down.
		nonce := newNonce(t)
		if _, err := master.Write([]byte(nonce + "\n")); err != nil {
			t.Fatal(err)
		}
		got := make(chan string, 1)
		go func() {
			buf := make([]byte, 256)
			n, _ := slave.Read(buf)
			got <- string(buf[:n])
		}()
		var read string
		select {
		case read = <-got:
		case <-time.After(5 * time.Second):
		}
		l.wait()
		l.wantCode(3)
		if !l.KeeperRanAtReturn {
			t.Errorf("the keeper had ended when the launcher returned: the row shows nothing")
		}
		if !strings.Contains(read, nonce) {
			t.Errorf("what was typed after the launcher returned did not reach the shell (read %q): the keeper's attach took it", read)
		}
	})
	row(t, "SIGKILL of the launcher: its keeper stops the agent and tears the session down, nothing left for gc", func(t *testing.T) {
		base := takeInventory(t)
		l := startLauncher(t, sessionOpts{Trace: true, HomeVolume: vol, Cmd: agentCmd(agentLoop)})
		if !l.waitFile("started", 60*time.Second) {
			l.signal(syscall.SIGTERM)
			l.wait()
			t.Fatalf("the agent never ran")
		}
		name := l.sessionName()
		killed := time.Now()
		l.signal(syscall.SIGKILL)
		l.wait()
		if l.KilledBy != "killed" {
			t.Errorf("the launcher was not killed: %s/%d", l.KilledBy, l.Code)
		}
		wantStopped(t, l, killed)
		if left := sessionObjectsOf(name); len(left) > 0 {
			t.Errorf("the keeper left %s", strings.Join(left, ", "))
		}
		wantInventory(t, base, "after the keeper of a killed launcher")
	})
}
