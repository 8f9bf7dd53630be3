//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The reliability rows drive the launcher by hand: they signal it at a
// chosen step (seen in its AGENT_SANDBOX_TRACE lines), run several at once,
// or kill it outright, which runSession cannot do.

// relOpts describes one launcher run.
type relOpts struct {
	// Args follow the binary; nil means --exec with Cmd.
	Args []string
	Cmd  []string
	// Dir is the launch directory and HomeVolume the volume at
	// /home/claude; "" means fresh ones.
	Dir, HomeVolume string
	// Env adds to or (with "") removes from the launcher's environment.
	Env   map[string]string
	Stdin io.Reader
	// PTY, when set, is the launcher's stdin, stdout and controlling
	// terminal (the slave side).
	PTY *os.File
	// SuParent, with PTY, runs the launcher under a parent like `su` (see
	// suParent): the terminal's session leader, which takes its hang-up
	// and passes nothing on, with the launcher as its foreground job.
	SuParent bool
	Timeout  time.Duration
	// UID, when set, runs the launcher as this uid and gid in a user
	// namespace of its own mapped onto the test user: a user that
	// /etc/subuid and /etc/subgid know nothing of.
	UID int
	// Bin runs the launcher under another name (a `claude` symlink, as
	// users alias it); "" means the built binary.
	Bin string
}

// launcher is one running agent-sandbox process.
type launcher struct {
	t   *testing.T
	cmd *exec.Cmd
	pid int // the launcher's; cmd's is its su-like parent's, if it has one
	// keeper is the session's own process, which the launcher starts
	// (internal/keeper): its pid names the session.
	keeper *keeperProc
	args   []string
	Dir    string
	Home   string
	// configHome is its XDG_CONFIG_HOME, which podman reads: the shared
	// API service it uses is the one started with it (serviceOf).
	configHome string

	mu       sync.Mutex
	stdout   bytes.Buffer
	errLines []string
	changed  chan struct{} // closed and replaced on every new stderr line
	exited   chan struct{}
	outDone  chan struct{}

	Started, Ended time.Time
	Code           int    // exit status, -1 if killed by a signal
	KilledBy       string // the signal that killed it, if any
	TimedOut       bool
	SignalledAt    time.Time
	// KeeperRanAtReturn: the session's teardown still went on when the
	// launcher returned.
	KeeperRanAtReturn bool
	// OutClosed is when the launcher's stdout and stderr closed.
	OutClosed time.Time
}

const relTimeout = 90 * time.Second

