//go:build e2e

package e2e

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/testpty"
)

// agentLoop runs until the test creates "release" in the launch dir. A
// clean stop reaches it as SIGTERM, which it records in "got-term".
const agentLoop = `trap 'echo term > got-term; exit 143' TERM
touch started
i=0
while [ ! -e release ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done
[ -e release ] || exit 3`

func agentCmd(script string) []string { return []string{"sh", "-c", script} }

// Bounds on how long the launcher may take once told to stop. The agent gets
// 3s to exit before it is killed; the rest is teardown.
const (
	signalExitLimit = 10 * time.Second
	agentStopLimit  = 5 * time.Second
)

// A phase is a point in a session's start-up, found by the launcher's own
// trace lines, a file the agent or a podman wrapper writes, or its temp dir.
type phase struct {
	name string
	// line is a regexp for the trace line after which the phase runs.
	line string
	// file appears in the launch dir when the phase runs.
	file string
	// service: the phase runs once the launcher's API service runs.
	service bool
	// slowService makes the API service start take a second longer, so that
	// a signal lands while it starts.
	slowService bool
}

var (
	phaseService = phase{name: "while the API service starts", file: "service-starting", slowService: true}
	phaseNetwork = phase{name: "while the session network is created", line: `trace .* volume inspect `}
	phaseRouter  = phase{name: "while the router starts", line: `trace .* container create \S+-router$`}
	phasePod     = phase{name: "while the pod starts", line: `trace .* pod create `}
	phaseAgent   = phase{name: "while the agent runs", file: "started"}
)

// arm adds what the phase needs to the launcher's options.
func (p phase) arm(t *testing.T, o *sessionOpts) {
	t.Helper()
	if o.Dir == "" {
		o.Dir = launchDir(t)
	}
	if p.slowService {
		wrapper := writeScript(t, "podman", fmt.Sprintf("touch %s\nsleep 1\nexec podman \"$@\"\n",
			shellQuote(filepath.Join(o.Dir, p.file))))
		if o.Env == nil {
			o.Env = map[string]string{}
		}
		o.Env["AGENT_SANDBOX_PODMAN"] = wrapper
	}
}

// reached waits for the phase; false if the launcher ended first.
func (p phase) reached(l *launcher, timeout time.Duration) bool {
	switch {
	case p.line != "":
		return l.waitStderrRe(regexp.MustCompile(p.line), timeout)
	case p.file != "":
		return l.waitFile(p.file, timeout)
	case p.service:
		deadline := time.Now().Add(timeout)
		for !l.done() && time.Now().Before(deadline) {
			if serviceOf(l) != 0 {
				return true
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return false
}

// signalPlan covers every phase and every signal: a rotation over the
// start-up steps, and all three while the agent runs, where stopping it
// matters most.
var signalPlan = []struct {
	p   phase
	sig syscall.Signal
}{
	{phaseService, syscall.SIGINT},
	{phaseNetwork, syscall.SIGTERM},
	{phaseRouter, syscall.SIGHUP},
	{phasePod, syscall.SIGINT},
	{phaseAgent, syscall.SIGINT},
	{phaseAgent, syscall.SIGTERM},
	{phaseAgent, syscall.SIGHUP},
}

func TestReliabilitySignals(t *testing.T) {
	vol := createVolume(t)
	base := takeInventory(t)
	t.Logf("start: %s", base.counts())
	for _, step := range signalPlan {
		p, sig := step.p, step.sig
		row(t, fmt.Sprintf("%s %s: exit 130 and nothing left", signalName(sig), p.name), func(t *testing.T) {
			o := sessionOpts{Trace: true, HomeVolume: vol, Cmd: agentCmd(agentLoop)}
			p.arm(t, &o)
			l := startLauncher(t, o)
			if !p.reached(l, 60*time.Second) {
				l.signal(syscall.SIGTERM)
				l.wait()
				t.Fatalf("the session never got to the phase %q", p.name)
			}
			l.signal(sig)
			l.wait()
			l.wantCode(130)
			within(t, "exit after "+signalName(sig), l.sinceSignal(), signalExitLimit)
			if p == phaseAgent {
				wantStopped(t, l, l.SignalledAt)
			}
			assertNoLeftovers(t)
			wantInventory(t, base, "after the session")
			if t.Failed() {
				base = takeInventory(t)
			}
		})
	}
}

// wantStopped checks that the agent got SIGTERM (it was stopped, not just
// removed with its pod) soon after the launcher was told to end.
func wantStopped(t *testing.T, l *launcher, from time.Time) {
	t.Helper()
	fi, err := os.Stat(filepath.Join(l.Dir, "got-term"))
	if err != nil {
		t.Errorf("the agent never got SIGTERM: it was killed, not stopped")
		return
	}
	within(t, "the agent's SIGTERM", fi.ModTime().Sub(from), agentStopLimit)
}

func signalName(sig syscall.Signal) string {
	return map[syscall.Signal]string{syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM", syscall.SIGHUP: "SIGHUP",
		syscall.SIGKILL: "SIGKILL"}[sig]
}

// bystanders are objects the test creates without agent-sandbox's labels but
// named like a dead launcher's session: gc must go by label, never by name.
func bystanders(t *testing.T) []string {
	t.Helper()
	dead := deadPID(t)
	name := fmt.Sprintf("agent-sandbox-1-%d", dead)
	if _, err := podman("network", "create", name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = podman("network", "rm", "-f", name) })
	if _, err := podman("create", "--name", name+"-claude", "--label", harnessLabel+"=bystander",
		"--network", name, harness.sandboxImage, "true"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = podman("rm", "-f", "-t", "0", name+"-claude") })
	return []string{"network " + name, "container " + name + "-claude"}
}

// deadPID is the pid of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = p.Wait()
	return p.Pid
}

