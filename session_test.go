package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const testSession = "agent-sandbox-1-2"

func testConfig(t *testing.T) sessionConfig {
	t.Helper()
	old := readyTimeout
	readyTimeout = 200 * time.Millisecond
	t.Cleanup(func() { readyTimeout = old })
	t.Setenv("AGENT_SANDBOX_IMAGE", "")
	t.Setenv("AGENT_SANDBOX_ROUTER_IMAGE", "")
	t.Setenv("AGENT_SANDBOX_HOME_VOLUME", "")
	return sessionConfig{
		name:          testSession,
		launchDir:     "/work/project",
		tmp:           t.TempDir(),
		entries:       []entry{{Host: "allowed.test", Port: 443}, {Host: "allowed.test", Port: 2222}},
		cmd:           []string{"sh", "-c", "exit 7"},
		upstreamDNS:   "10.99.0.10",
		upstreamAllow: "10.99.0.0/24",
	}
}

// happyCalls is what a whole session asks of podman, in order.
var happyCalls = []string{
	"NetworkCreate agent-sandbox-egress",
	"VolumeCreate agent-sandbox-home",
	"NetworkCreate " + testSession,
	"ContainerCreate " + testSession + "-router",
	"ContainerStartReady " + testSession + "-router routerd: ready",
	"PodCreate " + testSession,
	"ContainerCreate " + testSession + "-forwarder",
	"ContainerStartReady " + testSession + "-forwarder forwarder: ready",
	"ContainerCreate " + testSession + "-claude",
	"ContainerRun " + testSession + "-claude",
}

var teardownCalls = []string{
	"PodRemove " + testSession,
	"ContainerRemove " + testSession + "-router",
	"NetworkRemove " + testSession,
}

func TestSessionRunsAgentAndTearsDown(t *testing.T) {
	eng := newFakeEngine()
	eng.runCode = 7
	cfg := testConfig(t)
	if code := runSession(context.Background(), eng, cfg); code != 7 {
		t.Fatalf("exit code = %d, want the agent's 7", code)
	}
	want := append(slices.Clone(happyCalls), teardownCalls...)
	if !slices.Equal(eng.calls, want) {
		t.Fatalf("calls:\n%s\nwant:\n%s", strings.Join(eng.calls, "\n"), strings.Join(want, "\n"))
	}
	for _, f := range []string{"dnsmasq.conf", "nginx.conf"} {
		fi, err := os.Stat(filepath.Join(cfg.tmp, f))
		if err != nil {
			t.Fatalf("router config %s not written: %v", f, err)
		}
		if fi.Mode().Perm() != 0o644 {
			t.Errorf("%s mode = %v, want 0644 so the router can read it", f, fi.Mode().Perm())
		}
	}
}

func TestSessionFailureAtEachStepTearsDown(t *testing.T) {
	for i, step := range happyCalls {
		t.Run(step, func(t *testing.T) {
			eng := newFakeEngine()
			eng.failOn = step
			code := runSession(context.Background(), eng, testConfig(t))
			if code != exitPodman {
				t.Fatalf("exit code = %d, want %d", code, exitPodman)
			}
			want := slices.Concat(happyCalls[:i+1], teardownCalls)
			if !slices.Equal(eng.calls, want) {
				t.Fatalf("calls after failing %q:\n%s\nwant:\n%s", step, strings.Join(eng.calls, "\n"), strings.Join(want, "\n"))
			}
			if !slices.Equal(eng.calls[len(eng.calls)-len(teardownCalls):], teardownCalls) {
				t.Fatalf("teardown missing after failing %q:\n%s", step, strings.Join(eng.calls, "\n"))
			}
		})
	}
}