// startLauncher starts agent-sandbox with step tracing on and returns at once.
func startLauncher(t *testing.T, o relOpts) *launcher {
	t.Helper()
	l := &launcher{t: t, Dir: o.Dir, Home: o.HomeVolume, changed: make(chan struct{}),
		exited: make(chan struct{}), outDone: make(chan struct{})}
	if l.Dir == "" {
		l.Dir = launchDir(t)
	}
	if l.Home == "" {
		l.Home = homeVolume(t)
	}
	allow := filepath.Join(mkdir(t, "cfg-"), "allowed-hosts")
	if err := os.WriteFile(allow, []byte(defaultAllowlist), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"PWD":                          l.Dir,
		"XDG_CONFIG_HOME":              mkdir(t, "xdg-"),
		"AGENT_SANDBOX_ALLOWLIST":      allow,
		"AGENT_SANDBOX_HOME_VOLUME":    l.Home,
		"AGENT_SANDBOX_UPSTREAM_DNS":   fakeIP,
		"AGENT_SANDBOX_UPSTREAM_ALLOW": egressSubnet,
		"AGENT_SANDBOX_IMAGE":          harness.sandboxImage,
		"AGENT_SANDBOX_ROUTER_IMAGE":   harness.routerImage,
		"AGENT_SANDBOX_TRACE":          "1",
	}
	for k, v := range o.Env {
		env[k] = v
	}
	l.configHome = env["XDG_CONFIG_HOME"]
	l.args = o.Args
	if l.args == nil {
		l.args = append([]string{"--exec"}, o.Cmd...)
	}
	if n := timeouts.Load(); n >= maxTimeouts {
		t.Fatalf("not launched: %d sessions already hung; fix that first (see the first timed-out row)", n)
	}
	bin := harness.bin
	if o.Bin != "" {
		bin = o.Bin
	}
	var pidR, pidW *os.File
	if o.SuParent {
		if o.PTY == nil {
			t.Fatal("a su-like parent needs a terminal (relOpts.PTY)")
		}
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		if pidR, pidW, err = os.Pipe(); err != nil {
			t.Fatal(err)
		}
		defer pidR.Close()
		l.cmd = exec.Command(self, append([]string{bin}, l.args...)...)
		l.cmd.ExtraFiles = []*os.File{pidW}
		env[suParentEnv] = "1"
	} else {
		l.cmd = exec.Command(bin, l.args...)
	}
	l.cmd.Dir = l.Dir
	l.cmd.Env = sessionEnv(env)

	// Pipes of our own: a child that inherits one must not hold up Wait.
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	l.cmd.Stderr = errW
	var outR, outW *os.File
	if o.PTY != nil {
		l.cmd.Stdin, l.cmd.Stdout = o.PTY, o.PTY
		l.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	} else {
		if o.UID != 0 {
			l.cmd.SysProcAttr = &syscall.SysProcAttr{
				Cloneflags:  syscall.CLONE_NEWUSER,
				UidMappings: []syscall.SysProcIDMap{{ContainerID: o.UID, HostID: os.Getuid(), Size: 1}},
				GidMappings: []syscall.SysProcIDMap{{ContainerID: o.UID, HostID: os.Getgid(), Size: 1}},
			}
		}
		if outR, outW, err = os.Pipe(); err != nil {
			t.Fatal(err)
		}
		l.cmd.Stdout = outW
		l.cmd.Stdin = o.Stdin
		if o.Stdin == nil {
			l.cmd.Stdin = strings.NewReader("")
		}
	}
	l.Started = time.Now()
	err = l.cmd.Start()
	errW.Close()
	if pidW != nil {
		pidW.Close()
	}
	if outW != nil {
		outW.Close()
	}
	if err != nil {
		errR.Close()
		if outR != nil {
			outR.Close()
		}
		t.Fatalf("cannot run %s: %v", harness.bin, err)
	}
	launched.Store(l.cmd.Process.Pid, true)
	l.pid = l.cmd.Process.Pid
	if pidR != nil {
		// The parent writes it once the launcher runs, or exits.
		b, _ := io.ReadAll(pidR)
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			_ = l.cmd.Process.Kill()
			_ = l.cmd.Wait()
			out, _ := io.ReadAll(errR)
			errR.Close()
			t.Fatalf("the su-like parent did not start the launcher (pid %q); its stderr:\n%s", b, out)
		}
		l.pid = pid
		launched.Store(pid, true)
	}
	l.keeper = trackKeeper(l.pid)

	var readers sync.WaitGroup
	readers.Go(func() {
		defer errR.Close()
		sc := bufio.NewScanner(errR)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			l.mu.Lock()
			l.errLines = append(l.errLines, sc.Text())
			close(l.changed)
			l.changed = make(chan struct{})
			l.mu.Unlock()
		}
	})
	if outR != nil {
		readers.Go(func() {
			defer outR.Close()
			buf := make([]byte, 64*1024)
			for {
				n, err := outR.Read(buf)
				l.mu.Lock()
				l.stdout.Write(buf[:n])
				l.mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	go func() {
		readers.Wait()
		l.mu.Lock()
		l.OutClosed = time.Now()
		l.mu.Unlock()
		close(l.outDone)
	}()
	go func() {
		err := l.cmd.Wait()
		keeperRan := l.keeper.Pid() != 0 && l.keeper.running()
		l.mu.Lock()
		l.Ended = time.Now()
		l.KeeperRanAtReturn = keeperRan
		l.Code = l.cmd.ProcessState.ExitCode()
		if ws, ok := l.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			l.KilledBy = ws.Signal().String()
		}
		if err != nil && l.Code == 0 {
			l.Code = -1
		}
		close(l.exited)
		close(l.changed)
		l.changed = make(chan struct{})
		l.mu.Unlock()
	}()
	timeout := o.Timeout
	if timeout == 0 {
		timeout = relTimeout
	}
	go func() {
		select {
		case <-l.exited:
			return
		case <-time.After(timeout):
		}
		l.mu.Lock()
		l.TimedOut = true
		l.mu.Unlock()
		// As from a closing terminal; teardown still gets its chance.
		_ = l.send(syscall.SIGTERM)
		select {
		case <-l.exited:
		case <-time.After(45 * time.Second):
			_ = l.send(syscall.SIGKILL)
			_ = l.cmd.Process.Kill()
		}
	}()
	return l
}

// Pid is the launcher's pid, under a su-like parent too.
func (l *launcher) Pid() int { return l.pid }

// sessionPid is the pid in the session's name and dirs: its keeper's, or
// the launcher's if it ended before a keeper was seen.
func (l *launcher) sessionPid() int {
	if k := l.keeper.Pid(); k != 0 {
		return k
	}
	return l.pid
}

// send signals the launcher itself: under a su-like parent, directly, since
// that parent passes nothing on.
func (l *launcher) send(sig syscall.Signal) error {
	if l.pid != l.cmd.Process.Pid {
		return syscall.Kill(l.pid, sig)
	}
	return l.cmd.Process.Signal(sig)
}

func (l *launcher) done() bool {
	select {
	case <-l.exited:
		return true
	default:
		return false
	}
}

// Stderr is everything the launcher wrote to stderr so far.
func (l *launcher) Stderr() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.errLines, "\n")
}

