// Package apiservice runs the podman API service that a user's sessions
// share: one `podman system service` per podman and podman environment,
// started by the first session that needs it and stopped by the last one
// to let go of it.
//
// A service of its own cost every session a podman start (about 0.1 s of
// its start-up and the CPU of a podman process) and eight sessions at once
// ran eight services. The socket lives in a 0700 dir under the user's
// runtime dir, which no container mounts and no launch dir may lie in, so
// no agent ever reaches it.
//
// Two locks keep the sessions apart. The start lock (KEY.lock) is held
// while a service is looked at, started or stopped, never for longer.
// The users file (KEY.users) is flock'ed shared by every session that uses
// the service, for as long as it uses it; the kernel drops that lock when
// the session's process dies, however it dies. Whoever lets go takes the
// start lock and tries the users file exclusive: if it gets it, nobody else
// uses the service, and it stops it. A service whose users were all killed
// runs on until the next session lets go of it, or until Collect (gc, and
// every session's start) finds it unused.
//
// The service is found by its socket, not by a pid file: the process that
// answers a connection is the service (SO_PEERCRED), so a service is never
// lost track of, and a pid is signalled only through a pidfd opened while
// its command line still names the socket.
package apiservice

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DirName is the shared dir's name under the user's runtime dir.
const DirName = "agent-sandbox-podman"

const (
	startTimeout = 20 * time.Second
	lockTimeout  = 60 * time.Second
	stopTimeout  = 5 * time.Second
	// A podman service writes little: a few lines for each session whose
	// attach it closes. Its log is cut past logLimit, when a session
	// starts using it; only the tail of one service's part is read.
	outputTail = 4096
	logLimit   = 1 << 20
)

// Spec says which service a session needs.
type Spec struct {
	// Podman is the podman binary, as the settings name it.
	Podman string
	// RuntimeDir is the user's runtime dir; the service's files go in
	// DirName under it.
	RuntimeDir string
	// Env is the session's environment. The service gets the part of it
	// that podman reads (see keyed), and nothing else: not the keys the
	// session holds, not a notify socket.
	Env []string
	// Cwd is where the launcher runs: a session's launch dir, which the
	// agent writes. Neither podman nor a program podman runs is looked
	// up there (see trustedPath).
	Cwd string
}

