//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func indent(s string) string {
	if s == "" {
		return "    (empty)"
	}
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

// mkdir makes a fresh directory in the run's work dir, under $HOME but never
// $HOME itself (the launcher refuses to mount that).
func mkdir(t *testing.T, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp(harness.workDir, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// launchDir is a fresh launch directory holding the test CA as ca.pem.
func launchDir(t *testing.T) string {
	t.Helper()
	dir := mkdir(t, "launch-")
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), harness.caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// homeVolume names a volume private to the test and removes it afterwards.
func homeVolume(t *testing.T) string {
	t.Helper()
	name := homeVolumePrefix + newNonce(t)
	t.Cleanup(func() {
		if _, err := podman("volume", "exists", name); err != nil {
			return
		}
		if _, err := podman("volume", "rm", "-f", name); err != nil {
			t.Errorf("cannot remove home volume: %v", err)
		}
	})
	return name
}

// leftovers is what sessions must not leave: podman objects named or
// labelled as a session, launcher temp dirs, and podman API services.
type leftovers struct {
	Containers, Pods, Networks, RuntimeDirs, Services []string
}

func (l leftovers) empty() bool {
	return len(l.Containers)+len(l.Pods)+len(l.Networks)+len(l.RuntimeDirs)+len(l.Services) == 0
}

func (l leftovers) String() string {
	var b strings.Builder
	for _, kv := range []struct {
		k string
		v []string
	}{{"containers", l.Containers}, {"pods", l.Pods}, {"networks", l.Networks}, {"runtime dirs", l.RuntimeDirs}, {"api services", l.Services}} {
		if len(kv.v) > 0 {
			fmt.Fprintf(&b, "  %s: %s\n", kv.k, strings.Join(kv.v, ", "))
		}
	}
	return b.String()
}

// minus drops what was already there before the run.
func (l leftovers) minus(base leftovers) leftovers {
	drop := func(a, b []string) []string {
		var out []string
		for _, x := range a {
			if !slices.Contains(b, x) {
				out = append(out, x)
			}
		}
		return out
	}
	return leftovers{
		Containers:  drop(l.Containers, base.Containers),
		Pods:        drop(l.Pods, base.Pods),
		Networks:    drop(l.Networks, base.Networks),
		RuntimeDirs: drop(l.RuntimeDirs, base.RuntimeDirs),
		Services:    drop(l.Services, base.Services),
	}
}

const sessionLabel = "agent-sandbox.session"

func isSessionName(name string) bool {
	return strings.HasPrefix(name, "agent-sandbox-") && name != egressNet
}

func listLeftovers() (leftovers, error) {
	var l leftovers
	var err error
	// A pod's infra container is named after the pod's id; the pod name
	// beside it lets split() attribute it.
	if l.Containers, err = sessionObjects([]string{"ps", "-a", "--pod"}, "{{.Names}}{{if .PodName}} (pod {{.PodName}}){{end}}"); err != nil {
		return l, err
	}
	if l.Pods, err = sessionObjects([]string{"pod", "ps"}, "{{.Name}}"); err != nil {
		return l, err
	}
	if l.Networks, err = sessionObjects([]string{"network", "ls"}, "{{.Name}}"); err != nil {
		return l, err
	}
	for _, e := range runtimeEntries() {
		// A running service's socket is a leftover only if nobody uses it.
		if sock, ok := strings.CutPrefix(e, serviceDir+"/"); ok && serviceInUse(filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), serviceDir, sock)) {
			continue
		}
		l.RuntimeDirs = append(l.RuntimeDirs, e)
	}
	for _, svc := range apiServices() {
		if sock := serviceSocket.FindStringSubmatch(svc); sock != nil && serviceInUse(sock[1]) {
			continue
		}
		l.Services = append(l.Services, svc)
	}
	return l, nil
}

// serviceSocket is the socket in a shared API service's command line.
var serviceSocket = regexp.MustCompile(`unix://(\S+/` + serviceDir + `/[0-9a-f]+\.sock)`)

