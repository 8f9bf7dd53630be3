package apiservice

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// fakeEnv makes this test binary a fake `podman system service`: it
// answers /_ping on the socket it is given until SIGTERM.
const fakeEnv = "APISERVICE_TEST_FAKE_PODMAN"

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeEnv); mode != "" {
		os.Exit(fakePodman(mode, os.Args[1:]))
	}
	os.Exit(m.Run())
}

func fakePodman(mode string, args []string) int {
	if len(args) != 4 || args[0] != "system" || args[1] != "service" {
		fmt.Fprintf(os.Stderr, "fake podman: unexpected %q\n", args)
		return 125
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	switch mode {
	case "fail":
		fmt.Fprintln(os.Stderr, "fake podman: cannot start: no storage")
		return 125
	case "hang":
		<-stop
		return 0
	case "env":
		// Says what it was started with.
		fmt.Fprintln(os.Stderr, strings.Join(os.Environ(), "\n"))
	}
	ln, err := net.Listen("unix", strings.TrimPrefix(args[3], "unix://"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 125
	}
	go func() { <-stop; ln.Close() }()
	var asked atomic.Int32
	_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Slow once started: under load, every answer takes seconds.
		if mode == "slow" && asked.Add(1) > 1 {
			time.Sleep(3 * time.Second)
		}
		_, _ = w.Write([]byte("OK"))
	}))
	return 0
}

// fake is a podman that runs this test binary as the fake in mode: a
// script, since the service gets podman's variables only.
func fake(t *testing.T, mode string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "podman")
	script := fmt.Sprintf("#!/bin/sh\n%s=%s exec %s \"$@\"\n", fakeEnv, mode, self)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// specFor is a spec for podman in a runtime dir of the test's own.
func specFor(podman, runtimeDir string, extra ...string) Spec {
	env := append([]string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}, extra...)
	return Spec{Podman: podman, RuntimeDir: runtimeDir, Env: env}
}

func runtimeDir(t *testing.T) string {
	// Short: a unix socket's path has a limit.
	d, err := os.MkdirTemp("", "as")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		Collect(d)
		os.RemoveAll(d)
	})
	return d
}

func acquire(t *testing.T, s Spec) *Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := Acquire(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil && !zombie(pid) }

func waitGone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if !alive(pid) {
			return
		}
	}
	t.Fatalf("the service (pid %d) still runs", pid)
}

func TestSharedUntilTheLastLetsGo(t *testing.T) {
	rt := runtimeDir(t)
	podman := fake(t, "ok")
	a := acquire(t, specFor(podman, rt))
	b := acquire(t, specFor(podman, rt, "TERM=xterm", "SECRET_KEY=x"))
	if a.Pid() != b.Pid() || a.Sock() != b.Sock() {
		t.Fatalf("two sessions with the same podman environment got two services: %d %s, %d %s", a.Pid(), a.Sock(), b.Pid(), b.Sock())
	}
	pid := a.Pid()
	if stopped, err := a.Release(); err != nil || stopped {
		t.Fatalf("the first to let go stopped the service another session uses (stopped %v, %v)", stopped, err)
	}
	if err := ping(b.Sock(), time.Second); err != nil {
		t.Fatalf("the service no longer answers its remaining user: %v", err)
	}
	if stopped, err := b.Release(); err != nil || !stopped {
		t.Fatalf("the last to let go did not stop the service (stopped %v, %v)", stopped, err)
	}
	waitGone(t, pid)
	if _, err := os.Lstat(b.Sock()); err == nil {
		t.Errorf("the socket is left after the service stopped")
	}
	c := acquire(t, specFor(podman, rt))
	defer c.Release()
	if c.Pid() == pid {
		t.Fatalf("a new session got the stopped service's pid %d", pid)
	}
	if err := ping(c.Sock(), time.Second); err != nil {
		t.Fatalf("the service started again does not answer: %v", err)
	}
}

