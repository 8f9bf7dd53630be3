package main

import (
	"bytes"
	"context"
	"errors"
	"log"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

func newSupervisor(logs *syncBuffer, children ...child) *supervisor {
	return &supervisor{
		children: children,
		grace:    300 * time.Millisecond,
		stdout:   logs,
		stderr:   logs,
		log:      log.New(logs, "routerd: ", 0),
	}
}

// pidChild runs script under sh, which records its pid in a file where
// script says {pid} (or first), so tests can check afterwards that it is
// gone. waitCmd is a shell command that returns once the pid is recorded.
func pidChild(t *testing.T, name, script string) (c child, pid func() int, waitCmd string) {
	pidFile := filepath.Join(t.TempDir(), name+".pid")
	record := "echo $$ > " + pidFile
	if strings.Contains(script, "{pid}") {
		script = strings.ReplaceAll(script, "{pid}", record)
	} else {
		script = record + "; " + script
	}
	c = child{name, []string{"sh", "-c", script}}
	waitCmd = "while [ ! -s " + pidFile + " ]; do sleep 0.02; done"
	pid = func() int {
		t.Helper()
		for range 250 {
			if b, err := os.ReadFile(pidFile); err == nil && len(b) > 0 && b[len(b)-1] == '\n' {
				pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
				if err != nil {
					t.Fatal(err)
				}
				return pid
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%s never wrote its pid", name)
		return 0
	}
	return c, pid, waitCmd
}

func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

func TestSuperviseChildFails(t *testing.T) {
	logs := &syncBuffer{}
	sleeper, sleeperPid, started := pidChild(t, "sleeper", "exec sleep 1000")
	s := newSupervisor(logs, sleeper, child{"nginx", []string{"sh", "-c", started + "; exit 1"}})
	start := time.Now()
	code := s.run(context.Background(), nil)
	if code != 1 {
		t.Errorf("run = %d, want 1", code)
	}
	if !strings.Contains(logs.String(), "routerd: nginx exited: exit status 1\n") {
		t.Errorf("log %q does not report nginx's failure", logs)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v; the sleeper should have stopped on SIGTERM", d)
	}
	if pid := sleeperPid(); alive(pid) {
		t.Errorf("sleeper %d still running", pid)
	}
}

func TestSuperviseFalse(t *testing.T) {
	logs := &syncBuffer{}
	s := newSupervisor(logs, child{"sleep", []string{"sleep", "1000"}}, child{"false", []string{"false"}})
	if code := s.run(context.Background(), nil); code != 1 {
		t.Errorf("run = %d, want 1", code)
	}
	if got := logs.String(); got != "routerd: false exited: exit status 1\n" {
		t.Errorf("log %q", got)
	}
}

func TestSuperviseChildExitsZero(t *testing.T) {
	logs := &syncBuffer{}
	s := newSupervisor(logs, child{"sleep", []string{"sleep", "1000"}}, child{"dnsmasq", []string{"true"}})
	if code := s.run(context.Background(), nil); code != 1 {
		t.Errorf("run = %d, want 1: the router is broken without dnsmasq", code)
	}
	if !strings.Contains(logs.String(), "routerd: dnsmasq exited: exit status 0") {
		t.Errorf("log %q", logs)
	}
}

func TestSuperviseSignal(t *testing.T) {
	logs := &syncBuffer{}
	a, aPid, _ := pidChild(t, "a", "exec sleep 1000")
	b, bPid, _ := pidChild(t, "b", "sleep 1000") // sh waits for sleep: the whole group must go
	s := newSupervisor(logs, a, b)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- s.run(ctx, nil) }()
	pids := []int{aPid(), bPid()}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("run = %d, want 0 after a signal", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("child %d still running", pid)
		}
	}
	if logs.String() != "" {
		t.Errorf("unexpected log %q", logs)
	}
}

func TestSuperviseKillsStubbornChild(t *testing.T) {
	logs := &syncBuffer{}
	stubborn, pid, trapped := pidChild(t, "stubborn", `trap "" TERM; {pid}; sleep 1000 & wait; wait`)
	s := newSupervisor(logs, stubborn, child{"false", []string{"sh", "-c", trapped + "; false"}})
	start := time.Now()
	if code := s.run(context.Background(), nil); code != 1 {
		t.Errorf("run = %d, want 1", code)
	}
	d := time.Since(start)
	if d < s.grace || d > s.grace+2*time.Second {
		t.Errorf("took %v, want about the %v grace period", d, s.grace)
	}
	if alive(pid()) {
		t.Error("stubborn child survived SIGKILL")
	}
	if !strings.Contains(logs.String(), "routerd: stubborn did not stop within 300ms, killing it") {
		t.Errorf("log %q", logs)
	}
}

func TestSuperviseStartFailure(t *testing.T) {
	logs := &syncBuffer{}
	marker := filepath.Join(t.TempDir(), "started")
	s := newSupervisor(logs,
		child{"first", []string{"sleep", "1000"}},
		child{"nginx", []string{"/nonexistent/nginx"}},
		child{"never", []string{"touch", marker}})
	start := time.Now()
	// run reaps every child it started before returning, so returning at
	// all shows the first child was stopped.
	if code := s.run(context.Background(), nil); code != 1 {
		t.Errorf("run = %d, want 1", code)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v to stop the first child", d)
	}
	if !strings.Contains(logs.String(), "routerd: cannot start nginx: ") {
		t.Errorf("log %q", logs)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("a child after the failed one was started")
	}
}

func TestSuperviseFilterStops(t *testing.T) {
	logs := &syncBuffer{}
	stopped := make(chan error, 1)
	stopped <- errors.New("dns filter stopped: udp: broken")
	s := newSupervisor(logs, child{"sleep", []string{"sleep", "1000"}})
	if code := s.run(context.Background(), stopped); code != 1 {
		t.Errorf("run = %d, want 1", code)
	}
	if !strings.Contains(logs.String(), "routerd: dns filter stopped: udp: broken") {
		t.Errorf("log %q", logs)
	}
}

func TestSupervisePassesOutput(t *testing.T) {
	logs := &syncBuffer{}
	s := newSupervisor(logs, child{"talker", []string{"sh", "-c", "echo out; echo err >&2; exit 3"}})
	if code := s.run(context.Background(), nil); code != 1 {
		t.Errorf("run = %d, want 1", code)
	}
	for _, want := range []string{"out\n", "err\n", "routerd: talker exited: exit status 3\n"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("output %q lacks %q", logs, want)
		}
	}
}

