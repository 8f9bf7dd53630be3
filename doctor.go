package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/allowlist"
	"github.com/agent-sandbox/agent-sandbox/internal/apiservice"
	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
	"github.com/agent-sandbox/agent-sandbox/internal/limits"
	"github.com/agent-sandbox/agent-sandbox/internal/podman"
	"github.com/blang/semver/v4"
	"github.com/spf13/cobra"
)

// minSubIDs is the size of the range `useradd` gives: enough for images
// whose files belong to uids up to 65534 (nobody).
const minSubIDs = 65536

// doctorTimeout bounds each podman call: a stuck storage lock must not hang
// the doctor.
const doctorTimeout = 30 * time.Second

// doctorEnv is everything the checks look at, so that tests can fake a
// machine.
type doctorEnv struct {
	// set is what the user's environment says, read and checked where
	// sessions read it (newSettings): the doctor names no variable to read
	// it again.
	set      settings
	lookPath func(file string) (string, error)
	// run returns the command's stdout; a failed command's error carries
	// its stderr and, for a non-zero exit, an ExitCode method.
	run      func(ctx context.Context, name string, args ...string) (string, error)
	readFile func(name string) ([]byte, error)
	stat     func(name string) (fs.FileInfo, error)
	// access is access(2): nil when the user may read and write path.
	access   func(path string, mode uint32) error
	uid, gid int
	userName string
	// credentials finds what sessions would inject; nil skips the check.
	credentials func() ([]credential, error)
	// machine is what the session's limits are shares of and what of
	// them holds; nil skips the check.
	machine func() machine
}

func realDoctorEnv(set settings) doctorEnv {
	name := set.user
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	return doctorEnv{
		set: set,
		// As a session finds it: never in the current dir, which may be
		// a project an agent wrote.
		lookPath: func(name string) (string, error) {
			return apiservice.LookPodman(name, os.Environ(), agentWritableCwd(set))
		},
		run:      runDoctorCommand,
		readFile: os.ReadFile,
		stat:     os.Stat,
		access:   syscall.Access,
		uid:      os.Getuid(),
		gid:      os.Getgid(),
		userName: name,
		credentials: func() ([]credential, error) {
			s, _, err := sessionCredentialsFor(set, nil)
			return s.creds, err
		},
		machine: set.machine,
	}
}

func runDoctorCommand(ctx context.Context, name string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &limitedWriter{w: &stderr, n: 4096}
	if err := cmd.Run(); err != nil {
		if msg := firstStderrLine(stderr.String()); msg != "" {
			return stdout.String(), fmt.Errorf("%w: %s", err, msg)
		}
		return stdout.String(), err
	}
	return stdout.String(), nil
}

func firstStderrLine(s string) string {
	s = strings.TrimSpace(s)
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}

// commandExitCode is the exit status inside err, or -1 when the command
// did not run to an exit.
func commandExitCode(err error) int {
	var e interface{ ExitCode() int }
	if errors.As(err, &e) {
		return e.ExitCode()
	}
	return -1
}

// checkResult is one line of the doctor's report; problem is empty when
// the check passed.
type checkResult struct {
	what    string
	detail  string
	problem string
	fix     string
	// warning: the problem weakens sessions without stopping them.
	warning bool
}

func (r checkResult) ok() bool { return r.problem == "" || r.warning }

func checkPassed(what, detail string) checkResult { return checkResult{what: what, detail: detail} }

func checkFailed(what, problem, fix string) checkResult {
	return checkResult{what: what, problem: problem, fix: fix}
}

func (r checkResult) print(w io.Writer) {
	if r.warning {
		fmt.Fprintf(w, "warn %s: %s\n", r.what, strings.ReplaceAll(r.problem, "\n", "\n     "))
		fmt.Fprintf(w, "     fix: %s\n", strings.ReplaceAll(r.fix, "\n", "\n          "))
		return
	}
	if r.ok() {
		if r.detail == "" {
			fmt.Fprintf(w, "ok   %s\n", r.what)
		} else {
			fmt.Fprintf(w, "ok   %s: %s\n", r.what, r.detail)
		}
		return
	}
	fmt.Fprintf(w, "FAIL %s: %s\n", r.what, strings.ReplaceAll(r.problem, "\n", "\n     "))
	if r.fix != "" {
		fmt.Fprintf(w, "     fix: %s\n", strings.ReplaceAll(r.fix, "\n", "\n          "))
	}
}