func (l *launcher) Stdout() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stdout.String()
}

// waitStderrRe waits for a stderr line matching re; false if the launcher
// ended or the time ran out first.
func (l *launcher) waitStderrRe(re *regexp.Regexp, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for {
		l.mu.Lock()
		for _, line := range l.errLines {
			if re.MatchString(line) {
				l.mu.Unlock()
				return true
			}
		}
		ch := l.changed
		l.mu.Unlock()
		if l.done() {
			return false
		}
		select {
		case <-ch:
		case <-deadline:
			return false
		}
	}
}

// waitFile waits for a file in the launch dir; false if the launcher ended
// or the time ran out first.
func (l *launcher) waitFile(name string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(filepath.Join(l.Dir, name)); err == nil {
			return true
		}
		if l.done() || time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (l *launcher) signal(sig syscall.Signal) {
	l.t.Helper()
	l.mu.Lock()
	l.SignalledAt = time.Now()
	l.mu.Unlock()
	if err := l.send(sig); err != nil {
		l.t.Errorf("cannot send %s to the launcher: %v", sig, err)
	}
}

// wait waits for the launcher to exit and logs what it did.
func (l *launcher) wait() *launcher {
	l.t.Helper()
	<-l.exited
	select {
	case <-l.outDone:
	case <-time.After(2 * time.Second):
	}
	if l.TimedOut {
		timeouts.Add(1)
		l.t.Errorf("session did not finish in time (sent SIGTERM)")
	}
	waitKeeper(l.t, l.keeper, l.Ended)
	how := fmt.Sprintf("exit %d", l.Code)
	if l.KilledBy != "" {
		how = "killed by " + l.KilledBy
	}
	out := l.Stdout()
	if len(out) > 2000 {
		out = out[:2000] + fmt.Sprintf("...(%d bytes)", len(out))
	}
	l.t.Logf("session %s (pid %d) in %s: %s after %s\nstdout:\n%s\nstderr:\n%s", describeArgs(l.args), l.Pid(), l.Dir,
		how, l.Ended.Sub(l.Started).Round(time.Millisecond), indent(out), indent(l.Stderr()))
	return l
}

// sinceSignal is how long the launcher ran after it was signalled.
func (l *launcher) sinceSignal() time.Duration {
	if l.SignalledAt.IsZero() {
		return 0
	}
	return l.Ended.Sub(l.SignalledAt)
}

func (l *launcher) wantCode(want int) {
	l.t.Helper()
	if l.Code != want {
		l.t.Errorf("exit code = %d (%s), want %d; stderr:\n%s", l.Code, l.KilledBy, want, indent(l.Stderr()))
	}
}

// sessionName finds the session's name: agent-sandbox-<time>-<pid>.
func (l *launcher) sessionName() string {
	re := regexp.MustCompile(`agent-sandbox-[0-9]+-` + strconv.Itoa(l.sessionPid()) + `\b`)
	if m := re.FindString(l.Stderr()); m != "" {
		return m
	}
	matches, _ := filepath.Glob(filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), fmt.Sprintf("agent-sandbox-*-%d.*", l.sessionPid())))
	for _, m := range matches {
		if s := re.FindString(filepath.Base(m)); s != "" {
			return s
		}
	}
	return ""
}