// keyed reports whether podman, or a helper it runs (conmon, runc,
// netavark), reads the variable: the service runs with these only, and
// sessions that differ in one get services of their own.
//
// Not CONTAINER_HOST or CONTAINER_CONNECTION, which make podman a remote
// client that cannot serve, nor a passphrase; not the XDG variables of a
// desktop session, which differ per login and would keep sessions apart
// for nothing.
func keyed(name string) bool {
	for _, p := range []string{"CONTAINERS_", "_CONTAINERS_", "REGISTRY_", "STORAGE_", "BUILDAH_", "PODMAN_", "LD_"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	switch name {
	case "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS", "XDG_DATA_HOME", "XDG_DATA_DIRS", "XDG_CACHE_HOME",
		"DOCKER_CONFIG", "REGISTRIES_CONFIG_PATH", "container":
		return true
	}
	switch strings.ToLower(name) {
	case "home", "path", "user", "logname", "tmpdir", "dbus_session_bus_address", "ssl_cert_file", "ssl_cert_dir",
		"http_proxy", "https_proxy", "no_proxy", "all_proxy", "ftp_proxy":
		return true
	}
	return false
}

// serviceEnv is the part of env the service runs with, its PATH the
// trusted one.
func serviceEnv(env []string, cwd string) []string {
	var out []string
	for _, kv := range env {
		name, v, ok := strings.Cut(kv, "=")
		if !ok || !keyed(name) {
			continue
		}
		if name == "PATH" {
			kv = "PATH=" + trustedPath(v, cwd)
		}
		out = append(out, kv)
	}
	slices.Sort(out)
	return out
}

func lookupEnv(env []string, name string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// inside reports whether p is dir or lies under it, both resolved.
func inside(p, dir string) bool {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		p = r
	}
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		dir = r
	}
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// trustedPath is path without the entries an agent could have written: an
// empty or relative one (the current dir, which is the launch dir) and
// one inside cwd (an activated .venv/bin, a direnv bin, node_modules/.bin).
// podman looks up its helpers (pasta, slirp4netns, the OCI runtime) on
// the PATH it is given.
func trustedPath(path, cwd string) string {
	if mutated("podman-path-open") {
		return path
	}
	var keep []string
	for _, d := range filepath.SplitList(path) {
		if !filepath.IsAbs(d) || (cwd != "" && inside(d, cwd)) {
			continue
		}
		keep = append(keep, d)
	}
	return strings.Join(keep, string(filepath.ListSeparator))
}

// LookPodman finds podman as a session runs it (doctor runs the same).
func LookPodman(podman string, env []string, cwd string) (string, error) {
	return resolve(podman, env, cwd)
}

// resolve finds the podman binary as it will be run, so that the key and
// the start name the same file: a bare name on the trusted PATH, or an
// absolute path; never a file in cwd.
func resolve(podman string, env []string, cwd string) (string, error) {
	var found string
	switch {
	case strings.Contains(podman, "/"):
		if !filepath.IsAbs(podman) {
			return "", fmt.Errorf("podman %s: give an absolute path, or a name to look up on PATH", podman)
		}
		found = podman
	default:
		for _, d := range filepath.SplitList(trustedPath(lookupEnv(env, "PATH"), cwd)) {
			if !filepath.IsAbs(d) {
				d = filepath.Join(cwd, d)
			}
			c := filepath.Join(d, podman)
			if fi, err := os.Stat(c); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				found = c
				break
			}
		}
		if found == "" {
			return "", &StartError{Podman: podman, Err: exec.ErrNotFound}
		}
	}
	if cwd != "" && inside(found, cwd) && !mutated("podman-path-open") {
		return "", fmt.Errorf("refusing to run podman %s: it lies in %s, which the agent can write", found, cwd)
	}
	return found, nil
}

// configFiles are podman's config files: a service started before one of
// them changed is not the one the user now asks for.
func configFiles(env []string) []string {
	userConf := lookupEnv(env, "XDG_CONFIG_HOME")
	if home := lookupEnv(env, "HOME"); userConf == "" && home != "" {
		userConf = filepath.Join(home, ".config")
	}
	files := []string{
		"/usr/share/containers/containers.conf", "/etc/containers/containers.conf",
		"/etc/containers/storage.conf", "/etc/containers/registries.conf", "/etc/containers/policy.json",
	}
	if userConf != "" {
		for _, f := range []string{"containers.conf", "storage.conf", "registries.conf", "policy.json"} {
			files = append(files, filepath.Join(userConf, "containers", f))
		}
	}
	return files
}