func newDoctorCommand(ctx context.Context, set settings) *cobra.Command {
	return reportFlagErrors(&cobra.Command{
		Use:   "doctor",
		Short: "Check that this machine can run sessions",
		Long: `doctor checks what a session needs: podman (version, rootless, the netavark
network backend), subordinate uids and gids, /dev/fuse and /dev/net/tun,
XDG_RUNTIME_DIR, the two images, the allowlist and the API credentials the
router would add. It prints each problem
with the command that fixes it, and exits 0 only when every check passed.`,
		Example: `  agent-sandbox doctor
  agent-sandbox doctor && agent-sandbox --exec true`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return refusef("doctor takes no arguments; run: agent-sandbox doctor")
			}
			if code := doctor(ctx, realDoctorEnv(set), cmd.OutOrStdout(), cmd.ErrOrStderr()); code != 0 {
				return reported(code)
			}
			return nil
		},
	})
}

// doctor runs every check, printing each as it completes, and returns the
// exit code.
func doctor(ctx context.Context, env doctorEnv, out, errOut io.Writer) int {
	var results []checkResult
	show := func(rs ...checkResult) {
		for _, r := range rs {
			r.print(out)
			results = append(results, r)
		}
	}
	podman, found := checkPodman(ctx, env)
	show(found)
	rootless := checkRootless(env)
	show(rootless)
	if found.ok() {
		show(checkNetworkBackend(ctx, env, podman))
	}
	// Root's ids, runtime dir and image store are not the user's: their
	// fixes would mislead.
	if rootless.ok() {
		show(checkSubIDs(env, "/etc/subuid", "uids"), checkSubIDs(env, "/etc/subgid", "gids"))
	}
	show(checkDevice(env, "/dev/fuse", "fuse"), checkDevice(env, "/dev/net/tun", "tun"))
	if rootless.ok() {
		show(checkRuntimeDir(env))
		if found.ok() {
			for _, im := range sessionImages(env.set) {
				show(checkImage(ctx, env, podman, im))
			}
		}
	}
	show(checkSettings(env), checkAllowlist(env))
	if env.credentials != nil {
		show(checkCredentials(env))
	}
	if env.machine != nil {
		show(checkLimits(env.machine()))
	}

	failures := 0
	for _, r := range results {
		if !r.ok() {
			failures++
		}
	}
	if failures > 0 {
		iostreams.Say(errOut, "%d of %d checks failed; run the fix lines above, then agent-sandbox doctor again", failures, len(results))
		return exitRefused
	}
	warnings := 0
	for _, r := range results {
		if r.warning {
			warnings++
		}
	}
	if warnings > 0 {
		iostreams.Say(errOut, "all %d checks passed, %d with a warning: sessions can start", len(results), warnings)
		return 0
	}
	iostreams.Say(errOut, "all %d checks passed: sessions can start", len(results))
	return 0
}

// podmanFix is how to get a recent enough podman.
const podmanFix = "install podman " + podman.MinVersion + " or newer, for example: sudo apt-get install podman uidmap slirp4netns fuse-overlayfs netavark aardvark-dns"

