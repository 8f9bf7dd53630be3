//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReliabilitySharedService: the sessions of one user with the same
// podman environment use one podman API service (internal/apiservice,
// issue 23), which outlives none of them.
func TestReliabilitySharedService(t *testing.T) {
	row(t, "two sessions with the same podman environment share one API service; the first to end leaves it to the other, the last stops it", func(t *testing.T) {
		base := takeInventory(t)
		vol := createVolume(t)
		env := map[string]string{"XDG_CONFIG_HOME": mkdir(t, "xdg-shared-")}
		first := startLauncher(t, sessionOpts{Trace: true, HomeVolume: vol, Env: env, Cmd: agentCmd(agentLoop)})
		second := startLauncher(t, sessionOpts{Trace: true, HomeVolume: vol, Env: env, Cmd: agentCmd(agentLoop + "\necho second-ran-on")})
		for _, l := range []*launcher{first, second} {
			if !l.waitFile("started", 60*time.Second) {
				t.Fatalf("a session never ran its agent:\n%s", indent(l.Stderr()))
			}
		}
		services := apiServices()
		pid := serviceOf(first)
		if pid == 0 || serviceOf(second) != pid || len(services) != 1 {
			t.Fatalf("want one API service for both sessions: first's %d, second's %d, all: %v", pid, serviceOf(second), services)
		}
		// A session with another podman environment gets its own.
		other := startLauncher(t, sessionOpts{Trace: true, HomeVolume: vol, Cmd: agentCmd(agentLoop)})
		if !other.waitFile("started", 60*time.Second) {
			t.Fatalf("the third session never ran its agent:\n%s", indent(other.Stderr()))
		}
		if o := serviceOf(other); o == 0 || o == pid {
			t.Errorf("a session with another XDG_CONFIG_HOME uses service %d, the others' is %d", o, pid)
		}
		if err := os.WriteFile(filepath.Join(other.Dir, "release"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		other.wait()
		other.wantCode(0)

		if err := os.WriteFile(filepath.Join(first.Dir, "release"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		first.wait()
		first.wantCode(0)
		if !serviceRuns(pid) {
			t.Fatalf("the first session's teardown stopped the service (pid %d) the second one still uses", pid)
		}
		// The second session still has a podman: its agent runs to the
		// end and its own teardown goes through.
		if err := os.WriteFile(filepath.Join(second.Dir, "release"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		second.wait()
		second.wantCode(0)
		if !strings.Contains(second.Stdout(), "second-ran-on") {
			t.Errorf("the second session's agent did not finish:\n%s", indent(second.Stderr()))
		}
		if serviceRuns(pid) {
			t.Errorf("the service (pid %d) still runs after its last session ended", pid)
		}
		log, _ := os.ReadFile(filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), teardownLog))
		for _, l := range []*launcher{first, second, other} {
			if name := l.sessionName(); name == "" || strings.Contains(string(log), "session "+name+" ") {
				t.Errorf("the teardown of %q failed: %s", name, log)
			}
		}
		wantInventory(t, base, "after the three sessions", vol)
	})
}