// fileIn reads a file the agent wrote in the launch dir.
func (l *launcher) fileIn(name string) string {
	b, _ := os.ReadFile(filepath.Join(l.Dir, name))
	return string(b)
}

// createVolume makes a home volume before a baseline is taken, so that the
// first session does not change the count.
func createVolume(t *testing.T) string {
	t.Helper()
	name := homeVolume(t)
	if _, err := podman("volume", "create", name); err != nil {
		t.Fatal(err)
	}
	return name
}

// inventory is what a user's podman and runtime dir hold, by kind: the leak
// check compares it before and after, in the style of podman's own tests.
type inventory map[string][]string

var inventoryKinds = []string{"containers", "pods", "networks", "volumes", "images", "netns", "mounts", "firewall", "sockets", "runtime dirs", "tmp files", "processes"}

func takeInventory(t *testing.T) inventory {
	t.Helper()
	inv := inventory{}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
	)
	// Side by side: the podman CLI is slow to start on a busy machine.
	for kind, q := range map[string][]string{
		"containers": {"ps", "-a", "--format", "{{.Names}}"},
		"pods":       {"pod", "ps", "--format", "{{.Name}}"},
		"networks":   {"network", "ls", "--format", "{{.Name}}"},
		"volumes":    {"volume", "ls", "--format", "{{.Name}}"},
		"images":     {"images", "-a", "--noheading", "--format", "{{.ID}} {{.Repository}}:{{.Tag}}"},
	} {
		wg.Go(func() {
			out, err := podman(q...)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			inv[kind] = lines(out)
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("inventory: %v", errs)
	}
	rt := os.Getenv("XDG_RUNTIME_DIR")
	if entries, err := os.ReadDir(filepath.Join(rt, "netns")); err == nil {
		for _, e := range entries {
			inv["netns"] = append(inv["netns"], e.Name())
		}
	}
	_ = filepath.WalkDir(rt, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&fs.ModeSocket != 0 {
			inv["sockets"] = append(inv["sockets"], strings.TrimPrefix(p, rt+"/"))
		}
		return nil
	})
	inv["runtime dirs"] = runtimeEntries()
	inv["processes"] = helperProcesses()
	inv["mounts"] = rootlessMounts(rt)
	inv["firewall"] = rootlessFirewall(t, rt)
	inv["tmp files"] = tmpFiles()
	for k := range inv {
		slices.Sort(inv[k])
	}
	return inv
}

// rootlessMounts are the mount points in rootless podman's own mount
// namespace (its pause process's): containers' root file systems, their
// shm and network namespace mounts end up there.
func rootlessMounts(rt string) []string {
	b, err := os.ReadFile(filepath.Join(rt, "libpod", "tmp", "pause.pid"))
	if err != nil {
		return nil
	}
	info, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(string(b)), "mountinfo"))
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range lines(string(info)) {
		if f := strings.Fields(l); len(f) > 4 {
			out = append(out, f[4])
		}
	}
	return out
}