// checkPodman finds podman and checks its version; it returns the binary
// the other checks run.
func checkPodman(ctx context.Context, env doctorEnv) (string, checkResult) {
	name := env.set.podman
	path, err := env.lookPath(name)
	if err != nil {
		return "", checkFailed("podman", name+" is not on PATH", podmanFix)
	}
	cctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	out, err := env.run(cctx, path, "version", "--format", "{{.Client.Version}}")
	if err != nil {
		return "", checkFailed("podman", fmt.Sprintf("%s version failed: %v", path, err), "run `podman version` and fix what it reports")
	}
	raw := strings.TrimSpace(out)
	v, err := semver.ParseTolerant(raw)
	if err != nil {
		return "", checkFailed("podman", fmt.Sprintf("%s reports version %q, which is not a version number", path, raw), podmanFix)
	}
	if v.LT(semver.MustParse(podman.MinVersion)) {
		return "", checkFailed("podman", fmt.Sprintf("%s is version %s; agent-sandbox needs %s or newer", path, raw, podman.MinVersion), podmanFix)
	}
	return path, checkPassed("podman", raw+" at "+path)
}

func checkRootless(env doctorEnv) checkResult {
	if env.uid == 0 {
		return checkFailed("rootless", "running as root; agent-sandbox runs rootless podman as your own user",
			"run agent-sandbox as your normal user, without sudo")
	}
	return checkPassed("rootless", fmt.Sprintf("%s (uid %d)", env.userName, env.uid))
}

func checkNetworkBackend(ctx context.Context, env doctorEnv, podman string) checkResult {
	const what = "network backend"
	cctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	out, err := env.run(cctx, podman, "info", "--format", "{{.Host.NetworkBackend}}")
	if err != nil {
		return checkFailed(what, fmt.Sprintf("podman info failed: %v", err), "run `podman info` and fix what it reports")
	}
	backend := strings.TrimSpace(out)
	if backend != "netavark" {
		return checkFailed(what, fmt.Sprintf("podman uses %q; agent-sandbox needs netavark (static addresses on internal networks)", backend),
			"sudo apt-get install netavark aardvark-dns; put network_backend = \"netavark\" under [network] in ~/.config/containers/containers.conf;\n"+
				"then podman system reset (this deletes your containers, images and volumes)")
	}
	return checkPassed(what, backend)
}

// checkSubIDs checks that /etc/subuid or /etc/subgid gives the user
// enough subordinate ids for a user namespace.
func checkSubIDs(env doctorEnv, file, kind string) checkResult {
	what := "subordinate " + kind
	b, err := env.readFile(file)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return checkFailed(what, fmt.Sprintf("cannot read %s: %v", file, err), fmt.Sprintf("sudo chmod 0644 %s", file))
	}
	// The suggested range starts after every range given out, so that it
	// overlaps no other user's.
	total, free := 0, 100000
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(strings.TrimSpace(line), ":")
		if len(f) != 3 {
			continue
		}
		start, err1 := strconv.Atoi(f[1])
		n, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil || n <= 0 {
			continue
		}
		free = max(free, start+n)
		if f[0] == env.userName || f[0] == strconv.Itoa(env.uid) {
			total += n
		}
	}
	fix := fmt.Sprintf("sudo usermod --add-sub%s %d-%d %s && podman system migrate", kind, free, free+minSubIDs-1, env.userName)
	switch {
	case total == 0:
		return checkFailed(what, fmt.Sprintf("%s has no range for %s", file, env.userName), fix)
	case total < minSubIDs:
		return checkFailed(what, fmt.Sprintf("%s gives %s %d; images need %d", file, env.userName, total, minSubIDs), fix)
	}
	return checkPassed(what, fmt.Sprintf("%d for %s in %s", total, env.userName, file))
}

// subordinateIDsMissing is the launcher's own check of the ranges, run
// before anything is created: without them podman still starts, with a
// single id, and only fails later on an image's files with an error that
// does not name the fix.
func subordinateIDsMissing(readFile func(string) ([]byte, error), uid int) error {
	if uid == 0 {
		return nil
	}
	// Ranges may come from NSS (sssd, LDAP) rather than the files; then
	// only podman can tell, so the launcher does not second-guess it.
	if b, err := readFile("/etc/nsswitch.conf"); err == nil && nsswitchHasSubid(string(b)) {
		return nil
	}
	name := strconv.Itoa(uid)
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	}
	env := doctorEnv{readFile: readFile, uid: uid, userName: name}
	for _, r := range []checkResult{checkSubIDs(env, "/etc/subuid", "uids"), checkSubIDs(env, "/etc/subgid", "gids")} {
		if !r.ok() {
			return fmt.Errorf("%s: %s; rootless podman needs a range: %s", r.what, r.problem, r.fix)
		}
	}
	return nil
}