// Key names the service for a podman binary (resolved) and an
// environment: the binary and its config files as they are now, the
// variables podman reads, and what the service inherits from the process
// that starts it, which its containers get: its resource limits, nice
// value, CPUs and cgroup (a desktop ends a terminal's cgroup with every
// process in it).
func Key(podman string, env []string, cwd string) string {
	h := sha256.New()
	stamp := func(f string) {
		if fi, err := os.Stat(f); err == nil {
			st, _ := fi.Sys().(*syscall.Stat_t)
			var ino uint64
			if st != nil {
				ino = st.Ino
			}
			fmt.Fprintf(h, "%s %d %d %d\x00", f, fi.Size(), fi.ModTime().UnixNano(), ino)
		} else {
			fmt.Fprintf(h, "%s -\x00", f)
		}
	}
	fmt.Fprintf(h, "%s\x00", podman)
	stamp(podman)
	for _, f := range configFiles(env) {
		stamp(f)
	}
	for _, kv := range serviceEnv(env, cwd) {
		fmt.Fprintf(h, "%s\x00", kv)
	}
	for r := 0; r < 16; r++ {
		var lim unix.Rlimit
		if unix.Getrlimit(r, &lim) == nil {
			fmt.Fprintf(h, "rlimit %d %d %d\x00", r, lim.Cur, lim.Max)
		}
	}
	prio, _ := unix.Getpriority(unix.PRIO_PROCESS, 0)
	var cpus unix.CPUSet
	_ = unix.SchedGetaffinity(0, &cpus)
	fmt.Fprintf(h, "nice %d cpus %v\x00", prio, cpus)
	cg, _ := os.ReadFile("/proc/self/cgroup")
	h.Write(cg)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// paths are one service's files.
type paths struct{ dir, key string }

func (p paths) file(ext string) string { return filepath.Join(p.dir, p.key+ext) }
func (p paths) sock() string           { return p.file(".sock") }

// openDir makes the shared dir, or checks that the one there is the
// user's own and closed to others: the socket in it is the user's podman.
func openDir(runtimeDir string) (string, error) {
	dir := filepath.Join(runtimeDir, DirName)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("cannot make %s: %w", dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Getuid() || fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s is not a directory of yours closed to others: remove it and start again", dir)
	}
	return dir, nil
}

// Lease is one session's use of the shared service.
type Lease struct {
	p     paths
	spec  Spec
	users *os.File // holds the shared lock while the lease lasts

	mu     sync.Mutex
	pid    int
	exited chan struct{} // closed when pid has ended
	gen    int           // the service's start mark in the log
}

// Sock is the service's socket.
func (l *Lease) Sock() string { return l.p.sock() }

// Pid is the service's current process.
func (l *Lease) Pid() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pid
}

// Exited is closed when the service's current process ends.
func (l *Lease) Exited() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.exited
}

// markPrefix opens each start's part of the shared log, numbered, so that
// a session reads what its own service wrote even after another session
// started the next one.
const markPrefix = "--- agent-sandbox: podman service start "

// readLog is the log's last logLimit bytes.
func (p paths) readLog() string {
	f, err := os.OpenFile(p.file(".log"), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > logLimit {
		_, _ = f.Seek(-logLimit, io.SeekEnd)
	}
	b, _ := io.ReadAll(io.LimitReader(f, logLimit))
	return string(b)
}

// lastMark is the number of the last start in the log, 0 if none.
func lastMark(log string) int {
	i := strings.LastIndex(log, markPrefix)
	if i < 0 {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(log[i+len(markPrefix):], "\n", 2)[0]))
	return n
}

// Output is the tail of what the lease's service wrote.
func (l *Lease) Output() string {
	s := l.p.readLog()
	l.mu.Lock()
	mark := fmt.Sprintf("%s%d\n", markPrefix, l.gen)
	l.mu.Unlock()
	if i := strings.LastIndex(s, mark); i >= 0 {
		s = s[i+len(mark):]
		if j := strings.Index(s, markPrefix); j >= 0 {
			s = s[:j]
		}
	}
	if len(s) > outputTail {
		s = s[len(s)-outputTail:]
	}
	return strings.TrimSpace(s)
}

// Acquire starts using the service for spec, starting it if none answers.
// ctx's end gives up the wait for the lock or for the service.
func Acquire(ctx context.Context, spec Spec) (*Lease, error) {
	dir, err := openDir(spec.RuntimeDir)
	if err != nil {
		return nil, err
	}
	if spec.Podman, err = resolve(spec.Podman, spec.Env, spec.Cwd); err != nil {
		return nil, err
	}
	l := &Lease{p: paths{dir, Key(spec.Podman, spec.Env, spec.Cwd)}, spec: spec}
	unlock, err := l.p.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := l.ensure(ctx); err != nil {
		return nil, err
	}
	// The service appends: cut here, it goes on at the start.
	if f, err := os.OpenFile(l.p.file(".log"), os.O_WRONLY|unix.O_NOFOLLOW, 0); err == nil {
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > logLimit {
			_ = f.Truncate(0)
		}
		f.Close()
	}
	users, err := os.OpenFile(l.p.file(".users"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	// Never blocks: the only exclusive holder holds the start lock too.
	if err := unix.Flock(int(users.Fd()), unix.LOCK_SH); err != nil {
		users.Close()
		return nil, fmt.Errorf("cannot take %s: %w", users.Name(), err)
	}
	l.users = users
	return l, nil
}

// Restart starts the service again after it died, unless another session
// already did. The lease stays as it was.
func (l *Lease) Restart(ctx context.Context) error {
	unlock, err := l.p.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	return l.ensure(ctx)
}

// Release ends the lease, and stops the service if nobody else uses it.
// It reports whether it stopped it.
func (l *Lease) Release() (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), lockTimeout)
	defer cancel()
	unlock, err := l.p.lock(ctx)
	if err != nil {
		l.users.Close()
		return false, err
	}
	defer unlock()
	l.users.Close()
	return l.p.stopIfUnused()
}