func wantStill(t *testing.T, objs []string, why string) {
	t.Helper()
	for _, o := range objs {
		kind, name, _ := strings.Cut(o, " ")
		if len(stillThere(kind, name)) == 0 {
			t.Errorf("%s was removed, but %s", o, why)
		}
	}
}

// killedSession starts a session, SIGKILLs its keeper (the session's own
// process, which the launcher waits for) once the agent runs and returns
// the session's name, the keeper's pid and its API service's, after
// checking that what it left is there to be collected.
func killedSession(t *testing.T, vol string) (string, int, int) {
	t.Helper()
	l := startLauncher(t, sessionOpts{Trace: true, HomeVolume: vol, Cmd: agentCmd(agentLoop)})
	if !l.waitFile("started", 60*time.Second) {
		l.signal(syscall.SIGTERM)
		l.wait()
		t.Fatalf("the session to be killed never ran its agent")
	}
	name, keeper := l.sessionName(), l.sessionPid()
	if keeper == l.Pid() {
		t.Fatalf("no keeper seen for the launcher (pid %d)", l.Pid())
	}
	service := serviceOf(l)
	if service == 0 {
		t.Fatalf("cannot find the session's API service among %v", apiServices())
	}
	if err := syscall.Kill(keeper, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	l.wait()
	if l.KilledBy != "killed" {
		t.Fatalf("the launcher did not die of its keeper's SIGKILL: %s/%d", l.KilledBy, l.Code)
	}
	left := sessionObjectsOf(name)
	t.Logf("the killed session %s left: %s; dirs: %v", name, strings.Join(left, ", "), runtimeDirsOf(keeper))
	if len(left) < 4 {
		t.Fatalf("a killed launcher left only %v: nothing for gc to prove itself on", left)
	}
	// The shared service outlives a killed session (another one may use
	// it); with no user left, what collects the session collects it too.
	if !serviceRuns(service) {
		t.Fatalf("the API service (pid %d) ended with its SIGKILLed keeper: nothing for gc to prove itself on", service)
	}
	return name, keeper, service
}

// serviceRuns reports whether pid is still a podman API service.
func serviceRuns(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), "system\x00service")
}