// serviceInUse reports whether a live process holds its share of the API
// service on sock (internal/apiservice: a flock on KEY.users for as long
// as it uses it). A service in use (by an `agent-sandbox log` that still
// runs, say) is not a leftover; one nobody holds is. Read from /proc/locks,
// which takes no lock itself: taking one would race the sessions' own.
func serviceInUse(sock string) bool {
	var st syscall.Stat_t
	if err := syscall.Stat(strings.TrimSuffix(sock, ".sock")+".users", &st); err != nil {
		return false
	}
	locks, err := os.ReadFile("/proc/locks")
	if err != nil {
		return false
	}
	suffix := ":" + strconv.FormatUint(st.Ino, 10)
	for _, line := range strings.Split(string(locks), "\n") {
		f := strings.Fields(line)
		// 1: FLOCK  ADVISORY  READ 1234 00:2a:5678 0 EOF
		if len(f) >= 6 && f[1] == "FLOCK" && strings.HasSuffix(f[5], suffix) {
			if pid, err := strconv.Atoi(f[4]); err == nil && syscall.Kill(pid, 0) == nil {
				return true
			}
		}
	}
	return false
}

// registerDir is the session register under XDG_RUNTIME_DIR, which all
// sessions share: what counts are the claims in it.
const registerDir = "agent-sandbox-sessions"

// teardownLog is where keepers write once their launcher has returned
// (teardownLog in session.go): the user's file, kept across sessions.
const teardownLog = "agent-sandbox-teardown.log"

// gateDir holds the launchers' copies of the agent's gate.
const gateDir = "agent-sandbox-gate"

// serviceDir holds the shared API services' sockets and locks
// (internal/apiservice.DirName); the locks stay, the socket and the pid
// file only while a service runs.
const serviceDir = "agent-sandbox-podman"

// runtimeEntries are the launchers' temp dirs under XDG_RUNTIME_DIR, the
// claims in the session register, each named after its session, and the
// files of a running API service.
func runtimeEntries() []string {
	var out []string
	matches, _ := filepath.Glob(filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "agent-sandbox-*"))
	for _, m := range matches {
		// The launchers' copies of the agent's gate: a cache the user's
		// sessions share, which a new copy prunes (gate.go).
		if filepath.Base(m) == teardownLog || filepath.Base(m) == gateDir {
			continue
		}
		if filepath.Base(m) == serviceDir {
			running, _ := filepath.Glob(filepath.Join(m, "*.sock"))
			pids, _ := filepath.Glob(filepath.Join(m, "*.pid"))
			for _, f := range append(running, pids...) {
				out = append(out, serviceDir+"/"+filepath.Base(f))
			}
			continue
		}
		if filepath.Base(m) != registerDir {
			out = append(out, filepath.Base(m))
			continue
		}
		claims, _ := filepath.Glob(filepath.Join(m, "*.json"))
		for _, c := range claims {
			out = append(out, registerDir+"/"+filepath.Base(c))
		}
	}
	return out
}