// Collect stops the services under runtimeDir that nobody uses (their
// sessions were killed) and says which it stopped. A service being looked
// at by someone else is left to them.
func Collect(runtimeDir string) []string {
	dir := filepath.Join(runtimeDir, DirName)
	locks, _ := filepath.Glob(filepath.Join(dir, "*.lock"))
	var stopped []string
	for _, lf := range locks {
		p := paths{dir, strings.TrimSuffix(filepath.Base(lf), ".lock")}
		unlock, ok := p.tryLock()
		if !ok {
			continue
		}
		pid, _ := p.serving()
		if ok, _ := p.stopIfUnused(); ok && pid != 0 {
			stopped = append(stopped, fmt.Sprintf("the unused podman service %s (pid %d)", p.key, pid))
		}
		unlock()
	}
	return stopped
}

// lock takes the start lock, waiting for whoever holds it.
func (p paths) lock(ctx context.Context) (func(), error) {
	deadline := time.Now().Add(lockTimeout)
	for {
		if unlock, ok := p.tryLock(); ok {
			return unlock, nil
		}
		if time.Now().After(deadline) {
			// The kernel frees the lock when its holder dies: a
			// holder that lives this long is stopped or stuck.
			return nil, fmt.Errorf("another agent-sandbox has held the podman service's start lock (%s) for %s: end or resume it (a session stopped with Ctrl-Z holds it)", p.file(".lock"), lockTimeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(3 * time.Millisecond):
		}
	}
}

// tryLock takes the start lock if it is free.
func (p paths) tryLock() (func(), bool) {
	f, err := os.OpenFile(p.file(".lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, false
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return func() { f.Close() }, true
}

// unused reports whether no lease holds the users file, and keeps it so
// (the exclusive lock) until done is called. The caller holds the start
// lock.
func (p paths) unused() (done func(), ok bool, err error) {
	users, err := os.OpenFile(p.file(".users"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, false, err
	}
	if err := unix.Flock(int(users.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		users.Close()
		return nil, false, nil
	}
	return func() { users.Close() }, true, nil
}

// stopIfUnused stops the service if no lease holds the users file. The
// caller holds the start lock.
func (p paths) stopIfUnused() (bool, error) {
	done, ok, err := p.unused()
	if err != nil || !ok {
		return false, err
	}
	defer done()
	pid, state := p.serving()
	if pid != 0 {
		if err := stop(pid, p.sock()); err != nil {
			return false, err
		}
	}
	if state != busy {
		_ = os.Remove(p.sock())
	}
	return pid != 0, nil
}

// socketState is what a connection to the socket found.
type socketState int

const (
	none socketState = iota // no socket, or nobody of ours listens
	up                      // a service listens: its pid
	busy                    // it could not tell (a full backlog, a timeout)
)

// serving is the pid of the service listening on the socket, 0 if none
// is: the process at the other end of a connection (SO_PEERCRED), if its
// command line names the socket. Only a missing socket or a refused
// connection means none: a socket that a live service may hold is never
// taken for a stale one.
func (p paths) serving() (int, socketState) {
	conn, err := net.DialTimeout("unix", p.sock(), time.Second)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return 0, none
		}
		return 0, busy
	}
	defer conn.Close()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, busy
	}
	var cred *unix.Ucred
	_ = raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err != nil || cred == nil {
		return 0, busy
	}
	if !servesSocket(int(cred.Pid), p.sock()) {
		// Another program of the user's listens there.
		return 0, none
	}
	return int(cred.Pid), up
}

// servesSocket reports whether pid is a live podman service on sock.
func servesSocket(pid int, sock string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(cmdline), "unix://"+sock+"\x00") && !zombie(pid)
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z' || s[i+2] == 'X'
	}
	return false
}