// TestRun drives the whole of routerd in-process: filter plus children.
func TestRun(t *testing.T) {
	up := startFakeUpstream(t)
	port := freePort(t)
	logs := &syncBuffer{}
	cfg := config{
		dnsListen: port,
		upstreams: []netip.AddrPort{up.addr},
		children:  []child{{"dnsmasq", []string{"sleep", "1000"}}, {"nginx", []string{"sleep", "1000"}}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, cfg, logs, logs) }()

	var m *dnsmessage.Message
	var err error
	for range 50 {
		if m, err = ask(port, newQuery(1, "mixed.test.", dnsmessage.TypeA, 0), false); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Answers) != 3 {
		t.Errorf("answers through run: %v", summary(m.Answers))
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("run = %d, want 0; log:\n%s", code, logs)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}

func TestRunFilterListenFails(t *testing.T) {
	busy, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = busy.Close() }()
	marker := filepath.Join(t.TempDir(), "started")
	logs := &syncBuffer{}
	cfg := config{
		dnsListen: busy.LocalAddr().String(),
		children:  []child{{"touch", []string{"touch", marker}}},
	}
	if code := run(context.Background(), cfg, logs, logs); code != 1 {
		t.Errorf("run = %d, want 1", code)
	}
	if !strings.Contains(logs.String(), "routerd: dns filter: cannot listen on ") {
		t.Errorf("log %q", logs)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("a child started although the filter could not listen")
	}
}