// sessionObjects lists by name prefix and by label in one call: a bug could
// drop either. A labelled object is shown with its session so split() can
// attribute it.
func sessionObjects(list []string, format string) ([]string, error) {
	all, err := podman(append(list, "--format", format+"\t{{.Labels}}")...)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range lines(all) {
		name, labels, _ := strings.Cut(line, "\t")
		name = strings.TrimSpace(name)
		labelled := strings.Contains(labels, sessionLabel)
		if m := sessionLabelValue.FindStringSubmatch(labels); m != nil && !strings.Contains(name, m[1]) {
			name += " [session " + m[1] + "]"
		}
		if labelled || isSessionName(name) || strings.Contains(name, "(pod agent-sandbox-") {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// sessionLabelValue reads the session label from podman's map or k=v output.
var sessionLabelValue = regexp.MustCompile(regexp.QuoteMeta(sessionLabel) + `[:=](agent-sandbox-[0-9]+-[0-9]+)`)

// apiServices finds this user's `podman system service` processes serving a
// socket in a launcher temp dir.
func apiServices() []string {
	var out []string
	for _, p := range userProcesses() {
		cmdline := strings.Join(p.args, " ")
		if strings.Contains(cmdline, "system service") && strings.Contains(cmdline, "/agent-sandbox-") {
			out = append(out, fmt.Sprintf("pid %d: %s", p.pid, cmdline))
		}
	}
	slices.Sort(out)
	return out
}

// process is one of this user's processes: its pid and its arguments.
type process struct {
	pid  int
	args []string
}

// userProcesses lists the processes of the user running the tests.
func userProcesses() []process {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []process
	for _, p := range procs {
		fi, err := os.Stat(filepath.Dir(p))
		if err != nil {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil || len(b) == 0 {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		out = append(out, process{pid, strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")})
	}
	return out
}

// sessionPID finds the launcher pid in a session name, a runtime dir or a
// service command line: agent-sandbox-<unix time>-<pid>.
var sessionPID = regexp.MustCompile(`agent-sandbox-[0-9]+-([0-9]+)`)

// split separates what this run's launchers left from what other users of
// the same podman store are running meanwhile. Anything that cannot be
// attributed counts as ours: an unknown naming scheme must not hide a leak.
func (l leftovers) split() (ours, foreign leftovers) {
	part := func(items []string) (mine, others []string) {
		for _, it := range items {
			m := sessionPID.FindStringSubmatch(it)
			if m == nil {
				mine = append(mine, it)
				continue
			}
			pid, _ := strconv.Atoi(m[1])
			if _, ok := launched.Load(pid); ok {
				mine = append(mine, it)
			} else {
				others = append(others, it)
			}
		}
		return mine, others
	}
	ours.Containers, foreign.Containers = part(l.Containers)
	ours.Pods, foreign.Pods = part(l.Pods)
	ours.Networks, foreign.Networks = part(l.Networks)
	ours.RuntimeDirs, foreign.RuntimeDirs = part(l.RuntimeDirs)
	ours.Services, foreign.Services = part(l.Services)
	return ours, foreign
}

func currentLeftovers() (ours, foreign leftovers, err error) {
	l, err := listLeftovers()
	if err != nil {
		return l, l, err
	}
	ours, foreign = l.minus(harness.baseline).split()
	return ours, foreign, nil
}

// assertNoLeftovers fails the row if any session object outlived its
// launcher. Called after every session.
func assertNoLeftovers(t *testing.T) {
	t.Helper()
	ours, foreign, err := currentLeftovers()
	if err != nil {
		t.Errorf("cannot list leftovers: %v", err)
		return
	}
	if !foreign.empty() {
		t.Logf("ignoring session objects of launchers this run did not start:\n%s", foreign)
	}
	if ours.empty() {
		return
	}
	t.Errorf("the session left behind:\n%s", ours)
	// Say whether it was a race with teardown or a real leak, then clean up so
	// one leak does not fail every later row.
	start := time.Now()
	later, _, err := currentLeftovers()
	for err == nil && !later.empty() && time.Since(start) < 3*time.Second {
		time.Sleep(200 * time.Millisecond)
		later, _, err = currentLeftovers()
	}
	if err == nil {
		if later.empty() {
			t.Logf("all of it was gone %v later: teardown finished after the launcher exited", time.Since(start).Round(100*time.Millisecond))
			return
		}
		t.Logf("still there 3s later:\n%s", later)
		removeLeftovers(t, later)
		// What could not be removed is reported here once, not by every
		// later row.
		if rest, _, err := currentLeftovers(); err == nil {
			harness.baseline = harness.baseline.plus(rest)
		}
	}
}

func (l leftovers) plus(o leftovers) leftovers {
	return leftovers{
		Containers:  append(slices.Clone(l.Containers), o.Containers...),
		Pods:        append(slices.Clone(l.Pods), o.Pods...),
		Networks:    append(slices.Clone(l.Networks), o.Networks...),
		RuntimeDirs: append(slices.Clone(l.RuntimeDirs), o.RuntimeDirs...),
		Services:    append(slices.Clone(l.Services), o.Services...),
	}
}

// removeLeftovers removes only what a launcher of this run created.
func removeLeftovers(t *testing.T, l leftovers) {
	t.Helper()
	ours := func(item string) bool {
		m := sessionPID.FindStringSubmatch(item)
		if m == nil {
			return false
		}
		pid, _ := strconv.Atoi(m[1])
		_, ok := launched.Load(pid)
		return ok
	}
	for _, c := range l.Containers {
		if ours(c) {
			name, _, _ := strings.Cut(c, " ")
			_, _ = podman("rm", "-f", "-t", "0", name)
		}
	}
	for _, p := range l.Pods {
		if ours(p) {
			_, _ = podman("pod", "rm", "-f", "-t", "0", p)
		}
	}
	for _, n := range l.Networks {
		if ours(n) {
			_, _ = podman("network", "rm", "-f", n)
		}
	}
	for _, d := range l.RuntimeDirs {
		if ours(d) {
			removeAll(filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), d))
		}
	}
	for _, s := range l.Services {
		var pid int
		if _, err := fmt.Sscanf(s, "pid %d:", &pid); err == nil && ours(s) {
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
	}
	if after, _, err := currentLeftovers(); err == nil && !after.empty() {
		t.Logf("could not clean up:\n%s", after)
	}
}