func TestSessionRouterNeverReadyReportsLogs(t *testing.T) {
	eng := newFakeEngine()
	eng.notReady = true
	stderr := captureStderr(t)
	code := runSession(context.Background(), eng, testConfig(t))
	if code != exitRefused {
		t.Fatalf("exit code = %d, want %d", code, exitRefused)
	}
	if slices.Contains(eng.calls, "PodCreate "+testSession) {
		t.Fatal("pod created although the router never got ready")
	}
	if !slices.Contains(eng.calls, "ContainerLogs "+testSession+"-router") {
		t.Fatal("router logs were not fetched")
	}
	if out := stderr(); !strings.Contains(out, "fake log line") || !strings.Contains(out, "-router exited before it was ready") {
		t.Fatalf("stderr does not show the router's logs: %q", out)
	}
	if !slices.Equal(eng.calls[len(eng.calls)-3:], teardownCalls) {
		t.Fatalf("no teardown: %v", eng.calls)
	}
}

func TestSessionSignalStopsAgentBeforeRemoval(t *testing.T) {
	eng := newFakeEngine()
	ctx, cancel := context.WithCancel(context.Background())
	eng.runHook = func(ctx context.Context) error {
		cancel()
		return ctx.Err()
	}
	if code := runSession(ctx, eng, testConfig(t)); code != exitSignal {
		t.Fatalf("exit code = %d, want %d", code, exitSignal)
	}
	want := append([]string{"ContainerStop " + testSession + "-claude"}, teardownCalls...)
	if got := eng.calls[len(eng.calls)-len(want):]; !slices.Equal(got, want) {
		t.Fatalf("teardown = %v, want %v", got, want)
	}
}

func TestSessionSpecs(t *testing.T) {
	eng := newFakeEngine()
	cfg := testConfig(t)
	cfg.tty = true
	runSession(context.Background(), eng, cfg)

	sess := eng.networks[testSession]
	if !sess.Internal || sess.DNSEnabled {
		t.Errorf("session network internal=%v dns=%v, want internal with podman's DNS off", sess.Internal, sess.DNSEnabled)
	}
	if eg := eng.networks[egressNet]; eg.Internal || !eg.DNSEnabled {
		t.Errorf("egress network internal=%v dns=%v, want a DNS-enabled bridge", eg.Internal, eg.DNSEnabled)
	}

	r := eng.containers[testSession+"-router"]
	if got := r.Networks[testSession].StaticIPs; len(got) != 1 || got[0].String() != "10.89.7.2" {
		t.Errorf("router session IP = %v, want 10.89.7.2", got)
	}
	if _, ok := r.Networks[egressNet]; !ok {
		t.Error("router is not on the egress network")
	}
	if len(r.Mounts) != 1 || r.Mounts[0].Destination != "/etc/router" || !slices.Contains(r.Mounts[0].Options, "ro") {
		t.Errorf("router config mount = %+v, want %s read-only at /etc/router", r.Mounts, cfg.tmp)
	}
	if r.Env["UPSTREAM_DNS"] != "10.99.0.10" || r.Env["UPSTREAM_ALLOW"] != "10.99.0.0/24" || r.Env["READY_ADDR"] != "10.89.7.2" {
		t.Errorf("router env = %v", r.Env)
	}
	if r.Image != "localhost/agent-sandbox-router:dev" {
		t.Errorf("router image = %s", r.Image)
	}

	p := eng.pods[testSession]
	if p.Userns.String() != "keep-id:uid=1000,gid=1000" {
		t.Errorf("pod userns = %q", p.Userns.String())
	}
	if len(p.DNSServer) != 1 || p.DNSServer[0].String() != "10.89.7.2" || !p.NoManageHosts || p.Hostname != "agent-sandbox" {
		t.Errorf("pod dns=%v noManageHosts=%v hostname=%q", p.DNSServer, p.NoManageHosts, p.Hostname)
	}
	if _, ok := p.Networks[testSession]; !ok || len(p.Networks) != 1 {
		t.Errorf("pod networks = %v, want only the session network", p.Networks)
	}

	f := eng.containers[testSession+"-forwarder"]
	if f.Pod != testSession || !*f.ReadOnlyFilesystem || !slices.Equal(f.CapDrop, []string{"all"}) || !slices.Equal(f.CapAdd, []string{"NET_BIND_SERVICE"}) {
		t.Errorf("forwarder pod=%s ro=%v drop=%v add=%v", f.Pod, *f.ReadOnlyFilesystem, f.CapDrop, f.CapAdd)
	}
	if want := "127.0.0.1:443=10.89.7.2:443 127.0.0.2:443=10.89.7.2:443 127.0.0.2:2222=10.89.7.2:10001"; f.Env["FORWARDS"] != want {
		t.Errorf("FORWARDS = %q, want %q", f.Env["FORWARDS"], want)
	}

	c := eng.containers[testSession+"-claude"]
	if c.Pod != testSession || !*c.Terminal || !*c.Stdin || !*c.Init {
		t.Errorf("agent pod=%s tty=%v stdin=%v init=%v", c.Pod, *c.Terminal, *c.Stdin, *c.Init)
	}
	for _, capName := range []string{"NET_ADMIN", "NET_RAW", "SYS_ADMIN"} {
		if !slices.Contains(c.CapDrop, capName) {
			t.Errorf("agent keeps %s", capName)
		}
	}
	if len(c.Devices) != 2 || c.Devices[0].Path != "/dev/fuse" || c.Devices[1].Path != "/dev/net/tun" {
		t.Errorf("agent devices = %v", c.Devices)
	}
	if len(c.Volumes) != 1 || c.Volumes[0].Name != "agent-sandbox-home" || c.Volumes[0].Dest != "/home/claude" {
		t.Errorf("agent volumes = %+v", c.Volumes)
	}
	if len(c.Mounts) != 1 || c.Mounts[0].Source != "/work/project" || c.Mounts[0].Destination != "/work/project" || c.WorkDir != "/work/project" {
		t.Errorf("agent mounts = %+v workdir = %s", c.Mounts, c.WorkDir)
	}
	if !slices.Equal(c.Command, cfg.cmd) || c.Env["DISABLE_AUTOUPDATER"] != "1" {
		t.Errorf("agent command = %v env = %v", c.Command, c.Env)
	}
	for name, s := range eng.containers {
		if s.Labels[labelSession] != testSession {
			t.Errorf("container %s lacks the session label", name)
		}
	}
	if sess.Labels[labelSession] != testSession || p.Labels[labelSession] != testSession {
		t.Error("network or pod lacks the session label")
	}
}