// rootlessFirewall is the firewall of rootless podman's network namespace
// (iptables with podman 4's netavark, nftables with podman 5's), without
// counters: netavark adds chains and rules per network and container.
func rootlessFirewall(t *testing.T, rt string) []string {
	t.Helper()
	nsFiles, _ := filepath.Glob(filepath.Join(rt, "netns", "rootless-netns*"))
	more, _ := filepath.Glob(filepath.Join(rt, "containers", "networks", "rootless-netns", "rootless-netns"))
	nsFiles = append(nsFiles, more...)
	if len(nsFiles) == 0 {
		return nil
	}
	out, err := podman("unshare", "nsenter", "--net="+nsFiles[0], "sh", "-c",
		"PATH=/usr/sbin:/sbin:$PATH; { iptables-save 2>/dev/null; nft list ruleset 2>/dev/null; } | grep -v '^#' || true")
	if err != nil {
		t.Fatalf("inventory: the rootless network namespace's firewall: %v", err)
	}
	var rules []string
	for _, l := range lines(out) {
		rules = append(rules, firewallCounters.ReplaceAllString(l, ""))
	}
	// The egress network, which the harness keeps up, has rules of its
	// own: none seen means the inventory is blind, not that all is well.
	if len(rules) == 0 {
		t.Fatalf("inventory: no firewall rules seen in %s (is iptables-save or nft installed?)", nsFiles[0])
	}
	return rules
}

var firewallCounters = regexp.MustCompile(` \[\d+:\d+\]$|counter packets \d+ bytes \d+`)

// tmpFiles are this user's entries in the shared temp dirs: nothing a
// session does may leave one.
func tmpFiles() []string {
	var out []string
	for _, dir := range []string{"/tmp", "/var/tmp", "/dev/shm"} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			fi, err := e.Info()
			if err != nil {
				continue
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == os.Getuid() {
				out = append(out, filepath.Join(dir, e.Name()))
			}
		}
	}
	return out
}

// helperProcesses are this user's podman helpers on the host; a leaked one
// outlives its session.
func helperProcesses() []string {
	var out []string
	for _, p := range userProcesses() {
		base := filepath.Base(p.args[0])
		cmdline := strings.Join(p.args, " ")
		switch {
		case base == "conmon", base == "slirp4netns", strings.HasPrefix(base, "pasta"), base == "rootlessport", base == "aardvark-dns":
		case strings.Contains(cmdline, "system service"):
		case strings.Contains(base, "agent-sandbox"):
		default:
			continue
		}
		out = append(out, fmt.Sprintf("%s (pid %d)", base, p.pid))
	}
	return out
}

// diff says what changed between two inventories; "" if nothing did.
func (a inventory) diff(b inventory) string {
	var sb strings.Builder
	for _, kind := range inventoryKinds {
		var added, gone []string
		for _, x := range b[kind] {
			if !slices.Contains(a[kind], x) {
				added = append(added, x)
			}
		}
		for _, x := range a[kind] {
			if !slices.Contains(b[kind], x) {
				gone = append(gone, x)
			}
		}
		if len(added)+len(gone) > 0 {
			fmt.Fprintf(&sb, "  %s: %d -> %d", kind, len(a[kind]), len(b[kind]))
			if len(added) > 0 {
				fmt.Fprintf(&sb, "; new: %s", strings.Join(added, ", "))
			}
			if len(gone) > 0 {
				fmt.Fprintf(&sb, "; gone: %s", strings.Join(gone, ", "))
			}
			sb.WriteString("\n")
		}
	}
	return sb.String()
}

func (a inventory) counts() string {
	var parts []string
	for _, kind := range inventoryKinds {
		parts = append(parts, fmt.Sprintf("%s=%d", kind, len(a[kind])))
	}
	return strings.Join(parts, " ")
}

