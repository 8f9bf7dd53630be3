// Package apiservice runs the podman API service that a user's sessions
// share: one `podman system service` per podman binary and podman
// environment, started by the first session that needs it and stopped by
// the last one to let go of it.
//
// A service of its own cost every session a podman start (about 0.1 s of
// its start-up and half a CPU-second of work in all) and every command a
// second process; eight sessions at once ran eight services. The socket
// lives in a 0700 dir under the user's runtime dir, which no container
// mounts, so no agent ever reaches it.
//
// Two locks keep the sessions apart. The start lock (KEY.lock) is held
// while a service is looked at, started or stopped, never for longer.
// The users file (KEY.users) is flock'ed shared by every session that uses
// the service, for as long as it uses it; the kernel drops that lock when
// the session's process dies, however it dies. Whoever lets go takes the
// start lock and tries the users file exclusive: if it gets it, nobody else
// uses the service, and it stops it. A service whose users were all killed
// is left running until the next session lets go of it, or until Collect
// (gc, and every session's start) finds it unused.
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
	// attach it closes. Its log starts over at each start and when a
	// session finds it past logLimit; only its tail is ever read.
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
	// Env is the environment the service runs with, and whose podman
	// part (see keyed) decides which service a session shares.
	Env []string
}

// keyed reports whether podman, or a helper it runs (conmon, runc,
// netavark), reads the variable: sessions that differ in one of these
// must not share a service. Anything else (the terminal, the shell, the
// agent's keys) does not change what the service does.
func keyed(name string) bool {
	for _, p := range []string{"CONTAINERS_", "CONTAINER_", "_CONTAINERS_", "XDG_", "REGISTRY_", "STORAGE_", "BUILDAH_", "PODMAN_", "LD_"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	switch strings.ToLower(name) {
	case "home", "path", "tmpdir", "dbus_session_bus_address", "ssl_cert_file", "ssl_cert_dir",
		"http_proxy", "https_proxy", "no_proxy", "all_proxy", "ftp_proxy":
		return true
	}
	return false
}

// Key names the service for a podman binary and an environment.
func Key(podman string, env []string) string {
	if abs, err := exec.LookPath(podman); err == nil {
		podman = abs
	}
	if abs, err := filepath.Abs(podman); err == nil {
		podman = abs
	}
	var vars []string
	for _, kv := range env {
		if name, _, ok := strings.Cut(kv, "="); ok && keyed(name) {
			vars = append(vars, kv)
		}
	}
	slices.Sort(vars)
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00", podman)
	for _, kv := range vars {
		fmt.Fprintf(h, "%s\x00", kv)
	}
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

// Output is the tail of what the service wrote.
func (l *Lease) Output() string {
	f, err := os.OpenFile(l.p.file(".log"), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > outputTail {
		_, _ = f.Seek(-outputTail, io.SeekEnd)
	}
	b, _ := io.ReadAll(io.LimitReader(f, outputTail))
	return strings.TrimSpace(string(b))
}

// Acquire starts using the service for spec, starting it if none answers.
// ctx's end gives up the wait for the lock or for the service.
func Acquire(ctx context.Context, spec Spec) (*Lease, error) {
	dir, err := openDir(spec.RuntimeDir)
	if err != nil {
		return nil, err
	}
	l := &Lease{p: paths{dir, Key(spec.Podman, spec.Env)}, spec: spec}
	unlock, err := l.p.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := l.ensure(ctx); err != nil {
		return nil, err
	}
	// The service appends: cut here, it goes on at the start.
	if fi, err := os.Lstat(l.p.file(".log")); err == nil && fi.Mode().IsRegular() && fi.Size() > logLimit {
		_ = os.Truncate(l.p.file(".log"), 0)
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
		pid, _ := p.running()
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
			return nil, fmt.Errorf("another agent-sandbox has held %s for %s: if no agent-sandbox runs, remove it", p.file(".lock"), lockTimeout)
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

// stopIfUnused stops the service if no lease holds the users file. The
// caller holds the start lock.
func (p paths) stopIfUnused() (bool, error) {
	users, err := os.OpenFile(p.file(".users"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return false, err
	}
	defer users.Close()
	if err := unix.Flock(int(users.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return false, nil
	}
	pid, _ := p.running()
	if pid != 0 {
		if err := stop(pid); err != nil {
			return false, err
		}
	}
	_ = os.Remove(p.sock())
	_ = os.Remove(p.file(".pid"))
	return pid != 0, nil
}

// running is the service's pid if its process still runs (0 if not),
// and whether it answers.
func (p paths) running() (int, bool) {
	b, err := os.ReadFile(p.file(".pid"))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	// The pid is ours only while it serves this socket: a pid reused by
	// another process must never be signalled.
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), "unix://"+p.sock()+"\x00") || zombie(pid) {
		return 0, false
	}
	return pid, ping(p.sock(), 2*time.Second) == nil
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
	pid, answers := l.p.running()
	if pid != 0 && answers {
		exited, err := watch(pid)
		if err != nil {
			return err
		}
		l.set(pid, exited)
		return nil
	}
	if pid != 0 {
		// Runs but does not answer: nobody can use it.
		_ = stop(pid)
	}
	_ = os.Remove(l.p.sock())
	return l.spawn(ctx)
}

func (l *Lease) set(pid int, exited chan struct{}) {
	l.mu.Lock()
	l.pid, l.exited = pid, exited
	l.mu.Unlock()
}

// spawn starts the service and waits for it to answer. It runs in a
// session of its own (no terminal's signal reaches it) and with no
// parent-death signal: it outlives the session that started it as long
// as another one uses it.
func (l *Lease) spawn(ctx context.Context) error {
	logf, err := os.OpenFile(l.p.file(".log"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(l.spec.Podman, "system", "service", "--time=0", "unix://"+l.p.sock())
	cmd.Env = l.spec.Env
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
	if err := os.WriteFile(l.p.file(".pid"), []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
		_ = cmd.Process.Kill()
		return err
	}
	l.set(pid, exited)
	if err := l.waitAnswer(ctx, exited); err != nil {
		_ = stop(pid)
		_ = os.Remove(l.p.sock())
		_ = os.Remove(l.p.file(".pid"))
		return err
	}
	return nil
}

// waitAnswer waits for a service just started to answer on the socket.
func (l *Lease) waitAnswer(ctx context.Context, exited <-chan struct{}) error {
	deadline := time.Now().Add(startTimeout)
	for {
		if err := ping(l.p.sock(), time.Second); err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("the podman service exited: %s", l.Output())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the podman service did not start within %s: check `podman info`", startTimeout)
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
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err != unix.EINTR {
				break
			}
		}
		close(exited)
	}()
	return exited, nil
}

// stop ends the service: SIGTERM, then SIGKILL if it lingers.
func stop(pid int) error {
	exited, err := watch(pid)
	if err != nil {
		return err
	}
	_ = unix.Kill(pid, unix.SIGTERM)
	select {
	case <-exited:
		return nil
	case <-time.After(stopTimeout):
	}
	_ = unix.Kill(pid, unix.SIGKILL)
	select {
	case <-exited:
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("the podman service (pid %d) did not end on SIGKILL", pid)
	}
}