// TestRunSetUpFailureStopsTheChildren: dnsmasq and nginx start before the
// API gate's config is read; when that fails, routerd stops them, never
// says it is ready, and exits 1 (the launcher then ends the session).
func TestRunSetUpFailureStopsTheChildren(t *testing.T) {
	dir := t.TempDir()
	policy := filepath.Join(dir, "api-policy.json")
	if err := os.WriteFile(policy, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(dir, "child.pid")
	port := freePort(t)
	logs := &syncBuffer{}
	cfg := config{
		dnsListen: port,
		apiPolicy: policy,
		children:  []child{{"nginx", []string{"sh", "-c", "echo $$ > " + pidFile + "; exec sleep 1000"}}},
		// The filter's own port: ready at once, were the line not held
		// back until the set-up is done.
		ready: []readyTarget{{"tcp", port}},
	}
	done := make(chan int, 1)
	go func() { done <- run(context.Background(), cfg, logs, logs) }()
	select {
	case code := <-done:
		if code != 1 {
			t.Errorf("run = %d, want 1; log:\n%s", code, logs)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("run did not return after its set-up failed; log:\n%s", logs)
	}
	if !strings.Contains(logs.String(), policy) {
		t.Errorf("the log does not name the policy file: %q", logs)
	}
	if strings.Contains(logs.String(), readyLine) {
		t.Errorf("routerd said it was ready: %q", logs)
	}
	// The child may have been stopped before it wrote its pid; one left
	// running writes it within moments.
	for deadline := time.Now().Add(500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(pidFile)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(pid, 0); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("the child (pid %d) still runs after routerd returned", pid)
		}
		return
	}
}

// freePort returns a loopback address whose UDP and TCP ports were just
// free.
func freePort(t *testing.T) string {
	srv, err := listenDNS(nil, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := srv.tcp.Addr().String()
	_ = srv.udp.Close()
	_ = srv.tcp.Close()
	return addr
}

func TestConfigFromEnv(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	ap := netip.MustParseAddrPort

	cfg, err := configFromEnv(env("UPSTREAM_DNS", "10.89.1.1, fd00::53,127.0.0.1:5300", "UPSTREAM_ALLOW", "10.99.0.0/24", "READY_ADDR", "10.89.7.2"), "testdata/missing", "/conf")
	if err != nil {
		t.Fatal(err)
	}
	if want := []netip.AddrPort{ap("10.89.1.1:53"), ap("[fd00::53]:53"), ap("127.0.0.1:5300")}; !reflect.DeepEqual(cfg.upstreams, want) {
		t.Errorf("upstreams %v, want %v", cfg.upstreams, want)
	}
	if want := []netip.Prefix{netip.MustParsePrefix("10.99.0.0/24")}; !reflect.DeepEqual(cfg.allow, want) {
		t.Errorf("allow %v, want %v", cfg.allow, want)
	}
	if cfg.dnsListen != "127.0.0.1:5353" {
		t.Errorf("dnsListen %q", cfg.dnsListen)
	}
	if cfg.readyAddr.String() != "10.89.7.2" || cfg.front != ap("10.89.7.2:53") || cfg.backend != ap("127.0.0.1:5354") {
		t.Errorf("ready %v front %v backend %v", cfg.readyAddr, cfg.front, cfg.backend)
	}
	wantChildren := []child{
		// dnsmasq runs from routerd's copy, behind the front.
		{"dnsmasq", []string{"dnsmasq", "--keep-in-foreground", "--conf-file=/run/routerd/dnsmasq.conf"}},
		{"nginx", []string{"nginx", "-c", "/conf/nginx.conf"}},
	}
	if !reflect.DeepEqual(cfg.children, wantChildren) {
		t.Errorf("children %v, want %v", cfg.children, wantChildren)
	}

	cfg, err = configFromEnv(env("READY_ADDR", "10.89.7.2"), "testdata/resolv.conf", "/etc/router")
	if err != nil {
		t.Fatal(err)
	}
	if want := []netip.AddrPort{ap("10.89.1.1:53"), ap("[fd00:89::1]:53")}; !reflect.DeepEqual(cfg.upstreams, want) {
		t.Errorf("upstreams from resolv.conf %v, want %v", cfg.upstreams, want)
	}
	if cfg.allow != nil {
		t.Errorf("allow %v, want none", cfg.allow)
	}

	bad := []struct {
		env        func(string) string
		resolvConf string
		want       string
	}{
		{env("UPSTREAM_DNS", "dns.test"), "testdata/resolv.conf", `bad UPSTREAM_DNS entry "dns.test"`},
		{env("UPSTREAM_DNS", "10.89.1.1,"), "testdata/resolv.conf", `bad UPSTREAM_DNS entry ""`},
		{env("UPSTREAM_DNS", "10.89.1.1:0"), "testdata/resolv.conf", `bad UPSTREAM_DNS entry "10.89.1.1:0"`},
		{env("UPSTREAM_ALLOW", "10.0.0.0/8,bogus"), "testdata/resolv.conf", `bad UPSTREAM_ALLOW entry "bogus"`},
		{env(), "testdata/missing", "no UPSTREAM_DNS and cannot read testdata/missing"},
		{env("UPSTREAM_DNS", "10.89.1.1"), "testdata/resolv.conf", `bad READY_ADDR "": want the router's IP address`},
		{env("UPSTREAM_DNS", "10.89.1.1", "READY_ADDR", "router.test"), "testdata/resolv.conf", `bad READY_ADDR "router.test"`},
		{env(), "testdata/resolv-bad.conf", `bad nameserver "dns.test"`},
		{env(), os.DevNull, "no upstream DNS servers: set UPSTREAM_DNS"},
	}
	for _, tc := range bad {
		if _, err := configFromEnv(tc.env, tc.resolvConf, "/etc/router"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one containing %q", err, tc.want)
		}
	}
}

// The tests below run routerd's main path in a child process.

func TestMain(m *testing.M) {
	if os.Getenv("ROUTERD_TEST_MAIN") == "1" {
		cfg := config{
			dnsListen: "127.0.0.1:0",
			upstreams: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:9")},
			children: []child{
				{"dnsmasq", []string{"sh", "-c", os.Getenv("ROUTERD_TEST_DNSMASQ")}},
				{"nginx", []string{"sh", "-c", os.Getenv("ROUTERD_TEST_NGINX")}},
			},
		}
		os.Exit(runUntilSignal(cfg))
	}
	if os.Getenv("ROUTERD_TEST_ENV") == "1" {
		main() // exits
	}
	os.Exit(m.Run())
}

func mainCmd(t *testing.T, dnsmasq, nginx string) (*exec.Cmd, *bytes.Buffer) {
	var out bytes.Buffer
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "ROUTERD_TEST_MAIN=1", "ROUTERD_TEST_DNSMASQ="+dnsmasq, "ROUTERD_TEST_NGINX="+nginx)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &out
}

func TestMainSIGTERM(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		dir := t.TempDir()
		cmd, out := mainCmd(t,
			"echo $$ > "+dir+"/dnsmasq; exec sleep 1000",
			"echo $$ > "+dir+"/nginx; echo nginx says hello; exec sleep 1000")
		var pids []int
		for _, name := range []string{"dnsmasq", "nginx"} {
			for range 250 {
				if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil && strings.HasSuffix(string(b), "\n") {
					pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
					pids = append(pids, pid)
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		if len(pids) != 2 {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("children did not start; output:\n%s", out)
		}
		_ = cmd.Process.Signal(sig)
		if err := cmd.Wait(); err != nil {
			t.Errorf("after %v: %v, want exit 0; output:\n%s", sig, err, out)
		}
		for _, pid := range pids {
			if alive(pid) {
				t.Errorf("child %d outlived routerd", pid)
			}
		}
		if !strings.Contains(out.String(), "nginx says hello\n") {
			t.Errorf("child output not passed through: %q", out)
		}
	}
}

func TestMainChildFails(t *testing.T) {
	cmd, out := mainCmd(t, "exec sleep 1000", "sleep 0.3; echo 'nginx: [emerg] bad config' >&2; exit 1")
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("exit %v, want status 1; output:\n%s", err, out)
	}
	if !strings.Contains(out.String(), "routerd: nginx exited: exit status 1\n") {
		t.Errorf("output %q", out)
	}
}

func TestMainBadEnv(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "ROUTERD_TEST_ENV=1", "UPSTREAM_DNS=10.89.1.1", "UPSTREAM_ALLOW=10.0.0.1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Errorf("exit %v, want status 2", err)
	}
	if !strings.HasPrefix(string(out), startLine+"\n"+`routerd: bad UPSTREAM_ALLOW entry "10.0.0.1"`) {
		t.Errorf("output %q", out)
	}
}
