//go:build e2e

package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The harness's one way to run agent-sandbox: startLauncher starts it in
// the background and returns a launcher, which the row watches (its
// output, files in its launch dir, its steps), signals and waits for.
// runSession is start and wait, then the leftover check; runBin runs a
// subcommand to its end as the user types it.

// sessionTimeout is how long a run may take unless its row says otherwise.
const sessionTimeout = 90 * time.Second

// killDelay is how long a run that timed out gets after its SIGTERM to tear
// down before it is killed: long enough that the leftover check after it
// still means something.
const killDelay = 45 * time.Second

// defaultAllowlist is what a row gets unless it brings its own.
// defaultAllowlist passes its TLS names unread (passthrough): the rows that
// use it probe with the test CA (--cacert ./ca.pem) and read what the
// client sent at the fake (SNI, ALPN, raw hellos). The inspecting proxy's
// rows (e2e/inspect_test.go) use inspected names.
const defaultAllowlist = `# e2e default allowlist
allowed.test passthrough
*.wild.test passthrough
allowed.test:2222
`

// sessionOpts describes one run of the launcher.
type sessionOpts struct {
	// Args follow the binary; nil means --exec with Cmd.
	Args []string
	Cmd  []string
	// Allowlist is the file's content; "" means defaultAllowlist.
	Allowlist string
	// HomeVolume is the volume at /home/claude; "" means a fresh one.
	HomeVolume string
	// Dir is the launch directory; "" means a fresh one.
	Dir string
	// Env adds to or (with "") removes from the run's environment.
	Env map[string]string
	// BareEnv runs a subcommand as the user types it in a shell: the clean
	// environment and Env only, none of a session's settings (no allowlist,
	// home volume or config dir made for it); "" Dir means a fresh empty
	// one.
	BareEnv bool
	// Trace turns on the launcher's step trace (AGENT_SANDBOX_TRACE) on
	// its stderr, for rows that wait for a step or read the session's
	// name there.
	Trace bool
	// Stdin is the launcher's stdin; nil means empty.
	Stdin io.Reader
	// PTY, when set, is the launcher's stdin, stdout and controlling
	// terminal (the slave side).
	PTY *os.File
	// SuParent, with PTY, runs the launcher under a parent like `su` (see
	// suParent): the terminal's session leader, which takes its hang-up
	// and passes nothing on, with the launcher as its foreground job.
	SuParent bool
	// CombinedOutput sends stderr down the stdout pipe, interleaved in the
	// order written, as exec.Cmd.CombinedOutput does: Stdout() holds both.
	CombinedOutput bool
	Timeout        time.Duration
	// Signal is sent to the launcher once ReadyFile appears in the launch
	// dir, i.e. once the command inside is known to run.
	Signal    syscall.Signal
	ReadyFile string
	// UID, when set, runs the launcher as this uid and gid in a user
	// namespace of its own mapped onto the test user: a user that
	// /etc/subuid and /etc/subgid know nothing of.
	UID int
	// Bin runs the launcher under another name (a `claude` symlink, as
	// users alias it); "" means the built binary.
	Bin string
	// Unattributed leaves the run out of launched (and its keeper
	// untracked) until the row stores its pid there itself: a run that
	// outlives the sessions it watches (agent-sandbox log), whose temp dirs
	// and API service are not leftovers of theirs.
	Unattributed bool
}

// launcher is one run of agent-sandbox: running in the background from
// startLauncher, finished once wait returned.
type launcher struct {
	t   *testing.T
	cmd *exec.Cmd
	pid int // the launcher's; cmd's is its su-like parent's, if it has one
	// keeper is the session's own process, which the launcher starts
	// (internal/keeper): its pid names the session. nil for an
	// Unattributed run.
	keeper  *keeperProc
	args    []string
	timeout time.Duration
	// Dir is the launch dir, AllowlistPath the allowlist the launcher was
	// given and HomeVolume the volume at /home/claude; the last two are ""
	// for a BareEnv run.
	Dir           string
	AllowlistPath string
	HomeVolume    string
	// configHome is its XDG_CONFIG_HOME, which podman reads: the shared
	// API service it uses is the one started with it (serviceOf).
	configHome string

	stdout, stderr syncBuffer
	mu             sync.Mutex
	changed        chan struct{} // closed and replaced on new stderr and at exit
	exited         chan struct{}
	outDone        chan struct{}
	readySignal    chan struct{} // closed once the ReadyFile watch is over; nil without one

	Started, Ended time.Time
	Elapsed        time.Duration
	Code           int    // exit status, -1 if killed by a signal
	KilledBy       string // the signal that killed it, if any
	// Err is what waiting for it returned: nil, an *exec.ExitError, or
	// why the wait itself failed.
	Err      error
	TimedOut bool
	// SignalledAt is when the row's signal (or the ReadyFile one) went.
	SignalledAt time.Time
	// KeeperRanAtReturn: the session's teardown still went on when the
	// launcher returned.
	KeeperRanAtReturn bool
	// OutClosed is when the launcher's stdout and stderr closed.
	OutClosed time.Time
}