func TestTheServiceGetsPodmansVariablesOnly(t *testing.T) {
	rt := runtimeDir(t)
	l := acquire(t, specFor(fake(t, "env"), rt, "ANTHROPIC_API_KEY=sk-secret", "NOTIFY_SOCKET=/run/n", "XDG_CONFIG_HOME=/c", "https_proxy=http://p:1"))
	defer l.Release()
	out := l.Output()
	for _, want := range []string{"XDG_CONFIG_HOME=/c", "https_proxy=http://p:1", "PATH=/usr/bin:/bin"} {
		if !strings.Contains(out, want) {
			t.Errorf("the service lacks %s; it got:\n%s", want, out)
		}
	}
	for _, never := range []string{"sk-secret", "NOTIFY_SOCKET"} {
		if strings.Contains(out, never) {
			t.Errorf("the service got %s:\n%s", never, out)
		}
	}
}

func TestAnotherPodmanEnvironmentGetsItsOwn(t *testing.T) {
	rt := runtimeDir(t)
	podman := fake(t, "ok")
	a := acquire(t, specFor(podman, rt, "XDG_CONFIG_HOME=/a"))
	defer a.Release()
	for _, extra := range []string{"XDG_CONFIG_HOME=/b", "CONTAINERS_CONF=/c", "https_proxy=http://p:3128"} {
		b := acquire(t, specFor(podman, rt, "XDG_CONFIG_HOME=/a", extra))
		if b.Pid() == a.Pid() {
			t.Errorf("%s shares the service started without it", extra)
		}
		b.Release()
	}
	other := acquire(t, specFor(fake(t, "ok"), rt, "XDG_CONFIG_HOME=/a"))
	if other.Pid() == a.Pid() {
		t.Errorf("another podman binary shares the service")
	}
	other.Release()
}

