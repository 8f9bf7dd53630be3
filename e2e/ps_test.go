//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// `agent-sandbox ps` and `stop` against two running sessions (issue 24).
func TestPsAndStop(t *testing.T) {
	row(t, "ps lists two running sessions; stop ends one as its agent's exit would, the other runs on", rowPsAndStop)
}

func rowPsAndStop(t *testing.T) {
	// Each agent says when it runs, and exits 7 on SIGTERM.
	agent := []string{"sh", "-c", `trap "echo got-term; exit 7" TERM; touch ready; sleep 60 & wait`}
	a := startLauncher(t, sessionOpts{Trace: true, Args: append([]string{"--pids", "512", "--exec"}, agent...)})
	b := startLauncher(t, sessionOpts{Trace: true, Cmd: agent})
	for _, l := range []*launcher{a, b} {
		if !l.waitFile("ready", 60*time.Second) {
			a.signal(unix.SIGTERM)
			b.signal(unix.SIGTERM)
			a.wait()
			b.wait()
			t.Fatal("a session did not start")
		}
	}
	nameA, nameB := a.sessionName(), b.sessionName()
	out, err := runBin(t, "ps")
	if err != nil {
		t.Errorf("ps: %v", err)
	}
	lineOf := func(out, name string) string {
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, name+" ") {
				return line
			}
		}
		return ""
	}
	if la := lineOf(out, nameA); !strings.Contains(la, " "+a.Dir+" ") || !strings.Contains(la, "sh -c") || !strings.Contains(la, "512 tasks") || !strings.Contains(la, "ago)") {
		t.Errorf("ps: session %s is not listed with its dir %s, agent, start and limits:\n%s", nameA, a.Dir, out)
	}
	if lb := lineOf(out, nameB); !strings.Contains(lb, " "+b.Dir+" ") || !strings.Contains(lb, "4096 tasks") {
		t.Errorf("ps: session %s is not listed with its dir %s and the default limits:\n%s", nameB, b.Dir, out)
	}

	out, err = runBin(t, "stop", nameA)
	if err != nil || !strings.Contains(out, "stopped session "+nameA+" in "+a.Dir) {
		t.Errorf("stop %s: %v\n%s", nameA, err, out)
	}
	a.wait()
	// As an exit: the agent got SIGTERM and its code is the launcher's.
	a.wantCode(7)
	if !strings.Contains(a.Stdout(), "got-term") || !strings.Contains(a.Stderr(), "stopping the agent: agent-sandbox stop was run for this session") {
		t.Errorf("the stopped session did not stop its agent with SIGTERM and say why:\nstdout %q\nstderr:\n%s", a.Stdout(), indent(a.Stderr()))
	}
	if b.done() {
		t.Errorf("stopping %s ended %s too", nameA, nameB)
	}
	out, _ = runBin(t, "ps")
	if lineOf(out, nameA) != "" || lineOf(out, nameB) == "" {
		t.Errorf("ps after the stop lists %s or not %s:\n%s", nameA, nameB, out)
	}
	if out, err := runBin(t, "stop", nameA); err == nil || !strings.Contains(out, "no running session "+nameA) {
		t.Errorf("stop of an ended session: %v\n%s", err, out)
	}
	out, err = runBin(t, "stop", nameB)
	if err != nil {
		t.Errorf("stop %s: %v\n%s", nameB, err, out)
	}
	b.wait()
	b.wantCode(7)
	assertNoLeftovers(t)
}