// wantInventory fails the row unless the inventory is back to base, but
// for the named volumes the row created on purpose. A teardown that
// finishes after the launcher exited is still a failure, but the row says so.
// leakSince fails the row if the inventory differs from base once a
// session has ended, naming the session (what), and returns the inventory
// to compare the next session with: each leak is reported once, by the
// session that made it.
func leakSince(t *testing.T, base inventory, what string) inventory {
	t.Helper()
	now := takeInventory(t)
	for deadline := time.Now().Add(3 * time.Second); base.diff(now) != "" && time.Now().Before(deadline); {
		// podman's exit commands may still be finishing.
		time.Sleep(200 * time.Millisecond)
		now = takeInventory(t)
	}
	if d := base.diff(now); d != "" {
		t.Errorf("%s left this behind:\n%s", what, d)
	}
	return now
}

func wantInventory(t *testing.T, base inventory, what string, newVolumes ...string) {
	t.Helper()
	now := func() inventory {
		inv := takeInventory(t)
		inv["volumes"] = slices.DeleteFunc(inv["volumes"], func(v string) bool { return slices.Contains(newVolumes, v) })
		return inv
	}
	d := base.diff(now())
	if d == "" {
		return
	}
	// The row fails either way; watching a while longer only tells a late
	// teardown from a leak.
	later := d
	for deadline := time.Now().Add(3 * time.Second); later != "" && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		later = base.diff(now())
	}
	if later == "" {
		t.Errorf("%s: podman and the runtime dir were back to the start only up to 3s after the launcher exited:\n%s", what, d)
	} else {
		t.Errorf("%s: podman and the runtime dir differ from the start:\n%s", what, later)
	}
}

// stillThere reports which of the named podman objects exist.
func stillThere(kind string, names ...string) []string {
	var out []string
	for _, n := range names {
		var err error
		switch kind {
		case "container":
			_, err = podman("container", "exists", n)
		case "pod":
			_, err = podman("pod", "exists", n)
		case "network":
			_, err = podman("network", "exists", n)
		case "volume":
			_, err = podman("volume", "exists", n)
		}
		if err == nil {
			out = append(out, kind+" "+n)
		}
	}
	return out
}

// sessionObjectsOf lists the pod, containers and network of one session.
func sessionObjectsOf(name string) []string {
	var out []string
	out = append(out, stillThere("pod", name)...)
	out = append(out, stillThere("container", name+"-router", name+"-forwarder", name+"-claude")...)
	out = append(out, stillThere("network", name)...)
	return out
}

// runtimeDirsOf lists a launcher's temp dirs under XDG_RUNTIME_DIR.
func runtimeDirsOf(pid int) []string {
	m, _ := filepath.Glob(filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), fmt.Sprintf("agent-sandbox-*-%d*", pid)))
	return m
}

// serviceOf finds the pid of the shared podman API service a launcher
// uses: the one whose environment has the launcher's XDG_CONFIG_HOME,
// which every launcher here gets a dir of its own for (and which keys the
// service, internal/apiservice).
func serviceOf(l *launcher) int {
	for _, p := range userProcesses() {
		if !strings.Contains(strings.Join(p.args, " "), "system service") {
			continue
		}
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.pid))
		if slices.Contains(strings.Split(string(env), "\x00"), "XDG_CONFIG_HOME="+l.configHome) {
			return p.pid
		}
	}
	return 0
}

// writeScript writes an executable shell script into a fresh directory.
func writeScript(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(mkdir(t, "bin-"), name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// within fails the row if d exceeds limit.
func within(t *testing.T, what string, d, limit time.Duration) {
	t.Helper()
	if d > limit {
		t.Errorf("%s took %s, want at most %s", what, d.Round(time.Millisecond), limit)
	} else {
		t.Logf("%s took %s", what, d.Round(time.Millisecond))
	}
}