// ensure makes sure a service answers on the socket: the one there, or a
// new one. The caller holds the start lock.
func (l *Lease) ensure(ctx context.Context) error {
	pid, state := l.p.serving()
	for deadline := time.Now().Add(startTimeout); state == busy; pid, state = l.p.serving() {
		if time.Now().After(deadline) {
			return fmt.Errorf("the podman service on %s does not take connections: try again, or see `podman info`", l.p.sock())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if pid != 0 {
		if err := ping(l.p.sock(), 2*time.Second); err != nil {
			// Slow or stuck. While others use it, it is theirs:
			// wait for it as for a start, and never kill it.
			done, unused, _ := l.p.unused()
			if unused {
				err := stop(pid, l.p.sock())
				done()
				if err != nil {
					return err
				}
				return l.spawn(ctx)
			}
			exited, _ := watch(pid)
			if err := l.p.waitAnswer(ctx, exited, 5*time.Second, func() string { return "" }); err != nil {
				return fmt.Errorf("the podman service (pid %d) that other sessions use does not answer: %w", pid, err)
			}
		}
		exited, err := watch(pid)
		if err != nil {
			return err
		}
		// The pidfd is open: a pid that still serves the socket now is
		// the service, not a reused pid.
		if !servesSocket(pid, l.p.sock()) {
			return l.spawn(ctx)
		}
		l.set(pid, exited, lastMark(l.p.readLog()))
		return nil
	}
	return l.spawn(ctx)
}

func (l *Lease) set(pid int, exited chan struct{}, gen int) {
	l.mu.Lock()
	l.pid, l.exited, l.gen = pid, exited, gen
	l.mu.Unlock()
}

// spawn starts the service and waits for it to answer. It runs in a
// session of its own (no terminal's signal reaches it) and with no
// parent-death signal: it outlives the session that started it as long
// as another one uses it. The caller holds the start lock, and nothing
// answers on the socket.
func (l *Lease) spawn(ctx context.Context) error {
	_ = os.Remove(l.p.sock())
	flags := os.O_WRONLY | os.O_CREATE | os.O_APPEND | unix.O_NOFOLLOW
	if fi, err := os.Lstat(l.p.file(".log")); err == nil && fi.Size() > logLimit {
		flags |= os.O_TRUNC
	}
	gen := lastMark(l.p.readLog()) + 1
	logf, err := os.OpenFile(l.p.file(".log"), flags, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	// Before the start: what a service that fails at once writes follows.
	if _, err := fmt.Fprintf(logf, "%s%d\n", markPrefix, gen); err != nil {
		return err
	}
	cmd := exec.Command(l.spec.Podman, "system", "service", "--time=0", "unix://"+l.p.sock())
	cmd.Env = serviceEnv(l.spec.Env, l.spec.Cwd)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Not the launch dir: a service that outlives its session must not
	// hold that dir busy.
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return &StartError{Podman: l.spec.Podman, Err: err}
	}
	pid := cmd.Process.Pid
	// Reaped here while this process lives; by init once it is gone.
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	l.set(pid, exited, gen)
	if err := l.p.waitAnswer(ctx, exited, time.Second, l.Output); err != nil {
		// Our own child, not yet reaped: signalled as such. Its command
		// line may not name the socket yet (podman's start re-executes
		// itself), so stop's check would pass it by.
		stopChild(cmd.Process, exited)
		if pid, _ := l.p.serving(); pid != 0 {
			_ = stop(pid, l.p.sock())
		}
		_ = os.Remove(l.p.sock())
		return err
	}
	// Rootless podman may serve from a child it forked: every session
	// watches, names and stops the process that listens.
	if lpid, state := l.p.serving(); state == up && lpid != pid {
		if lexited, err := watch(lpid); err == nil {
			l.set(lpid, lexited, gen)
		}
	}
	return nil
}

// stopChild ends a service this process started and has not reaped.
func stopChild(proc *os.Process, exited <-chan struct{}) {
	_ = proc.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return
	case <-time.After(stopTimeout):
	}
	_ = proc.Kill()
	select {
	case <-exited:
	case <-time.After(stopTimeout):
	}
}

// waitAnswer waits for the service to answer on the socket, each ask
// given up to patience.
func (p paths) waitAnswer(ctx context.Context, exited <-chan struct{}, patience time.Duration, output func() string) error {
	deadline := time.Now().Add(startTimeout)
	for {
		if err := ping(p.sock(), patience); err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("the podman service exited: %s", output())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the podman service did not answer within %s: check `podman info`", startTimeout)
		}
	}
}

