package main

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/sessionreg"
)

func TestPrintSessions(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.Local)
	claims := []sessionreg.Claim{
		{Session: "agent-sandbox-2-2", Dir: "/src/b c", Command: []string{"sh", "-c", "npm run dev && echo a very long tail of words"}, Started: now.Add(-5 * time.Second), Ports: []string{"127.0.0.1:8000->8000"}, Limits: "4096 tasks"},
		{Session: "agent-sandbox-1-1", Dir: "/src/a", Command: []string{"claude"}, Started: now.Add(-90 * time.Second)},
	}
	var out bytes.Buffer
	printSessions(&out, claims, now)
	want := `SESSION            DIR         AGENT                                     STARTED               PORTS                 LIMITS
agent-sandbox-1-1  /src/a      claude                                    09:58:30 (1m30s ago)  -                     -
agent-sandbox-2-2  '/src/b c'  sh -c 'npm run dev && echo a very lon...  09:59:55 (5s ago)     127.0.0.1:8000->8000  4096 tasks
`
	if out.String() != want {
		t.Errorf("printed:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestStopSessions(t *testing.T) {
	reg := sessionreg.Open(t.TempDir(), ownerAlive)
	me := ownerID(os.Getpid())
	var releases []func() error
	for _, c := range []sessionreg.Claim{{Session: "s1", Dir: "/a"}, {Session: "s2", Dir: "/b"}} {
		c.Owner = me
		rel, err := reg.Claim(c, true)
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, rel)
	}
	var signalled []string
	// The session ends (its claim goes) some time after the request.
	signal := func(owner string) error {
		signalled = append(signalled, owner)
		rel := releases[len(signalled)-1]
		time.AfterFunc(100*time.Millisecond, func() { rel() })
		return nil
	}
	var out bytes.Buffer
	if err := stopSessions(context.Background(), reg, []string{"s1", "nosuch"}, &out, signal); err == nil || !strings.Contains(err.Error(), "no running session nosuch; agent-sandbox ps lists them") || len(signalled) != 0 {
		t.Fatalf("an unknown name: %v, signalled %v (want none signalled)", err, signalled)
	}
	if err := stopSessions(context.Background(), reg, []string{"s1"}, &out, signal); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(signalled, []string{me}) || out.String() != "agent-sandbox: stopped session s1 in /a\n" {
		t.Errorf("signalled %v, said %q", signalled, out.String())
	}
	live, _ := reg.Running()
	if len(live) != 1 || live[0].Session != "s2" {
		t.Errorf("still running: %+v, want s2 only", live)
	}
}

func TestAStopRequestStopsTheAgentAndTheSessionEndsWithItsCode(t *testing.T) {
	eng := newFakeEngine()
	eng.runCode = 143
	requests := make(chan os.Signal, 1)
	eng.runHook = func(ctx context.Context) error {
		requests <- syscall.SIGUSR1
		deadline := time.Now().Add(5 * time.Second)
		for !slices.Contains(eng.recorded(), "ContainerStop "+testSession+"-claude") {
			if time.Now().After(deadline) {
				t.Error("the agent was not stopped on the request")
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		return nil
	}
	cfg := testConfig(t)
	out := &lockedBuffer{}
	set := settingsFrom(nil)
	set.stopRequests = requests
	s := cfg.session(set, out)
	err := outcome(context.Background(), s.runOn(context.Background(), eng, ""))
	s.teardown(context.Background(), err)
	if code := exitCode(err); code != 143 {
		t.Errorf("exit code %d, want the agent's 143", code)
	}
	if !strings.Contains(out.String(), "stopping the agent: agent-sandbox stop was run for this session") {
		t.Errorf("said %q", out.String())
	}
}