func nsswitchHasSubid(conf string) bool {
	for _, line := range strings.Split(conf, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "subid:" {
			return true
		}
	}
	return false
}

// checkDevice checks a device the agent's nested containers need.
func checkDevice(env doctorEnv, path, module string) checkResult {
	fi, err := env.stat(path)
	if err != nil {
		return checkFailed(path, "missing", fmt.Sprintf("sudo modprobe %s", module))
	}
	if fi.Mode()&fs.ModeCharDevice == 0 {
		return checkFailed(path, "not a character device", fmt.Sprintf("sudo rm %s && sudo modprobe %s", path, module))
	}
	if err := env.access(path, 4|2); err != nil { // R_OK|W_OK
		return checkFailed(path, fmt.Sprintf("not readable and writable by %s (mode %s)", env.userName, fi.Mode().Perm()),
			fmt.Sprintf("sudo chmod 0666 %s", path))
	}
	return checkPassed(path, "read-writable")
}

// checkRuntimeDir checks XDG_RUNTIME_DIR, where sessions keep their temp
// dirs and podman its sockets.
func checkRuntimeDir(env doctorEnv) checkResult {
	const what = "XDG_RUNTIME_DIR"
	want := fmt.Sprintf("/run/user/%d", env.uid)
	create := fmt.Sprintf("sudo install -d -m 0700 -o %d -g %d %s", env.uid, env.gid, want)
	dir := env.set.runtimeDir
	if dir == "" {
		fix := "export XDG_RUNTIME_DIR=" + want
		if fi, err := env.stat(want); err != nil || !fi.IsDir() {
			fix = create + " && " + fix
		}
		return checkFailed(what, "not set", fix)
	}
	create = fmt.Sprintf("sudo install -d -m 0700 -o %d -g %d %s", env.uid, env.gid, dir)
	fi, err := env.stat(dir)
	if err != nil {
		return checkFailed(what, fmt.Sprintf("%s does not exist", dir), create)
	}
	if !fi.IsDir() {
		return checkFailed(what, fmt.Sprintf("%s is not a directory", dir), "export XDG_RUNTIME_DIR="+want)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != env.uid {
		return checkFailed(what, fmt.Sprintf("%s belongs to uid %d, not to %s (uid %d)", dir, st.Uid, env.userName, env.uid),
			fmt.Sprintf("sudo chown %d:%d %s", env.uid, env.gid, dir))
	}
	if err := env.access(dir, 2|1); err != nil { // W_OK|X_OK
		return checkFailed(what, fmt.Sprintf("%s is not writable (mode %s)", dir, fi.Mode().Perm()), "chmod 0700 "+dir)
	}
	return checkPassed(what, dir)
}

// checkImage checks one of the session's images. A missing image of
// agent-sandbox's own does not stop a session, which builds (or pulls) it
// first; a missing image the user named does. Which is which is the
// session's own test (sessionImage.ours), so that the two agree.
func checkImage(ctx context.Context, env doctorEnv, podman string, im sessionImage) checkResult {
	what := "image " + im.name
	cctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	_, err := env.run(cctx, podman, "image", "exists", im.name)
	switch {
	case err == nil:
		return checkPassed(what, "present")
	case commandExitCode(err) == 1 && !im.ours():
		return checkFailed(what, "missing, and "+im.env+" names it", fmt.Sprintf(
			"unset %s (agent-sandbox then provides its own), or build or pull %s yourself", im.env, im.name))
	case commandExitCode(err) == 1 && releaseBuild():
		return checkPassed(what, "missing: the first session pulls it (`podman pull "+im.name+"` does it now)")
	case commandExitCode(err) == 1:
		return checkPassed(what, "missing: the first session builds it, which takes minutes (`agent-sandbox build` does it now)")
	}
	return checkFailed(what, fmt.Sprintf("podman image exists failed: %v", err), "run `podman images` and fix what it reports")
}

// checkAllowlist parses the allowlist the way a session would. A missing
// one is fine: the first session creates it from the defaults.
// checkSettings reports the variables newSettings could not read, which
// every session refuses to start with.
func checkSettings(env doctorEnv) checkResult {
	const what = "settings"
	if err := env.set.valid(); err != nil {
		return checkFailed(what, strings.ReplaceAll(err.Error(), "\n", "; "), "correct or unset the AGENT_SANDBOX_ variables named above")
	}
	return checkPassed(what, "the AGENT_SANDBOX_ variables that are set read well")
}

func checkAllowlist(env doctorEnv) checkResult {
	const what = "allowlist"
	path := env.set.allowlist
	b, err := env.readFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return checkPassed(what, path+" does not exist yet; the first session creates it from the defaults")
	}
	if err != nil {
		return checkFailed(what, fmt.Sprintf("cannot read %s: %v", path, err), "chmod u+rw "+path)
	}
	entries, err := allowlist.Parse(bytes.NewReader(b), path)
	if err != nil {
		problem := err.Error()
		// parseAllowlistFrom ends with its own hint; the fix line says it.
		if i := strings.LastIndex(problem, "\nfix "); i >= 0 {
			problem = problem[:i]
		}
		return checkFailed(what, problem, fmt.Sprintf("edit %s and fix those lines, or delete it to start again from the defaults", path))
	}
	return checkPassed(what, countEntries(len(entries))+" in "+path)
}