// StartError is a podman binary that could not be run.
type StartError struct {
	Podman string
	Err    error
}

func (e *StartError) Error() string {
	return fmt.Sprintf("cannot start the podman service %s: %v", e.Podman, e.Err)
}
func (e *StartError) Unwrap() error { return e.Err }

// ping asks the service whether it answers.
func ping(sock string, timeout time.Duration) error {
	if _, err := os.Stat(sock); err != nil {
		return err
	}
	c := http.Client{
		Timeout: timeout,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}},
	}
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://d/_ping")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the podman service answered %s", resp.Status)
	}
	return nil
}

// watch returns a channel closed when pid ends, whoever's child it is.
func watch(pid int) (chan struct{}, error) {
	exited := make(chan struct{})
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		close(exited)
		return exited, nil
	}
	if err != nil {
		// No pidfd (a kernel before 5.3): look now and then.
		go func() {
			for unix.Kill(pid, 0) == nil && !zombie(pid) {
				time.Sleep(100 * time.Millisecond)
			}
			close(exited)
		}()
		return exited, nil
	}
	go func() {
		defer unix.Close(fd)
		waitPidfd(fd, -1)
		close(exited)
	}()
	return exited, nil
}

// waitPidfd waits up to ms milliseconds (-1: for ever) for the process
// to end, and reports whether it did.
func waitPidfd(fd, ms int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, ms)
		if err == unix.EINTR {
			continue
		}
		return err == nil && n > 0
	}
}

// stop ends the service on sock: SIGTERM, then SIGKILL if it lingers. The
// signals go through a pidfd opened while pid still served sock, so a
// pid reused meanwhile is never signalled.
func stop(pid int, sock string) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return stopByPid(pid, sock)
	}
	defer unix.Close(fd)
	if !servesSocket(pid, sock) {
		return nil
	}
	_ = unix.PidfdSendSignal(fd, unix.SIGTERM, nil, 0)
	if waitPidfd(fd, int(stopTimeout/time.Millisecond)) {
		return nil
	}
	_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	if waitPidfd(fd, int(stopTimeout/time.Millisecond)) {
		return nil
	}
	return fmt.Errorf("the podman service (pid %d) did not end on SIGKILL", pid)
}

// stopByPid is stop on a kernel without pidfds (before 5.3): the command
// line is checked right before each signal.
func stopByPid(pid int, sock string) error {
	for _, sig := range []unix.Signal{unix.SIGTERM, unix.SIGKILL} {
		if !servesSocket(pid, sock) {
			return nil
		}
		_ = unix.Kill(pid, sig)
		for deadline := time.Now().Add(stopTimeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if !servesSocket(pid, sock) {
				return nil
			}
		}
	}
	return fmt.Errorf("the podman service (pid %d) did not end on SIGKILL", pid)
}