func TestAChangedPodmanOrConfigGetsANewService(t *testing.T) {
	rt := runtimeDir(t)
	conf := t.TempDir()
	podman := fake(t, "ok")
	a := acquire(t, specFor(podman, rt, "XDG_CONFIG_HOME="+conf))
	defer a.Release()
	if err := os.MkdirAll(filepath.Join(conf, "containers"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(conf, "containers", "containers.conf"), []byte("[engine]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := acquire(t, specFor(podman, rt, "XDG_CONFIG_HOME="+conf))
	defer b.Release()
	if b.Pid() == a.Pid() {
		t.Error("a session after the user's containers.conf changed joined the service started before")
	}
	now := time.Now().Add(time.Minute)
	if err := os.Chtimes(podman, now, now); err != nil {
		t.Fatal(err)
	}
	c := acquire(t, specFor(podman, rt, "XDG_CONFIG_HOME="+conf))
	defer c.Release()
	if c.Pid() == b.Pid() {
		t.Error("a session after podman changed joined the service started before")
	}
}

func TestCollectStopsWhatKilledSessionsLeft(t *testing.T) {
	rt := runtimeDir(t)
	podman := fake(t, "ok")
	used := acquire(t, specFor(podman, rt, "XDG_CONFIG_HOME=/used"))
	defer used.Release()
	orphan := acquire(t, specFor(podman, rt, "XDG_CONFIG_HOME=/orphan"))
	// What the kernel does for a SIGKILLed session: its lock goes.
	orphan.users.Close()
	got := Collect(rt)
	want := fmt.Sprintf("the unused podman service %s (pid %d)", orphan.p.key, orphan.Pid())
	if len(got) != 1 || got[0] != want {
		t.Fatalf("Collect = %q, want [%q]", got, want)
	}
	waitGone(t, orphan.Pid())
	if !alive(used.Pid()) || ping(used.Sock(), time.Second) != nil {
		t.Fatalf("Collect stopped a service a session uses")
	}
}

func TestNeverSignalsWhatIsNotItsService(t *testing.T) {
	rt := runtimeDir(t)
	podman := fake(t, "ok")
	l := acquire(t, specFor(podman, rt))
	sock := l.Sock()
	pid := l.Pid()
	l.Release()
	waitGone(t, pid)
	// Another program of the user's listens on the socket's path: this
	// test's own process.
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if got := Collect(rt); len(got) != 0 {
		t.Fatalf("Collect stopped %q", got)
	}
	m := acquire(t, specFor(podman, rt))
	defer m.Release()
	if m.Pid() == os.Getpid() {
		t.Fatal("took this process for the service")
	}
	if err := ping(m.Sock(), time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestASlowServiceInUseIsWaitedForNotKilled(t *testing.T) {
	rt := runtimeDir(t)
	podman := fake(t, "slow")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := Acquire(ctx, specFor(podman, rt))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	// Each ping takes 3 s, longer than a look allows: the second session
	// must wait for it, not take it for stuck and kill it.
	b, err := Acquire(ctx, specFor(podman, rt))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	if b.Pid() != a.Pid() || !alive(a.Pid()) {
		t.Fatalf("the second session replaced the slow service (%d, was %d)", b.Pid(), a.Pid())
	}
}

// twoSessions are two leases on one service.
func twoSessions(t *testing.T) (*Lease, *Lease) {
	t.Helper()
	rt := runtimeDir(t)
	podman := fake(t, "ok")
	a := acquire(t, specFor(podman, rt))
	b := acquire(t, specFor(podman, rt))
	t.Cleanup(func() { a.Release(); b.Release() })
	return a, b
}

func TestDeathIsSeenAndRestartServesTheSameSocket(t *testing.T) {
	a, b := twoSessions(t)
	old := a.Pid()
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*Lease{a, b} {
		select {
		case <-l.Exited():
		case <-time.After(5 * time.Second):
			t.Fatal("the service's death was not seen")
		}
	}
	ctx := context.Background()
	if err := a.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Pid() == old || a.Pid() != b.Pid() {
		t.Fatalf("after the death: pids %d and %d (old %d): want one new service", a.Pid(), b.Pid(), old)
	}
	if err := ping(a.Sock(), time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestAServiceThatCannotStartSaysWhy(t *testing.T) {
	rt := runtimeDir(t)
	_, err := Acquire(context.Background(), specFor(fake(t, "fail"), rt))
	if err == nil || !strings.Contains(err.Error(), "no storage") {
		t.Fatalf("err = %v, want the service's own words", err)
	}
	_, err = Acquire(context.Background(), specFor(filepath.Join(rt, "no-such-podman"), rt))
	var se *StartError
	if err == nil || !errors.As(err, &se) {
		t.Fatalf("err = %v, want a StartError", err)
	}
}

func TestAGivenUpStartLeavesNothing(t *testing.T) {
	rt := runtimeDir(t)
	spec := specFor(fake(t, "hang"), rt)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := Acquire(ctx, spec); err == nil {
		t.Fatal("a service that never answered was taken")
	}
	p := paths{filepath.Join(rt, DirName), Key(spec.Podman, spec.Env, spec.Cwd)}
	if _, err := os.Lstat(p.sock()); err == nil {
		t.Errorf("%s is left after the start was given up", p.sock())
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, c := range procs {
		if b, _ := os.ReadFile(c); strings.Contains(string(b), p.sock()) {
			t.Errorf("the service that never answered still runs: %s", c)
		}
	}
}

func TestRefusesASharedDirOthersCanReach(t *testing.T) {
	for name, prep := range map[string]func(t *testing.T, dir string) error{
		"open to others": func(t *testing.T, dir string) error {
			if err := os.Mkdir(dir, 0o700); err != nil {
				return err
			}
			return os.Chmod(dir, 0o755)
		},
		// To a dir of the test's own: never chmod through it.
		"a symlink": func(t *testing.T, dir string) error { return os.Symlink(t.TempDir(), dir) },
	} {
		t.Run(name, func(t *testing.T) {
			rt := runtimeDir(t)
			dir := filepath.Join(rt, DirName)
			if err := prep(t, dir); err != nil {
				t.Fatal(err)
			}
			_, err := Acquire(context.Background(), specFor(fake(t, "ok"), rt))
			if err == nil || !strings.Contains(err.Error(), "closed to others") {
				t.Fatalf("err = %v, want a refusal naming the dir", err)
			}
		})
	}
}

func TestKeyIgnoresWhatPodmanDoesNotRead(t *testing.T) {
	base := []string{"HOME=/h", "PATH=/bin", "XDG_RUNTIME_DIR=/run/user/1"}
	k := Key("/usr/bin/podman", base, "")
	if Key("/usr/bin/podman", append(base, "TERM=xterm", "ANTHROPIC_API_KEY=sk", "PWD=/x", "SHLVL=2", "NOTIFY_SOCKET=/n",
		"XDG_SESSION_ID=4", "CONTAINER_HOST=unix:///x", "CONTAINER_PASSPHRASE=p"), "") != k {
		t.Error("the terminal, the shell, a key or a remote podman's variables changed the service")
	}
	for _, kv := range []string{"XDG_CONFIG_HOME=/c", "CONTAINERS_STORAGE_CONF=/s", "HTTPS_PROXY=http://p", "TMPDIR=/t",
		"LD_PRELOAD=/x.so", "USER=u", "DOCKER_CONFIG=/d", "container=podman"} {
		if Key("/usr/bin/podman", append(base, kv), "") == k {
			t.Errorf("%s did not change the service", kv)
		}
	}
	// A resource limit the containers inherit from the service.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_CORE, &lim); err != nil {
		t.Fatal(err)
	}
	lower := lim
	lower.Cur = 0
	if lim.Cur == 0 {
		lower.Cur = 1
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_CORE, &lower); err != nil {
		t.Fatal(err)
	}
	changed := Key("/usr/bin/podman", base, "") != k
	if err := syscall.Setrlimit(syscall.RLIMIT_CORE, &lim); err != nil {
		t.Fatal(err)
	}
	if !changed {
		t.Error("another resource limit shares the service")
	}
}

// TestNeverRunsAPodmanTheAgentCouldWrite: the launch dir is the agent's;
// neither a PATH entry there (an activated .venv/bin, the current dir)
// nor a relative podman may pick the binary the host runs.
func TestNeverRunsAPodmanTheAgentCouldWrite(t *testing.T) {
	rt := runtimeDir(t)
	launch := t.TempDir()
	planted := filepath.Join(launch, ".venv", "bin")
	if err := os.MkdirAll(planted, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{launch, planted} {
		if err := os.WriteFile(filepath.Join(d, "podman"), []byte("#!/bin/sh\ntouch "+filepath.Join(launch, "RAN")+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, path := range []string{"", ".", ":/nonexistent", planted + ":/nonexistent", "/nonexistent:.venv/bin"} {
		spec := Spec{Podman: "podman", RuntimeDir: rt, Env: []string{"PATH=" + path, "HOME=/nonexistent"}, Cwd: launch}
		_, err := Acquire(context.Background(), spec)
		var se *StartError
		if !errors.As(err, &se) || !errors.Is(err, exec.ErrNotFound) {
			t.Errorf("PATH=%q: err = %v, want podman not found", path, err)
		}
	}
	for _, podman := range []string{"./podman", filepath.Join(planted, "podman")} {
		spec := Spec{Podman: podman, RuntimeDir: rt, Env: []string{"PATH=/usr/bin:/bin"}, Cwd: launch}
		if _, err := Acquire(context.Background(), spec); err == nil {
			t.Errorf("podman %s in the launch dir was taken", podman)
		}
	}
	if _, err := os.Stat(filepath.Join(launch, "RAN")); err == nil {
		t.Fatal("a podman from the launch dir ran")
	}
	// The service itself gets a PATH without the launch dir's entries.
	got := trustedPath(strings.Join([]string{planted, "", ".", "rel/bin", "/usr/bin", launch, "/bin"}, ":"), launch)
	if got != "/usr/bin:/bin" {
		t.Errorf("trustedPath = %q, want /usr/bin:/bin", got)
	}
}

func TestTheServiceGetsATrustedPath(t *testing.T) {
	rt := runtimeDir(t)
	launch := t.TempDir()
	spec := specFor(fake(t, "env"), rt)
	spec.Env[0] = "PATH=" + filepath.Join(launch, "bin") + ":/usr/bin:/bin"
	spec.Cwd = launch
	l := acquire(t, spec)
	defer l.Release()
	if out := l.Output(); !strings.Contains(out, "PATH=/usr/bin:/bin\n") || strings.Contains(out, launch) {
		t.Errorf("the service's environment:\n%s", out)
	}
}

// TestACrashIsToldToEverySession: one session starting the next service
// does not hide what the dead one said from the others.
func TestACrashIsToldToEverySession(t *testing.T) {
	a, b := twoSessions(t)
	f, err := os.OpenFile(a.p.file(".log"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(f, "fatal: the storage is gone")
	f.Close()
	if err := syscall.Kill(a.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.Exited()
	<-b.Exited()
	if err := a.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if out := b.Output(); !strings.Contains(out, "the storage is gone") {
		t.Errorf("the other session sees %q", out)
	}
	if out := a.Output(); strings.Contains(out, "the storage is gone") {
		t.Errorf("the restarting session's new service shows the old one's words: %q", out)
	}
}