// checkCredentials says which API hosts sessions would add the user's
// credentials for, and from where; a stored secret that sessions would
// refuse fails it.
func checkCredentials(env doctorEnv) checkResult {
	const what = "credentials"
	creds, err := env.credentials()
	if err != nil {
		problem, fix, ok := strings.Cut(err.Error(), "; fix: ")
		if !ok {
			fix = "agent-sandbox secret --help"
		}
		return checkFailed(what, problem, fix)
	}
	if len(creds) == 0 {
		return checkPassed(what, "none on the host, so the router adds none (the agent logs in itself)")
	}
	var parts []string
	for _, c := range creds {
		parts = append(parts, c.host+" gets "+c.source)
	}
	return checkPassed(what, "the router adds them, the agent holds placeholders: "+strings.Join(parts, "; "))
}

// checkLimits says which of a session's limits this machine enforces, and
// how to get the rest: a warning, since sessions run without them.
func checkLimits(m machine) checkResult {
	l := limits.Defaults(m.memTotal, m.cpus, m.userTasks)
	kinds, why := m.limits.Unenforced(l)
	if len(kinds) == 0 {
		return checkPassed("limits", "the agent's processes, memory and CPU are limited (default "+limits.Describe(l)+")")
	}
	fix := "boot with cgroup v2 (systemd.unified_cgroup_hierarchy=1 on the kernel command line) and delegate the controllers to your user:\n" +
		"sudo mkdir -p /etc/systemd/system/user@.service.d && printf '[Service]\\nDelegate=cpu cpuset io memory pids\\n' | sudo tee /etc/systemd/system/user@.service.d/delegate.conf && sudo systemctl daemon-reload, then log in again"
	if m.limits.CgroupV2 {
		fix = "delegate the controllers to your user:\n" +
			"sudo mkdir -p /etc/systemd/system/user@.service.d && printf '[Service]\\nDelegate=cpu cpuset io memory pids\\n' | sudo tee /etc/systemd/system/user@.service.d/delegate.conf && sudo systemctl daemon-reload, then log in again"
	}
	return checkResult{what: "limits", warning: true,
		problem: fmt.Sprintf("the agent's %s limits are not enforced: %s (its limit of %d processes holds through RLIMIT_NPROC; --memory and --cpus refuse to start)", limits.Names(kinds), why, l.Pids),
		fix:     fix}
}

// limitedWriter keeps the first n bytes, enough for an error message.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