// syncBuffer is an output buffer the test reads while a process writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// launched holds the pid of every launcher this run started: leftovers are
// attributed to sessions through the pid in the session name.
var launched sync.Map

// After this many hung sessions the rest fail at once instead of each
// waiting out its timeout.
const maxTimeouts = 2

var timeouts atomic.Int32

// runSession launches agent-sandbox once as the test user would, waits for
// it, then checks it left nothing behind.
func runSession(t *testing.T, o sessionOpts) *launcher {
	t.Helper()
	l := startLauncher(t, o).wait()
	assertNoLeftovers(t)
	return l
}

// runBin runs an agent-sandbox subcommand to its end as the test user
// would, in a fresh dir with a config dir of its own, and returns what it
// printed (stdout and stderr as a terminal interleaves them) and its exit
// error.
func runBin(t *testing.T, args ...string) (string, error) {
	t.Helper()
	l := startLauncher(t, sessionOpts{Args: args, BareEnv: true, CombinedOutput: true,
		Env: map[string]string{"XDG_CONFIG_HOME": mkdir(t, "xdg-")}}).wait()
	return l.Stdout(), l.Err
}

// sessionEnv is the environment of one run: the clean environment
// hack/run-e2e gives the suite (nothing else of the caller's leaks in),
// then unless o.BareEnv the settings that pin a session to the harness,
// then o.Env, where "" removes a variable.
func (l *launcher) sessionEnv(t *testing.T, o sessionOpts) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, k := range []string{"HOME", "USER", "PATH", "XDG_RUNTIME_DIR", "AGENT_SANDBOX_PODMAN"} {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	if !o.BareEnv {
		for k, v := range map[string]string{
			"PWD":                          l.Dir,
			"XDG_CONFIG_HOME":              mkdir(t, "xdg-"),
			"AGENT_SANDBOX_ALLOWLIST":      l.AllowlistPath,
			"AGENT_SANDBOX_HOME_VOLUME":    l.HomeVolume,
			"AGENT_SANDBOX_UPSTREAM_DNS":   fakeIP,
			"AGENT_SANDBOX_UPSTREAM_ALLOW": egressSubnet,
			"AGENT_SANDBOX_IMAGE":          harness.sandboxImage,
			"AGENT_SANDBOX_ROUTER_IMAGE":   harness.routerImage,
			// The inspecting proxy verifies the fake's certificates with
			// the test CA, as the credential proxy does: pinned like the
			// DNS.
			"AGENT_SANDBOX_UPSTREAM_CA": filepath.Join(harness.fakeDir, "ca.pem"),
		} {
			env[k] = v
		}
	}
	if o.Trace {
		env["AGENT_SANDBOX_TRACE"] = "1"
	}
	for k, v := range o.Env {
		if v == "" {
			delete(env, k)
			continue
		}
		env[k] = v
	}
	return env
}