func TestReliabilityCrash(t *testing.T) {
	vol := createVolume(t)
	others := bystanders(t)
	live := startLauncher(t, sessionOpts{Trace: true, HomeVolume: vol, Cmd: agentCmd(agentLoop), Timeout: 3 * time.Minute})
	if !live.waitFile("started", 60*time.Second) {
		live.signal(syscall.SIGTERM)
		live.wait()
		t.Fatalf("the live session never ran its agent")
	}
	liveName := live.sessionName()
	liveObjs := sessionObjectsOf(liveName)
	liveDirs := runtimeDirsOf(live.sessionPid())
	// wantUntouched: what gc must leave is still there and still runs.
	wantUntouched := func(t *testing.T) {
		t.Helper()
		wantStill(t, others, "it has no agent-sandbox label")
		wantStill(t, liveObjs, "its launcher is alive")
		if live.done() {
			t.Errorf("the live session ended while a stale one was collected")
		}
		if out, _ := podman("container", "inspect", "--format", "{{.State.Status}}", liveName+"-claude"); strings.TrimSpace(out) != "running" {
			t.Errorf("the live session's agent is not running: %q", out)
		}
		if dirs := runtimeDirsOf(live.sessionPid()); len(liveDirs) == 0 || !slices.Equal(dirs, liveDirs) {
			t.Errorf("the live session's temp dirs were touched: %v, before %v", dirs, liveDirs)
		}
	}
	wantCollected := func(t *testing.T, victim string, victimPID, service int) {
		t.Helper()
		if serviceRuns(service) {
			t.Errorf("the stale session's API service (pid %d) still runs, with no session using it", service)
		}
		if left := sessionObjectsOf(victim); len(left) > 0 {
			t.Errorf("the stale session is still there: %s", strings.Join(left, ", "))
		}
		if dirs := runtimeDirsOf(victimPID); len(dirs) > 0 {
			t.Errorf("the stale session's temp dirs are still there: %v", dirs)
		}
	}

	// With the live session running: what gc must bring podman back to.
	base := takeInventory(t)
	row(t, "after SIGKILL of the session's keeper, agent-sandbox gc removes the stale session and nothing else", func(t *testing.T) {
		victim, victimPID, service := killedSession(t, vol)
		gc := startLauncher(t, sessionOpts{Trace: true, Args: []string{"gc"}, HomeVolume: vol}).wait()
		gc.wantCode(0)
		for _, want := range []string{"pod " + victim, "network " + victim, "container " + victim + "-router"} {
			if !strings.Contains(gc.Stdout(), want) {
				t.Errorf("gc did not report removing %s", want)
			}
		}
		if strings.Contains(gc.Stdout(), liveName) {
			t.Errorf("gc reported removing parts of the live session %s", liveName)
		}
		if !strings.Contains(gc.Stdout(), "the unused podman service ") || !strings.Contains(gc.Stdout(), fmt.Sprintf("(pid %d)", service)) {
			t.Errorf("gc did not report stopping the unused podman service (pid %d)", service)
		}
		wantCollected(t, victim, victimPID, service)
		wantUntouched(t)
		wantInventory(t, base, "after gc")
	})
	row(t, "after SIGKILL of the session's keeper, the next session's start removes the stale session and nothing else", func(t *testing.T) {
		victim, victimPID, service := killedSession(t, vol)
		next := startLauncher(t, sessionOpts{Trace: true, HomeVolume: vol, Cmd: []string{"true"}}).wait()
		next.wantCode(0)
		wantCollected(t, victim, victimPID, service)
		wantUntouched(t)
		wantInventory(t, base, "after the next session")
	})
	row(t, "the live session ends normally after both collections", func(t *testing.T) {
		live.t = t
		if err := os.WriteFile(filepath.Join(live.Dir, "release"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		live.wait()
		live.wantCode(0)
		assertNoLeftovers(t)
	})
}

func TestReliabilityConcurrency(t *testing.T) {
	row(t, "eight sessions at once: own network and router each, all complete, one killed leaves the rest", func(t *testing.T) {
		const n = 8
		// Fresh: all eight race to create it.
		vol := homeVolume(t)
		base := takeInventory(t)
		nonces := make([]string, n)
		opts := make([]sessionOpts, n)
		for i := range opts {
			nonces[i] = newNonce(t)
			opts[i] = sessionOpts{Trace: true, HomeVolume: vol, Timeout: 3 * time.Minute, Cmd: agentCmd(fmt.Sprintf(
				`echo %s > mine.txt
grep -m1 nameserver /etc/resolv.conf > ns.txt
curl -sS --max-time 20 --cacert ./ca.pem https://allowed.test/%s > curl.txt 2>&1; echo $? > curl.rc
%s
cat mine.txt`, nonces[i], nonces[i], agentLoop))}
			opts[i].Dir = launchDir(t)
		}
		ls := make([]*launcher, n)
		for i := range ls {
			ls[i] = startLauncher(t, opts[i])
		}
		start := time.Now()
		for i, l := range ls {
			if !l.waitFile("started", 150*time.Second) {
				t.Errorf("session %d never ran its agent", i)
			}
		}
		t.Logf("all %d agents ran after %s", n, time.Since(start).Round(time.Millisecond))
		if t.Failed() {
			for _, l := range ls {
				l.signal(syscall.SIGTERM)
			}
			for _, l := range ls {
				l.wait()
			}
			assertNoLeftovers(t)
			t.FailNow()
		}

		names := make([]string, n)
		routers := map[string]int{}
		running := runningContainers(t)
		for i, l := range ls {
			names[i] = l.sessionName()
			ns := strings.TrimSpace(l.fileIn("ns.txt"))
			if prev, dup := routers[ns]; dup {
				t.Errorf("sessions %d and %d share the router %q", prev, i, ns)
			}
			routers[ns] = i
			for _, c := range []string{names[i] + "-router", names[i] + "-forwarder", names[i] + "-claude"} {
				if !slices.Contains(running, c) {
					t.Errorf("session %d: %s is not running", i, c)
				}
			}
			if rc := strings.TrimSpace(l.fileIn("curl.rc")); rc != "0" || !strings.Contains(l.fileIn("curl.txt"), "hello from allowed.test") {
				t.Errorf("session %d could not reach allowed.test (rc %s): %s", i, rc, l.fileIn("curl.txt"))
			}
			wantArrived(t, nonces[i], fmt.Sprintf("session %d's request", i))
		}
		t.Logf("routers: %v", routers)
		nets, _ := podman("network", "ls", "--filter", "label="+sessionLabel, "--format", "{{.Name}}")
		for i, name := range names {
			if !slices.Contains(lines(nets), name) {
				t.Errorf("session %d has no network of its own (%s)", i, name)
			}
		}

		victim := ls[0]
		victim.signal(syscall.SIGTERM)
		victim.wait()
		victim.wantCode(130)
		within(t, "the killed session's exit", victim.sinceSignal(), signalExitLimit)
		running = runningContainers(t)
		for i, l := range ls[1:] {
			if l.done() {
				t.Errorf("session %d ended when session 0 was killed", i+1)
			}
			for _, c := range []string{names[i+1] + "-router", names[i+1] + "-forwarder", names[i+1] + "-claude"} {
				if !slices.Contains(running, c) {
					t.Errorf("session %d: %s stopped when session 0 was killed", i+1, c)
				}
			}
		}
		for _, l := range ls[1:] {
			if err := os.WriteFile(filepath.Join(l.Dir, "release"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for i, l := range ls[1:] {
			l.wait()
			l.wantCode(0)
			if !strings.Contains(l.Stdout(), nonces[i+1]) {
				t.Errorf("session %d printed %q, want its own nonce %s", i+1, l.Stdout(), nonces[i+1])
			}
			if got := strings.TrimSpace(l.fileIn("mine.txt")); got != nonces[i+1] {
				t.Errorf("session %d's file holds %q, want %s", i+1, got, nonces[i+1])
			}
		}
		if _, err := podman("volume", "exists", vol); err != nil {
			t.Errorf("the home volume %s was not created: %v", vol, err)
		}
		assertNoLeftovers(t)
		wantInventory(t, base, "after eight sessions", vol)
	})
}

// exitRounds is how many rounds of eight short sessions the exit-code row
// runs; AGENT_SANDBOX_E2E_EXIT_ROUNDS raises it for a soak by hand.
func exitRounds(t *testing.T) int {
	n, err := strconv.Atoi(envOr("AGENT_SANDBOX_E2E_EXIT_ROUNDS", "3"))
	if err != nil || n < 1 {
		t.Fatalf("AGENT_SANDBOX_E2E_EXIT_ROUNDS=%q: want a positive number", os.Getenv("AGENT_SANDBOX_E2E_EXIT_ROUNDS"))
	}
	return n
}

func TestReliabilityConcurrentExitCodes(t *testing.T) {
	row(t, "rounds of eight short sessions at once: every agent's exit code comes back", func(t *testing.T) {
		// A short agent exits while podman is busy with seven other
		// sessions: the exit code must survive however quickly the
		// container is cleaned up after it.
		const n = 8
		vol := homeVolume(t)
		base := takeInventory(t)
		rounds := exitRounds(t)
		lost := 0
		for round := range rounds {
			ls := make([]*launcher, n)
			want := make([]int, n)
			nonces := make([]string, n)
			for i := range ls {
				want[i] = 3 + (round*n+i)%100
				nonces[i] = newNonce(t)
				ls[i] = startLauncher(t, sessionOpts{Trace: true, HomeVolume: vol, Timeout: 3 * time.Minute, Cmd: agentCmd(fmt.Sprintf(
					"curl -sS --max-time 20 --cacert ./ca.pem https://allowed.test/%s >/dev/null && echo ran-%s; exit %d", nonces[i], nonces[i], want[i]))})
			}
			for i, l := range ls {
				l.wait()
				if l.Code != want[i] {
					lost++
					t.Errorf("round %d, session %d: exit code %d, want the agent's %d; stderr:\n%s", round, i, l.Code, want[i], indent(l.Stderr()))
				}
				if !strings.Contains(l.Stdout(), "ran-"+nonces[i]) {
					t.Errorf("round %d, session %d: the agent did not reach allowed.test and print its nonce; stdout %q", round, i, l.Stdout())
				}
			}
		}
		t.Logf("%d rounds of %d sessions: %d exit codes lost", rounds, n, lost)
		assertNoLeftovers(t)
		wantInventory(t, base, "after the rounds", vol)
	})
}

func runningContainers(t *testing.T) []string {
	t.Helper()
	out, err := podman("ps", "--format", "{{.Names}}")
	if err != nil {
		t.Fatal(err)
	}
	return lines(out)
}

// churnPhases are where churn kills a session; the first runs as soon as
// the API service's process exists.
var churnPhases = []phase{
	{name: "API service starting", service: true},
	{name: "after the service started", line: `trace .* podman service start$`},
	{name: "egress network", line: `trace .* network create agent-sandbox-egress$`},
	phaseNetwork,
	phaseRouter,
	phasePod,
	{name: "forwarder ready", line: `trace .* container start\+ready \S+-forwarder$`},
	phaseAgent,
}

func TestReliabilityConcurrentSharedObjects(t *testing.T) {
	row(t, "eight first sessions at once, half of them run as claude: one egress network and one home volume, no race, no session loses its files", func(t *testing.T) {
		const n = 8
		// Fresh shared objects, so that all eight race to create them.
		egress := "asb-e2e-egress-" + newNonce(t)
		t.Cleanup(func() {
			if _, err := podman("network", "exists", egress); err == nil {
				if _, err := podman("network", "rm", "-f", egress); err != nil {
					t.Errorf("cannot remove %s: %v", egress, err)
				}
			}
		})
		vol := homeVolume(t)
		// Half of them run as `claude`: each start collects what dead
		// sessions left, and must know a live launcher by any name.
		claude := filepath.Join(mkdir(t, "bin-"), "claude")
		if err := os.Symlink(harness.bin, claude); err != nil {
			t.Fatal(err)
		}
		base := takeInventory(t)
		ls := make([]*launcher, n)
		for i := range ls {
			o := sessionOpts{Trace: true, HomeVolume: vol, Timeout: 3 * time.Minute, Cmd: []string{"true"},
				Env: map[string]string{"AGENT_SANDBOX_EGRESS_NETWORK": egress}}
			if i%2 == 1 {
				o.Bin = claude
			}
			ls[i] = startLauncher(t, o)
		}
		for i, l := range ls {
			if l.wait().Code != 0 {
				t.Errorf("session %d: exit code %d, want 0; stderr:\n%s", i, l.Code, l.Stderr())
			}
		}
		const shared = `{{index .Labels "agent-sandbox.shared"}}`
		nets, err := podman("network", "ls", "--filter", "name=^"+egress+"$", "--format", "{{.Name}}")
		if err != nil {
			t.Fatal(err)
		}
		if got := lines(nets); len(got) != 1 {
			t.Errorf("egress networks named %s: %q, want exactly one", egress, got)
		}
		if out, err := podman("network", "inspect", "--format", shared, egress); err != nil || strings.TrimSpace(out) != "true" {
			t.Errorf("egress network %s: label agent-sandbox.shared = %q %v, want true", egress, out, err)
		}
		if out, err := podman("volume", "inspect", "--format", shared, vol); err != nil || strings.TrimSpace(out) != "true" {
			t.Errorf("home volume %s: label agent-sandbox.shared = %q %v, want true", vol, out, err)
		}
		assertNoLeftovers(t)
		// The shared network and volume are what the sessions may leave.
		now := takeInventory(t)
		now["networks"] = slices.DeleteFunc(now["networks"], func(s string) bool { return s == egress })
		now["volumes"] = slices.DeleteFunc(now["volumes"], func(s string) bool { return s == vol })
		if d := base.diff(now); d != "" {
			t.Errorf("besides the shared network and volume, podman and the runtime dir differ from the start:\n%s", d)
		}
	})
}

func TestReliabilityChurn(t *testing.T) {
	row(t, "fifty sessions, some killed at random steps, leave podman and the runtime dir as they were", func(t *testing.T) {
		const sessions = 50
		vol := createVolume(t)
		// Two /24s only: a leaked session network makes the next-but-one
		// session fail at once instead of after 255 sessions.
		xdg := mkdir(t, "xdg-churn-")
		conf := filepath.Join(xdg, "containers", "containers.conf")
		if err := os.MkdirAll(filepath.Dir(conf), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(conf, []byte("[network]\ndefault_subnet_pools = [{\"base\" = \"10.89.250.0/23\", \"size\" = 24}]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		base := takeInventory(t)
		inv := base
		t.Logf("start: %s", base.counts())
		rng := mrand.New(mrand.NewPCG(4, 50))
		sigs := []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}
		failures, kills := 0, 0
		routerIPs, killedAt := map[string]int{}, map[string]int{}
		start := time.Now()
		for i := 0; i < sessions && failures < 5; i++ {
			kill := rng.IntN(5) < 2
			p := churnPhases[rng.IntN(len(churnPhases))]
			sig := sigs[rng.IntN(len(sigs))]
			// No clean-up of dead sessions at start: it would hide a
			// leak of the session before.
			o := sessionOpts{Trace: true, HomeVolume: vol, Env: map[string]string{"XDG_CONFIG_HOME": xdg, "AGENT_SANDBOX_NO_START_GC": "1"}, Timeout: time.Minute,
				Cmd: agentCmd("grep -m1 nameserver /etc/resolv.conf")}
			if kill {
				o.Cmd = agentCmd(agentLoop)
			}
			l := startLauncher(t, o)
			what := "run to the end"
			if kill {
				what = fmt.Sprintf("%s %s", signalName(sig), p.name)
				if p.reached(l, 45*time.Second) {
					l.signal(sig)
				} else {
					what += " (phase never reached)"
				}
			}
			<-l.exited
			want := 0
			if kill {
				want, kills = 130, kills+1
				killedAt[what]++
			}
			if l.Code != want || l.TimedOut || (kill && l.SignalledAt.IsZero()) {
				failures++
				l.wait()
				t.Errorf("session %d (%s): exit %d, want %d", i, what, l.Code, want)
			}
			inv = leakSince(t, inv, fmt.Sprintf("session %d (%s)", i, what))
			if l.Code != want {
				continue
			}
			if !kill {
				ip := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l.Stdout()), "nameserver"))
				routerIPs[ip]++
			}
		}
		t.Logf("%d sessions in %s; killed: %v; router addresses used: %v", sessions, time.Since(start).Round(time.Millisecond), killedAt, routerIPs)
		if kills == 0 || len(routerIPs) == 0 {
			t.Errorf("the plan killed %d sessions and ran %d to the end: it must do both", kills, len(routerIPs))
		}
		for ip := range routerIPs {
			if !strings.HasPrefix(ip, "10.89.250.") && !strings.HasPrefix(ip, "10.89.251.") {
				t.Errorf("router address %s is outside the churn's subnet pool: containers.conf was not honoured, so a leak would not show", ip)
			}
		}
		assertNoLeftovers(t)
		wantInventory(t, base, "after fifty sessions")
	})
}

func TestReliabilityExitCodes(t *testing.T) {
	type exitCase struct {
		name string
		o    sessionOpts
		want int
	}
	var cases []exitCase
	for _, c := range []int{0, 1, 2, 42, 124, 125, 126, 127} {
		cases = append(cases, exitCase{fmt.Sprintf("exit %d passes through", c),
			sessionOpts{Trace: true, Cmd: agentCmd(fmt.Sprintf("exit %d", c))}, c})
	}
	for _, s := range []struct {
		sig  string
		want int
	}{{"INT", 130}, {"KILL", 137}, {"TERM", 143}} {
		cases = append(cases, exitCase{fmt.Sprintf("death by SIG%s gives %d", s.sig, s.want),
			sessionOpts{Trace: true, Cmd: agentCmd("kill -" + s.sig + " $$; sleep 5")}, s.want})
	}
	for _, c := range cases {
		row(t, c.name, func(t *testing.T) {
			startLauncher(t, c.o).wait().wantCode(c.want)
		})
	}
	row(t, "after the exit-code sessions nothing is left", func(t *testing.T) { assertNoLeftovers(t) })

	failing := writeScript(t, "podman", "echo 'Error: fake podman: cannot open the storage' >&2\nexit 125\n")
	row(t, "a podman that fails gives 125 and its error", func(t *testing.T) {
		l := startLauncher(t, sessionOpts{Trace: true, Cmd: []string{"true"}, Env: map[string]string{"AGENT_SANDBOX_PODMAN": failing}}).wait()
		l.wantCode(125)
		if !strings.Contains(l.Stderr(), "cannot open the storage") {
			t.Errorf("stderr does not pass on podman's error")
		}
		assertNoLeftovers(t)
	})
	row(t, "--exec without a command is refused with 1", func(t *testing.T) {
		l := startLauncher(t, sessionOpts{Trace: true, Args: []string{"--exec"}}).wait()
		l.wantCode(1)
		if !strings.Contains(l.Stderr(), "--exec") {
			t.Errorf("stderr does not say what is wrong")
		}
		assertNoLeftovers(t)
	})
	row(t, "a launch dir containing ':' is refused with 1", func(t *testing.T) {
		l := startLauncher(t, sessionOpts{Trace: true, Dir: mkdir(t, "a:b-"), Cmd: []string{"true"}}).wait()
		l.wantCode(1)
		if !strings.Contains(l.Stderr(), "':'") {
			t.Errorf("stderr does not say what is wrong")
		}
		assertNoLeftovers(t)
	})
}

func TestReliabilityTerminal(t *testing.T) {
	row(t, "with a terminal the agent sees its size at start and after a resize, and the terminal is restored", func(t *testing.T) {
		master, slave := testpty.Open(t)
		go drain(master)
		setSize(t, master, 37, 101)
		before := termios(t, slave)
		l := startLauncher(t, sessionOpts{Trace: true, PTY: slave, Cmd: []string{"bash", "-c",
			`stty size > size-start; trap 'stty size > size-winch' WINCH; ` + agentLoop}})
		if !l.waitFile("started", 60*time.Second) {
			l.signal(syscall.SIGTERM)
			l.wait()
			t.Fatalf("the agent never ran")
		}
		if got := strings.TrimSpace(l.fileIn("size-start")); got != "37 101" {
			t.Errorf("the agent saw a %q terminal at start, want \"37 101\"", got)
		}
		setSize(t, master, 51, 133)
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(l.fileIn("size-winch"), "51 133") && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if got := strings.TrimSpace(l.fileIn("size-winch")); got != "51 133" {
			t.Errorf("after a resize to 51x133 the agent saw %q (SIGWINCH and new size)", got)
		}
		if err := os.WriteFile(filepath.Join(l.Dir, "release"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		l.wait()
		l.wantCode(0)
		wantTermios(t, before, termios(t, slave))
		assertNoLeftovers(t)
	})
	row(t, "with a terminal, SIGHUP ends the session with 130 and restores the terminal", func(t *testing.T) {
		master, slave := testpty.Open(t)
		go drain(master)
		setSize(t, master, 30, 90)
		before := termios(t, slave)
		l := startLauncher(t, sessionOpts{Trace: true, PTY: slave, Cmd: agentCmd(agentLoop)})
		if !l.waitFile("started", 60*time.Second) {
			l.signal(syscall.SIGTERM)
			l.wait()
			t.Fatalf("the agent never ran")
		}
		l.signal(syscall.SIGHUP)
		l.wait()
		l.wantCode(130)
		within(t, "exit after SIGHUP", l.sinceSignal(), signalExitLimit)
		wantStopped(t, l, l.SignalledAt)
		wantTermios(t, before, termios(t, slave))
		assertNoLeftovers(t)
	})
	// The launcher on a terminal whose SIGHUP never reaches it: it runs
	// under a su-like parent (see suParent for why that is `su user` in a
	// terminal), which takes the hang-up and passes nothing on. Before the
	// launcher watched its terminal itself, it kept running here, and the
	// session with it, on a terminal that was gone.
	row(t, "with a terminal under su, closing the terminal ends the session with 130 though no SIGHUP reaches the launcher", func(t *testing.T) {
		vol := createVolume(t)
		base := takeInventory(t)
		master, slave := testpty.Open(t)
		master = closableMaster(t, master)
		go drain(master)
		l := startLauncher(t, sessionOpts{Trace: true, PTY: slave, SuParent: true, HomeVolume: vol, Cmd: agentCmd(agentLoop)})
		if !l.waitFile("started", 60*time.Second) {
			l.signal(syscall.SIGTERM)
			l.wait()
			t.Fatalf("the agent never ran")
		}
		// The terminal window closes: only the launcher and its parent held
		// the slave side, and the master goes.
		slave.Close()
		closed := time.Now()
		if err := master.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.exited:
		case <-time.After(time.Until(closed.Add(signalExitLimit))):
			t.Errorf("the launcher still ran %s after its terminal closed: it did not notice the hang-up", signalExitLimit)
			l.signal(syscall.SIGTERM)
		}
		l.wait()
		for _, want := range []string{
			"su-like parent: the launcher (pid " + strconv.Itoa(l.Pid()) + ") is the foreground job of session leader",
			"su-like parent: took SIGHUP and passed nothing on",
		} {
			if !strings.Contains(l.Stderr(), want) {
				t.Errorf("the parent's stderr does not say %q: the row did not model su", want)
			}
		}
		if !strings.Contains(l.Stderr(), "agent-sandbox: the terminal hung up") {
			t.Errorf("the launcher does not say the terminal hung up")
		}
		l.wantCode(130)
		within(t, "exit after the terminal closed", l.Ended.Sub(closed), signalExitLimit)
		wantStopped(t, l, closed)
		// No terminal mode to check: the terminal is gone.
		assertNoLeftovers(t)
		wantInventory(t, base, "after the session")
	})
	row(t, "without a terminal, piped text passes through unchanged and EOF ends the agent", func(t *testing.T) {
		l := startLauncher(t, sessionOpts{Trace: true, Cmd: []string{"cat"}, Stdin: strings.NewReader("hi\n"), Timeout: 60 * time.Second}).wait()
		l.wantCode(0)
		if got := l.Stdout(); got != "hi\n" {
			t.Errorf("stdout = %q, want %q", got, "hi\n")
		}
		assertNoLeftovers(t)
	})
	row(t, "without a terminal, a binary blob passes through unchanged", func(t *testing.T) {
		blob := make([]byte, 1<<20)
		if _, err := rand.Read(blob); err != nil {
			t.Fatal(err)
		}
		l := startLauncher(t, sessionOpts{Trace: true, Cmd: []string{"cat"}, Stdin: strings.NewReader(string(blob)), Timeout: 60 * time.Second}).wait()
		l.wantCode(0)
		got := []byte(l.Stdout())
		if sha256.Sum256(got) != sha256.Sum256(blob) {
			t.Errorf("stdout differs from stdin: %d bytes back for %d sent", len(got), len(blob))
		}
		assertNoLeftovers(t)
	})
}

// drain keeps reading the terminal so the launcher never blocks writing.
func drain(master *os.File) {
	buf := make([]byte, 4096)
	for {
		if _, err := master.Read(buf); err != nil {
			return
		}
	}
}

// closableMaster is a terminal's master that Close really closes while
// drain reads it. testpty.Open's is in blocking mode (its ioctls took Fd), and a
// read blocked in the kernel keeps a file open past Close: the terminal
// would never hang up. A non-blocking copy's read waits in Go's poller
// instead, which Close wakes.
func closableMaster(t *testing.T, master *os.File) *os.File {
	t.Helper()
	fd, err := syscall.Dup(int(master.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	syscall.CloseOnExec(fd)
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	m := os.NewFile(uintptr(fd), master.Name())
	master.Close()
	t.Cleanup(func() { m.Close() })
	return m
}

func wantTermios(t *testing.T, before, after syscall.Termios) {
	t.Helper()
	for _, f := range []struct {
		name string
		bit  uint32
	}{{"ECHO", syscall.ECHO}, {"ICANON", syscall.ICANON}, {"ISIG", syscall.ISIG}} {
		if before.Lflag&f.bit != after.Lflag&f.bit {
			t.Errorf("the terminal was left with %s %s: not restored", f.name, map[bool]string{true: "on", false: "off"}[after.Lflag&f.bit != 0])
		}
	}
	if before.Oflag != after.Oflag || before.Iflag != after.Iflag {
		t.Errorf("the terminal's modes were not restored: iflag %#x -> %#x, oflag %#x -> %#x", before.Iflag, after.Iflag, before.Oflag, after.Oflag)
	}
}

func TestReliabilityFailClosed(t *testing.T) {
	for _, helper := range []struct{ what, suffix, ready string }{
		{"router", "-router", "routerd: ready"},
		{"forwarder", "-forwarder", "forwarder: ready"},
	} {
		row(t, "the "+helper.what+" dying mid-session ends it non-zero, naming it with its last log lines", func(t *testing.T) {
			l := startLauncher(t, sessionOpts{Trace: true, Cmd: agentCmd(agentLoop)})
			if !l.waitFile("started", 60*time.Second) {
				l.signal(syscall.SIGTERM)
				l.wait()
				t.Fatalf("the agent never ran")
			}
			name := l.sessionName() + helper.suffix
			killed := time.Now()
			if _, err := podman("kill", name); err != nil {
				t.Fatal(err)
			}
			l.wait()
			within(t, "exit after the "+helper.what+" died", l.Ended.Sub(killed), signalExitLimit)
			if l.Code == 0 {
				t.Errorf("exit code 0: the session must fail when its %s dies", helper.what)
			}
			l.wantCode(125)
			for _, want := range []string{helper.what, name, helper.ready} {
				if !strings.Contains(l.Stderr(), want) {
					t.Errorf("stderr does not show %q", want)
				}
			}
			wantStopped(t, l, killed)
			assertNoLeftovers(t)
		})
	}
	row(t, "the podman API service dying mid-session ends it non-zero, naming it, and still tears down", func(t *testing.T) {
		base := takeInventory(t)
		l := startLauncher(t, sessionOpts{Trace: true, Cmd: agentCmd(agentLoop)})
		if !l.waitFile("started", 60*time.Second) {
			l.signal(syscall.SIGTERM)
			l.wait()
			t.Fatalf("the agent never ran")
		}
		pid := serviceOf(l)
		if pid == 0 {
			l.signal(syscall.SIGTERM)
			l.wait()
			t.Fatalf("cannot find the session's API service among %v", apiServices())
		}
		killed := time.Now()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		l.wait()
		within(t, "exit after the API service died", l.Ended.Sub(killed), signalExitLimit)
		if l.Code == 0 || l.Code == 130 {
			t.Errorf("exit code %d: the session must fail when its podman service dies", l.Code)
		}
		if s := strings.ToLower(l.Stderr()); !strings.Contains(s, "podman") || !strings.Contains(s, "service") {
			t.Errorf("stderr does not say the podman service died")
		}
		wantStopped(t, l, killed)
		assertNoLeftovers(t)
		wantInventory(t, base, "after the service died", l.HomeVolume)
	})
}

func TestReliabilityBadEnvironment(t *testing.T) {
	noPodmanDir := mkdir(t, "empty-path-")
	// A uid the machine has no user and no subordinate ids for.
	noSubIDs := unmappedUID(t)
	cases := []struct {
		name string
		env  map[string]string
		want []string
		fast time.Duration
		uid  int
		// homeNotOurs makes the home volume exist beforehand, made by
		// podman itself and used by a container of its own.
		homeNotOurs bool
	}{
		{"no podman at AGENT_SANDBOX_PODMAN", map[string]string{"AGENT_SANDBOX_PODMAN": "/nonexistent/podman"},
			[]string{"/nonexistent/podman", "install podman"}, 5 * time.Second, 0, false},
		{"no podman on PATH", map[string]string{"PATH": noPodmanDir},
			[]string{"podman not found", "install podman"}, 5 * time.Second, 0, false},
		{"podman 4.2 is too old", map[string]string{"AGENT_SANDBOX_PODMAN": "", fakePodmanEnv: "4.2.0"},
			[]string{"4.2.0", "too old", "4.3"}, 10 * time.Second, 0, false},
		{"podman 3.4 is too old", map[string]string{"AGENT_SANDBOX_PODMAN": "", fakePodmanEnv: "3.4.4"},
			[]string{"3.4.4", "too old", "4.3"}, 10 * time.Second, 0, false},
		{"no XDG_RUNTIME_DIR", map[string]string{"XDG_RUNTIME_DIR": ""},
			[]string{"XDG_RUNTIME_DIR", "export XDG_RUNTIME_DIR="}, 5 * time.Second, 0, false},
		{"missing agent image", map[string]string{"AGENT_SANDBOX_IMAGE": "localhost/nope:1"},
			[]string{"localhost/nope:1", "unset AGENT_SANDBOX_IMAGE"}, 10 * time.Second, 0, false},
		{"missing router image", map[string]string{"AGENT_SANDBOX_ROUTER_IMAGE": "localhost/nope-router:1"},
			[]string{"localhost/nope-router:1", "unset AGENT_SANDBOX_ROUTER_IMAGE"}, 10 * time.Second, 0, false},
		{"no subordinate id range", nil,
			[]string{"/etc/subuid has no range for " + strconv.Itoa(noSubIDs), "usermod --add-subuids"}, 5 * time.Second, noSubIDs, false},
		{"home volume in use by a container not of agent-sandbox", nil,
			[]string{"is in use by asb-e2e-foreign-", "did not create", "AGENT_SANDBOX_HOME_VOLUME"}, 10 * time.Second, 0, true},
	}
	for _, c := range cases {
		row(t, c.name+": one clear error naming the fix, exit 1 or 125, nothing created", func(t *testing.T) {
			env := map[string]string{"AGENT_SANDBOX_TRACE": ""}
			for k, v := range c.env {
				env[k] = v
			}
			if v, ok := c.env[fakePodmanEnv]; ok {
				delete(env, fakePodmanEnv)
				env["AGENT_SANDBOX_PODMAN"] = fakePodman(t, v)
			}
			home := ""
			if c.homeNotOurs {
				home = foreignHomeVolume(t)
			}
			base := takeInventory(t)
			l := startLauncher(t, sessionOpts{Trace: true, Cmd: []string{"true"}, Env: env, UID: c.uid, HomeVolume: home}).wait()
			if l.Code != 1 && l.Code != 125 {
				t.Errorf("exit code = %d, want 1 or 125", l.Code)
			}
			within(t, "the refusal", l.Ended.Sub(l.Started), c.fast)
			errLines := lines(l.Stderr())
			if len(errLines) != 1 {
				t.Errorf("stderr has %d lines, want one clear error", len(errLines))
			}
			for _, w := range c.want {
				if !strings.Contains(l.Stderr(), w) {
					t.Errorf("stderr lacks %q", w)
				}
			}
			if _, err := podman("volume", "exists", l.HomeVolume); err == nil && !c.homeNotOurs {
				t.Errorf("the home volume %s was created", l.HomeVolume)
			}
			if c.homeNotOurs {
				if out, _ := podman("volume", "inspect", "--format", "{{.Labels}}", l.HomeVolume); strings.Contains(out, "agent-sandbox") {
					t.Errorf("the launcher changed the volume it refused: labels %s", out)
				}
			}
			assertNoLeftovers(t)
			wantInventory(t, base, "after the refusal")
		})
	}
}

// unmappedUID is a uid with no passwd entry and no range in /etc/subuid
// or /etc/subgid.
func unmappedUID(t *testing.T) int {
	t.Helper()
	for uid := 4242; uid < 4300; uid++ {
		if _, err := user.LookupId(strconv.Itoa(uid)); err == nil {
			continue
		}
		if idsMention("/etc/subuid", uid) || idsMention("/etc/subgid", uid) {
			continue
		}
		return uid
	}
	t.Fatal("no free uid in 4242..4299")
	return 0
}

func idsMention(file string, uid int) bool {
	b, _ := os.ReadFile(file)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, strconv.Itoa(uid)+":") {
			return true
		}
	}
	return false
}

// foreignHomeVolume makes a volume with podman's CLI, without
// agent-sandbox's label, and a container that uses it.
func foreignHomeVolume(t *testing.T) string {
	t.Helper()
	name := homeVolume(t)
	if _, err := podman("volume", "create", name); err != nil {
		t.Fatal(err)
	}
	user := "asb-e2e-foreign-" + newNonce(t)
	if _, err := podman("create", "--name", user, "-v", name+":/data", harness.sandboxImage, "true"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := podman("rm", "-f", user); err != nil {
			t.Errorf("cannot remove %s: %v", user, err)
		}
	})
	return name
}

// externalContainers are the containers podman's storage holds that are not
// podman's own: a build's working containers.
func externalContainers(t *testing.T) []string {
	t.Helper()
	out, err := podman("ps", "-a", "--external", "--format", "{{.ID}} {{.Names}}")
	if err != nil {
		t.Fatal(err)
	}
	return lines(out)
}

func TestReliabilitySignalPhases(t *testing.T) {
	row(t, "SIGINT during the first-run build: exit 130, nothing left, no half-built image tagged", func(t *testing.T) {
		untagWithBackup(t, defaultRouterImage)
		base := takeInventory(t)
		builds := externalContainers(t)
		l := startLauncher(t, sessionOpts{Trace: true, Cmd: []string{"true"}, Timeout: 3 * time.Minute,
			// Unset: the launcher's own default images, one of them missing.
			Env: map[string]string{"AGENT_SANDBOX_IMAGE": "", "AGENT_SANDBOX_ROUTER_IMAGE": ""}})
		// The router's build, from the layer cache, takes seconds: the
		// signal goes as soon as it is under way.
		if !l.waitStderrRe(regexp.MustCompile(`image `+regexp.QuoteMeta(defaultRouterImage)+` is missing: building it`), 60*time.Second) {
			l.signal(syscall.SIGTERM)
			l.wait()
			t.Fatal("the launcher never started building the router image")
		}
		l.signal(syscall.SIGINT)
		l.wait()
		l.wantCode(130)
		within(t, "exit after SIGINT", l.sinceSignal(), signalExitLimit)
		if strings.Contains(l.Stderr(), "agent-sandbox: built "+defaultRouterImage) {
			t.Errorf("the build finished before the signal: the row proved nothing")
		}
		if _, err := podman("image", "exists", defaultRouterImage); err == nil {
			t.Errorf("%s is tagged after a build that was interrupted", defaultRouterImage)
		}
		if now := externalContainers(t); !slices.Equal(now, builds) {
			t.Errorf("the interrupted build left working containers: before %q, after %q", builds, now)
		}
		assertNoLeftovers(t)
		wantInventory(t, base, "after the interrupted build")
	})
	row(t, "a second SIGINT during teardown: teardown finishes, exit 130, nothing left", func(t *testing.T) {
		vol := createVolume(t)
		base := takeInventory(t)
		// An agent that ignores SIGTERM holds teardown in the stop's grace
		// period (3 s), so the second signal lands inside teardown. The
		// agent says when the stop's SIGTERM came (wait returns at once on
		// a trapped signal): teardown has begun.
		l := startLauncher(t, sessionOpts{Trace: true, HomeVolume: vol, Cmd: agentCmd("trap 'touch got-term' TERM; touch started; while :; do sleep 1 & wait $!; done")})
		if !l.waitFile("started", 60*time.Second) {
			l.signal(syscall.SIGTERM)
			l.wait()
			t.Fatal("the agent never ran")
		}
		l.signal(syscall.SIGINT)
		first := l.SignalledAt
		if !l.waitFile("got-term", 30*time.Second) {
			t.Fatal("the agent never got the stop's SIGTERM (or the launcher ended first): the second signal cannot land in teardown")
		}
		if l.done() {
			t.Fatal("the launcher ended before the second signal: it cannot land in teardown")
		}
		l.signal(syscall.SIGINT)
		l.wait()
		l.wantCode(130)
		within(t, "exit after the first SIGINT", l.Ended.Sub(first), signalExitLimit)
		assertNoLeftovers(t)
		wantInventory(t, base, "after two signals")
	})
}