func TestImageNamesAndOverrides(t *testing.T) {
	t.Setenv("AGENT_SANDBOX_IMAGE", "")
	t.Setenv("AGENT_SANDBOX_ROUTER_IMAGE", "")
	if img, r := imageNames(); img != "localhost/agent-sandbox:dev" || r != "localhost/agent-sandbox-router:dev" {
		t.Errorf("dev images = %s %s", img, r)
	}
	version, registry = "1.2.3", "registry.example.com/team"
	defer func() { version, registry = "dev", "" }()
	if img, r := imageNames(); img != "registry.example.com/team/agent-sandbox:1.2.3" || r != "registry.example.com/team/agent-sandbox-router:1.2.3" {
		t.Errorf("release images = %s %s", img, r)
	}
	t.Setenv("AGENT_SANDBOX_IMAGE", "localhost/mine:1")
	t.Setenv("AGENT_SANDBOX_ROUTER_IMAGE", "localhost/router:1")
	if img, r := imageNames(); img != "localhost/mine:1" || r != "localhost/router:1" {
		t.Errorf("overridden images = %s %s", img, r)
	}
}

// captureStderr redirects os.Stderr until the returned func is called.
func captureStderr(t *testing.T) func() string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stderr
	os.Stderr = w
	out := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		out <- string(b)
	}()
	done := false
	restore := func() string {
		if done {
			return ""
		}
		done = true
		os.Stderr = old
		w.Close()
		return <-out
	}
	t.Cleanup(func() { restore() })
	return restore
}