// environ is env as exec.Cmd takes it, in a stable order.
func environ(env map[string]string) []string {
	var out []string
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// startLauncher starts agent-sandbox and returns at once. On timeout the
// launcher gets SIGTERM, as from a closing terminal, and killDelay to tear
// down before it is killed; a row that ends before it does (one that failed
// half-way) stops it the same way, so no session outlives its row.
func startLauncher(t *testing.T, o sessionOpts) *launcher {
	t.Helper()
	l := &launcher{t: t, Dir: o.Dir, HomeVolume: o.HomeVolume, timeout: o.Timeout,
		changed: make(chan struct{}), exited: make(chan struct{}), outDone: make(chan struct{})}
	if l.timeout == 0 {
		l.timeout = sessionTimeout
	}
	switch {
	case l.Dir != "":
	case o.BareEnv:
		l.Dir = mkdir(t, "cmd-")
	default:
		l.Dir = launchDir(t)
	}
	if !o.BareEnv {
		if l.HomeVolume == "" {
			l.HomeVolume = homeVolume(t)
		}
		l.AllowlistPath = filepath.Join(mkdir(t, "cfg-"), "allowed-hosts")
		allow := o.Allowlist
		if allow == "" {
			allow = defaultAllowlist
		}
		if err := os.WriteFile(l.AllowlistPath, []byte(allow), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := l.sessionEnv(t, o)
	l.configHome = env["XDG_CONFIG_HOME"]
	if !o.BareEnv {
		l.AllowlistPath = env["AGENT_SANDBOX_ALLOWLIST"]
	}
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
			t.Fatal("a su-like parent needs a terminal (sessionOpts.PTY)")
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
	l.cmd.Env = environ(env)
	// Bounds Wait's copying of Stdin, the only stream exec copies itself,
	// should a child of the launcher hold its pipe.
	l.cmd.WaitDelay = killDelay

	// Pipes of our own: a child that inherits one must not hold up Wait.
	var outR, outW, errR, errW *os.File
	var err error
	if o.PTY == nil {
		if outR, outW, err = os.Pipe(); err != nil {
			t.Fatal(err)
		}
	}
	if o.CombinedOutput && outW != nil {
		l.cmd.Stderr = outW
	} else {
		if errR, errW, err = os.Pipe(); err != nil {
			t.Fatal(err)
		}
		l.cmd.Stderr = errW
	}
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
		l.cmd.Stdout = outW
		l.cmd.Stdin = o.Stdin
		if o.Stdin == nil {
			l.cmd.Stdin = strings.NewReader("")
		}
	}
	l.Started = time.Now()
	err = l.cmd.Start()
	for _, f := range []*os.File{errW, outW, pidW} {
		if f != nil {
			f.Close()
		}
	}
	if err != nil {
		for _, f := range []*os.File{errR, outR} {
			if f != nil {
				f.Close()
			}
		}
		t.Fatalf("cannot run %s: %v", harness.bin, err)
	}
	l.pid = l.cmd.Process.Pid
	if !o.Unattributed {
		launched.Store(l.pid, true)
	}
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
		if !o.Unattributed {
			launched.Store(pid, true)
		}
	}
	if !o.Unattributed {
		l.keeper = trackKeeper(l.pid)
	}

	var readers sync.WaitGroup
	if errR != nil {
		readers.Go(func() { l.copyOut(errR, &l.stderr, true) })
	}
	if outR != nil {
		readers.Go(func() { l.copyOut(outR, &l.stdout, false) })
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
		keeperRan := l.keeper != nil && l.keeper.Pid() != 0 && l.keeper.running()
		l.mu.Lock()
		l.Ended = time.Now()
		l.Elapsed = l.Ended.Sub(l.Started)
		l.KeeperRanAtReturn = keeperRan
		l.Err = err
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
	go func() {
		select {
		case <-l.exited:
			return
		case <-time.After(l.timeout):
		}
		l.mu.Lock()
		l.TimedOut = true
		l.mu.Unlock()
		// As from a closing terminal; teardown still gets its chance.
		_ = l.send(syscall.SIGTERM)
		select {
		case <-l.exited:
		case <-time.After(killDelay):
			_ = l.send(syscall.SIGKILL)
			_ = l.cmd.Process.Kill()
		}
	}()
	if o.Signal != 0 {
		l.readySignal = make(chan struct{})
		go func() {
			defer close(l.readySignal)
			l.signalWhenReady(filepath.Join(l.Dir, o.ReadyFile), o.Signal)
		}()
	}
	t.Cleanup(func() {
		// A row that failed half-way must not leave the session running.
		if !l.done() {
			_ = l.send(syscall.SIGTERM)
			<-l.exited
		}
	})
	return l
}

// copyOut reads one of the launcher's streams into b until it closes;
// stderr wakes those waiting for a line (waitStderrRe).
func (l *launcher) copyOut(r *os.File, b *syncBuffer, wake bool) {
	defer r.Close()
	buf := make([]byte, 64*1024)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			b.Write(buf[:n])
			if wake {
				l.mu.Lock()
				close(l.changed)
				l.changed = make(chan struct{})
				l.mu.Unlock()
			}
		}
		if err != nil {
			return
		}
	}
}

// signalWhenReady sends sig once file exists, unless the launcher ends first.
func (l *launcher) signalWhenReady(file string, sig syscall.Signal) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-l.exited:
			return
		case <-tick.C:
			if _, err := os.Stat(file); err == nil {
				at := time.Now()
				if l.send(sig) == nil {
					l.mu.Lock()
					l.SignalledAt = at
					l.mu.Unlock()
				}
				return
			}
		}
	}
}

