//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// keeperProc is the keeper a launcher starts (internal/keeper): the
// session's own process, whose pid names the session and its dirs, which
// owns its labels, and which tears it down after the launcher returned.
type keeperProc struct {
	found chan struct{} // closed once pid is known, or the launcher ended without one
	pid   int
	start string
}

// trackKeeper watches the launcher with pid fg for the keeper it starts at
// once. It must be called right after the launcher started: a child is only
// listed under its parent while the parent lives. Every keeper found is
// registered as launched, for the leftover checks' attribution.
func trackKeeper(fg int) *keeperProc {
	k := &keeperProc{found: make(chan struct{})}
	go func() {
		defer close(k.found)
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if pid := keeperChild(fg); pid != 0 {
				k.pid, k.start = pid, procStart(pid)
				launched.Store(pid, true)
				return
			}
			if !procAlive(fg) {
				return
			}
		}
	}()
	return k
}

// Pid is the keeper's pid, 0 if the launcher ended before it was seen.
func (k *keeperProc) Pid() int {
	<-k.found
	return k.pid
}

// waitGone waits for the keeper to end its teardown; false if it still
// runs after timeout.
func (k *keeperProc) waitGone(timeout time.Duration) bool {
	if k.Pid() == 0 {
		return true
	}
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if !k.running() {
			return true
		}
	}
	return !k.running()
}

func (k *keeperProc) running() bool {
	return k.start != "" && procStart(k.pid) == k.start && procAlive(k.pid)
}

// keeperTeardownLimit bounds a keeper's teardown after its launcher
// returned: the teardown's own timeout, and some.
const keeperTeardownLimit = 60 * time.Second

// waitKeeper waits for the keeper's teardown to end, failing the row if it
// does not within keeperTeardownLimit, and logs how long it took.
func waitKeeper(t interface {
	Helper()
	Errorf(string, ...any)
	Logf(string, ...any)
}, k *keeperProc, returned time.Time) {
	t.Helper()
	if k == nil || k.Pid() == 0 {
		return
	}
	if !k.waitGone(keeperTeardownLimit) {
		t.Errorf("the keeper (pid %d) still runs %s after its launcher returned", k.pid, keeperTeardownLimit)
		return
	}
	t.Logf("the keeper (pid %d) ended its teardown %s after the launcher returned", k.pid, time.Since(returned).Round(time.Millisecond))
}

// keeperChild is the child of pid that is a keeper, 0 for none. Each
// thread lists the children it forked (a Go program forks from any of its
// threads), and not every child is the keeper: Go's runtime forks a
// short-lived one to probe for pidfds. The keeper's environment, as the
// kernel keeps it from its start, names its end of the pipe.
func keeperChild(pid int) int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, task := range tasks {
		b, _ := os.ReadFile(task)
		for _, f := range strings.Fields(string(b)) {
			n, _ := strconv.Atoi(f)
			env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", n))
			if strings.Contains("\x00"+string(env), "\x00AGENT_SANDBOX_KEEPER_FD=") {
				return n
			}
		}
	}
	return 0
}

// procStat is the fields of /proc/PID/stat after the command name.
func procStat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	return strings.Fields(s)
}

// procAlive: the process exists and is not a zombie.
func procAlive(pid int) bool {
	f := procStat(pid)
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// procStart is when pid started (field 22), "" if it does not exist.
func procStart(pid int) string {
	if f := procStat(pid); len(f) >= 20 {
		return f[19]
	}
	return ""
}