// Pid is the launcher's pid, under a su-like parent too.
func (l *launcher) Pid() int { return l.pid }

// sessionPid is the pid in the session's name and dirs: its keeper's, or
// the launcher's if it ended before a keeper was seen.
func (l *launcher) sessionPid() int {
	if l.keeper != nil {
		if k := l.keeper.Pid(); k != 0 {
			return k
		}
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

// Stdout is everything the launcher wrote to stdout so far (and to stderr,
// with CombinedOutput).
func (l *launcher) Stdout() string { return l.stdout.String() }

// Stderr is everything the launcher wrote to stderr so far.
func (l *launcher) Stderr() string { return l.stderr.String() }

// stderrLines are the whole lines on stderr so far: a line still being
// written counts once it ends or the stream closes.
func (l *launcher) stderrLines() []string {
	s := l.Stderr()
	select {
	case <-l.outDone:
	default:
		if i := strings.LastIndexByte(s, '\n'); i >= 0 {
			s = s[:i+1]
		} else {
			s = ""
		}
	}
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	out := strings.Split(s, "\n")
	for i := range out {
		out[i] = strings.TrimSuffix(out[i], "\r")
	}
	return out
}

// waitStderrRe waits for a stderr line matching re; false if the launcher
// ended or the time ran out first.
func (l *launcher) waitStderrRe(re *regexp.Regexp, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for {
		l.mu.Lock()
		ch := l.changed
		l.mu.Unlock()
		if slices.ContainsFunc(l.stderrLines(), re.MatchString) {
			return true
		}
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

// waitFor polls cond until it holds, the launcher ends or timeout passes.
func (l *launcher) waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		select {
		case <-l.exited:
			return cond()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
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

// logOutputLimit is the output a run's log shows in full; past it, its
// start (a row's 1 MiB blob says nothing to a reader).
const logOutputLimit = 256 << 10

// wait waits for the launcher to exit and for its keeper's teardown, and
// logs what it did.
func (l *launcher) wait() *launcher {
	l.t.Helper()
	<-l.exited
	if l.readySignal != nil {
		<-l.readySignal
	}
	select {
	case <-l.outDone:
	case <-time.After(2 * time.Second):
	}
	if l.Err != nil && !errors.As(l.Err, new(*exec.ExitError)) {
		l.t.Errorf("waiting for %s: %v", harness.bin, l.Err)
	}
	if l.TimedOut {
		timeouts.Add(1)
		l.t.Errorf("session did not finish within %s (sent SIGTERM)", l.timeout)
	}
	waitKeeper(l.t, l.keeper, l.Ended)
	how := fmt.Sprintf("exit %d", l.Code)
	if l.KilledBy != "" {
		how = "killed by " + l.KilledBy
	}
	out := l.Stdout()
	if len(out) > logOutputLimit {
		out = out[:2000] + fmt.Sprintf("...(%d bytes)", len(out))
	}
	l.t.Logf("session %s in %s: %s after %s (launcher pid %d)\nstdout:\n%s\nstderr:\n%s", describeArgs(l.args), l.Dir,
		how, l.Elapsed.Round(time.Millisecond), l.Pid(), indent(out), indent(l.Stderr()))
	return l
}

// sinceSignal is how long the launcher ran after it was signalled.
func (l *launcher) sinceSignal() time.Duration {
	if l.SignalledAt.IsZero() {
		return 0
	}
	return l.Ended.Sub(l.SignalledAt)
}

func wantCode(t *testing.T, l *launcher, want int) {
	t.Helper()
	if l.Code == want {
		return
	}
	code := strconv.Itoa(l.Code)
	if l.KilledBy != "" {
		code += " (" + l.KilledBy + ")"
	}
	t.Errorf("exit code = %s, want %d; stderr:\n%s", code, want, indent(l.Stderr()))
}

func (l *launcher) wantCode(want int) {
	l.t.Helper()
	wantCode(l.t, l, want)
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

// describeArgs keeps the log readable: probe scripts are long.
func describeArgs(args []string) string {
	var out []string
	for _, a := range args {
		if len(a) > 120 {
			a = a[:60] + fmt.Sprintf("...(%d bytes)", len(a))
		}
		out = append(out, strconv.Quote(a))
	}
	return "[" + strings.Join(out, " ") + "]"
}
