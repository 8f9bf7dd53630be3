package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/containers/podman/v5/pkg/specgen"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/allowlist"
	"github.com/agent-sandbox/agent-sandbox/internal/podman"
	"github.com/agent-sandbox/agent-sandbox/internal/routerconf"
	"github.com/agent-sandbox/agent-sandbox/internal/sessionreg"
)

const testSession = "agent-sandbox-1-2"

// sessionFixture is a session as a test sets it up: its config, and what
// its start would have made before the steps runOn takes (the session's
// dir, found credentials, a scanned launch dir).
type sessionFixture struct {
	sessionConfig
	sessionMade
}

func testConfig(t *testing.T) sessionFixture {
	t.Helper()
	old := readyTimeout
	readyTimeout = 200 * time.Millisecond
	t.Cleanup(func() { readyTimeout = old })
	return sessionFixture{sessionConfig{
		name:          testSession,
		launchDir:     "/work/project",
		entries:       []allowlist.Entry{{Host: "allowed.test", Port: 443}, {Host: "allowed.test", Port: 2222}},
		cmd:           []string{"sh", "-c", "exit 7"},
		upstreamDNS:   "10.99.0.10",
		upstreamAllow: "10.99.0.0/24",
		egress:        egressNet,
		homeVolume:    "agent-sandbox-home",
		homeLabels:    map[string]string{labelShared: "true"},
	}, sessionMade{tmp: t.TempDir()}}
}

// session is the fixture as newSession makes it, with what its start made.
func (f sessionFixture) session(set settings, out io.Writer) *session {
	s := newSession(set, f.sessionConfig, out)
	s.made = f.sessionMade
	return s
}

// runSession runs a session with cfg against eng as launch does once the
// API service runs, on a machine whose environment sets nothing, and
// returns the exit code and what the session said on stderr.
// The collection of dead sessions, which runs beside the start, is left
// out: these tests follow the session's own steps
// (TestSessionCollectsDeadSessionsBesideItsStart has it).
func runSession(ctx context.Context, eng engine, cfg sessionFixture) (int, func() string) {
	return runSessionWith(ctx, eng, settingsFrom(map[string]string{"AGENT_SANDBOX_NO_START_GC": "1"}), cfg)
}

// runSessionWith is runSession with the settings set.
func runSessionWith(ctx context.Context, eng engine, set settings, cfg sessionFixture) (int, func() string) {
	out := &lockedBuffer{}
	s := cfg.session(set, out)
	err := outcome(ctx, s.runOn(ctx, eng, ""))
	s.teardown(ctx, err)
	report(out, err)
	return exitCode(err), out.String
}

var (
	// setupCalls come first and in this order.
	setupCalls = []string{
		"ImageExists localhost/agent-sandbox:dev",
		"ImageExists localhost/agent-sandbox-router:dev",
		"VolumeInspect agent-sandbox-home",
		"VolumeCreate agent-sandbox-home",
		"NetworkCreate agent-sandbox-egress",
		"NetworkCreate " + testSession,
	}
	// The router branch and the pod branch run side by side; each keeps
	// its own order.
	routerCalls = []string{
		"ContainerCreate " + testSession + "-router",
		"ContainerStartReady " + testSession + "-router routerd: ready",
	}
	podCalls = []string{
		"PodCreate " + testSession,
		"ContainerCreate " + testSession + "-forwarder",
		"ContainerStartReady " + testSession + "-forwarder forwarder: ready",
	}
	// The agent's image is asked for its user beside the pod's and the
	// forwarder's creation; the agent is created once the forwarder is (it
	// joins its namespaces), beside the forwarder's start.
	agentImageUser = "ImageUser "
	agentCreate    = "ContainerCreate " + testSession + "-claude"
	agentRun       = "ContainerRun " + testSession + "-claude"
	happyCalls     = slices.Concat(setupCalls, routerCalls, podCalls, []string{agentImageUser, agentCreate, agentRun})
)

// undoOf is the removal that undoes a creating call, if it made something
// that the session alone owns: the egress network and the home volume are
// shared and stay; the forwarder and the agent go with their pod.
var undoOf = map[string]string{
	"NetworkCreate " + testSession:               "NetworkRemove " + testSession,
	"ContainerCreate " + testSession + "-router": "ContainerRemove " + testSession + "-router",
	"PodCreate " + testSession:                   "PodRemove " + testSession,
}

// isRemoval reports whether a call removes or stops something.
func isRemoval(call string) bool {
	for _, p := range []string{"NetworkRemove", "ContainerRemove", "PodRemove", "VolumeRemove", "ContainerStop"} {
		if strings.HasPrefix(call, p+" ") {
			return true
		}
	}
	return false
}

// checkTeardown asserts that the session removed exactly what it created
// (the creating calls that did not fail), newest first: the router and the
// pod (made side by side, so in either order), then the session network.
func checkTeardown(t *testing.T, calls []string, failed string) {
	t.Helper()
	var want, got []string
	for _, c := range calls {
		if u, ok := undoOf[c]; ok && c != failed {
			want = append(want, u)
		}
		if isRemoval(c) && !strings.HasPrefix(c, "ContainerStop ") {
			got = append(got, c)
		}
	}
	slices.Reverse(want)
	if len(want) == 3 && len(got) == 3 {
		// The router and the pod came up side by side.
		want[0], want[1] = min(want[0], want[1]), max(want[0], want[1])
		got[0], got[1] = min(got[0], got[1]), max(got[0], got[1])
	}
	if !slices.Equal(got, want) {
		t.Fatalf("teardown removed %q, want %q:\n%s", got, want, strings.Join(calls, "\n"))
	}
}

// checkInOrder asserts that want occurs in calls as a subsequence.
func checkInOrder(t *testing.T, calls, want []string) {
	t.Helper()
	i := 0
	for _, c := range calls {
		if i < len(want) && c == want[i] {
			i++
		}
	}
	if i != len(want) {
		t.Fatalf("calls lack %q in order:\n%s", want[i], strings.Join(calls, "\n"))
	}
}

func TestSessionRunsAgentAndTearsDown(t *testing.T) {
	eng := newFakeEngine()
	eng.runCode = 7
	cfg := testConfig(t)
	if code, _ := runSession(context.Background(), eng, cfg); code != 7 {
		t.Fatalf("exit code = %d, want the agent's 7", code)
	}
	if len(eng.calls) != len(happyCalls)+4 {
		t.Fatalf("calls:\n%s", strings.Join(eng.calls, "\n"))
	}
	n := len(setupCalls)
	if !slices.Equal(eng.calls[:n], setupCalls) {
		t.Fatalf("setup = %v, want %v", eng.calls[:n], setupCalls)
	}
	middle := eng.calls[n : n+7]
	checkInOrder(t, middle, routerCalls)
	checkInOrder(t, middle, podCalls)
	checkInOrder(t, middle, []string{agentImageUser, agentCreate})
	checkInOrder(t, middle, []string{podCalls[1], agentCreate})
	if eng.calls[n+7] != agentRun {
		t.Fatalf("call after both helpers = %q, want %q", eng.calls[n+7], agentRun)
	}
	checkTeardown(t, eng.calls, "")
	for _, f := range []string{"dnsmasq.conf", "nginx.conf", "forwards"} {
		fi, err := os.Stat(filepath.Join(cfg.tmp, f))
		if err != nil {
			t.Fatalf("router config %s not written: %v", f, err)
		}
		if fi.Mode().Perm() != 0o644 {
			t.Errorf("%s mode = %v, want 0644 so the router can read it", f, fi.Mode().Perm())
		}
	}
}

// TestSessionFailureAtEachStepTearsDown: whichever start step fails, the
// session removes exactly what the steps before it created, newest first,
// and nothing else, and exits as podman would.
func TestSessionFailureAtEachStepTearsDown(t *testing.T) {
	for _, step := range happyCalls {
		t.Run(step, func(t *testing.T) {
			eng := newFakeEngine()
			eng.failOn = step
			code, stderr := runSession(context.Background(), eng, testConfig(t))
			if code != exitPodman {
				t.Fatalf("exit code = %d, want %d; stderr: %s", code, exitPodman, stderr())
			}
			if !strings.Contains(stderr(), step+": fake podman failure") {
				t.Errorf("stderr does not say what failed: %q", stderr())
			}
			if step != agentRun && slices.Contains(eng.calls, agentRun) {
				t.Fatalf("agent ran although %q failed", step)
			}
			if i := slices.Index(setupCalls, step); i >= 0 {
				if after := slices.DeleteFunc(slices.Clone(eng.calls[i+1:]), isRemoval); len(after) > 0 {
					t.Fatalf("calls went on after %q failed: %q", step, after)
				}
			}
			checkTeardown(t, eng.calls, step)
		})
	}
}

// TestSessionSignalAtEachStep: a signal during any start step, or while
// the agent runs, ends the session with 130 once what was created is
// removed; nothing is created once it came.
func TestSessionSignalAtEachStep(t *testing.T) {
	for _, step := range happyCalls {
		for _, fails := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/call fails=%v", step, fails), func(t *testing.T) {
				signalAtStep(t, step, fails)
			})
		}
	}
}

// signalAtStep signals during step, which then succeeds or fails with the
// cancellation although podman did its work: either way what it made must
// go.
func signalAtStep(t *testing.T, step string, fails bool) {
	{
		{
			eng := newFakeEngine()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			eng.cancelOn, eng.cancel, eng.cancelFails = step, cancel, fails
			code, stderr := runSession(ctx, eng, testConfig(t))
			if code != exitSignal {
				t.Fatalf("exit code = %d, want %d; stderr: %s", code, exitSignal, stderr())
			}
			if step != agentRun && step != agentCreate && slices.Contains(eng.calls, agentRun) {
				t.Fatalf("agent ran although the signal came at %q", step)
			}
			checkTeardown(t, eng.calls, "")
		}
	}
}

// TestSessionTeardownReportsWhatItCouldNotRemove: a removal that fails is
// named with the command that finishes the job, the other removals still
// run, and the agent's exit code stays.
func TestSessionTeardownReportsWhatItCouldNotRemove(t *testing.T) {
	eng := newFakeEngine()
	eng.runCode = 3
	eng.failOn = "PodRemove " + testSession
	code, stderr := runSession(context.Background(), eng, testConfig(t))
	if code != 3 {
		t.Fatalf("exit code = %d, want the agent's 3", code)
	}
	out := stderr()
	for _, want := range []string{"could not remove pod " + testSession + ": PodRemove " + testSession + ": fake podman failure", "run `agent-sandbox gc`"} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr lacks %q:\n%s", want, out)
		}
	}
	checkTeardown(t, eng.calls, "")
}

func TestSessionRouterNeverReadyReportsLogs(t *testing.T) {
	eng := newFakeEngine()
	eng.notReady = testSession + "-router"
	code, stderr := runSession(context.Background(), eng, testConfig(t))
	if code != exitRefused {
		t.Fatalf("exit code = %d, want %d", code, exitRefused)
	}
	if slices.Contains(eng.calls, agentRun) {
		t.Fatal("agent ran although the router never got ready")
	}
	if !slices.Contains(eng.calls, "ContainerLogs "+testSession+"-router") {
		t.Fatal("router logs were not fetched")
	}
	if out := stderr(); !strings.Contains(out, "fake log line") || !strings.Contains(out, "-router exited before it was ready") {
		t.Fatalf("stderr does not show the router's logs: %q", out)
	}
	checkTeardown(t, eng.calls, "")
}

func TestSessionSignalStopsAgentBeforeRemoval(t *testing.T) {
	eng := newFakeEngine()
	ctx, cancel := context.WithCancel(context.Background())
	eng.runHook = func(ctx context.Context) error {
		cancel()
		return ctx.Err()
	}
	if code, _ := runSession(ctx, eng, testConfig(t)); code != exitSignal {
		t.Fatalf("exit code = %d, want %d", code, exitSignal)
	}
	checkInOrder(t, eng.calls, []string{"ContainerRun " + testSession + "-claude", "ContainerStop " + testSession + "-claude", "PodRemove " + testSession})
	checkTeardown(t, eng.calls, "")
}

func TestSessionSpecs(t *testing.T) {
	eng := newFakeEngine()
	cfg := testConfig(t)
	cfg.tty = true
	cfg.env = map[string]string{"ANTHROPIC_API_KEY": "sk-test"}
	runSession(context.Background(), eng, cfg)

	sess := eng.networks[testSession]
	if !sess.Internal || sess.DNSEnabled {
		t.Errorf("session network internal=%v dns=%v, want internal with podman's DNS off", sess.Internal, sess.DNSEnabled)
	}
	if mtu := sess.Options["mtu"]; mtu != sessionMTU {
		t.Errorf("session network mtu %q, want %s", mtu, sessionMTU)
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
	tlsDir := filepath.Join(cfg.tmp, "tls")
	caDir := filepath.Join(cfg.tmp, "ca")
	if len(r.Mounts) != 3 || r.Mounts[0].Destination != "/etc/router" || !slices.Contains(r.Mounts[0].Options, "ro") ||
		r.Mounts[1].Source != tlsDir || r.Mounts[1].Destination != routerconf.TLSSocketDir || slices.Contains(r.Mounts[1].Options, "ro") ||
		r.Mounts[2].Source != caDir || r.Mounts[2].Destination != routerCADir || slices.Contains(r.Mounts[2].Options, "ro") {
		t.Errorf("router mounts = %+v, want %s read-only at /etc/router, %s read-write at %s and %s read-write at %s", r.Mounts, cfg.tmp, tlsDir, routerconf.TLSSocketDir, caDir, routerCADir)
	}
	if r.Env["INSPECT_SOCKET"] != routerconf.InspectSocket || r.Env["CA_DIR"] != routerCADir {
		t.Errorf("router env = %v, want the inspecting proxy's socket and CA dir", r.Env)
	}
	if fi, err := os.Stat(tlsDir); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("the TLS socket dir %s: %v %v, want mode 0755 (the forwarder is another uid)", tlsDir, fi, err)
	}
	if r.Env["UPSTREAM_DNS"] != "10.99.0.10" || r.Env["UPSTREAM_ALLOW"] != "10.99.0.0/24" || r.Env["READY_ADDR"] != "10.89.7.2" || r.Env["TLS_SOCKET"] != routerconf.TLSSocket {
		t.Errorf("router env = %v", r.Env)
	}
	if r.Image != "localhost/agent-sandbox-router:dev" {
		t.Errorf("router image = %s", r.Image)
	}

	if p := eng.pods[testSession]; !p.NoInfra || len(p.Networks) != 0 || p.Labels[labelSession] != testSession {
		t.Errorf("pod noInfra=%v networks=%v labels=%v, want a labelled pod without an infra container or a network", p.NoInfra, p.Networks, p.Labels)
	}

	f := eng.containers[testSession+"-forwarder"]
	if f.UserNS.String() != "keep-id:uid=1000,gid=1000" {
		t.Errorf("forwarder userns = %q", f.UserNS.String())
	}
	if len(f.DNSServers) != 1 || f.DNSServers[0].String() != "10.89.7.2" || f.UseImageHosts == nil || !*f.UseImageHosts {
		t.Errorf("forwarder dns=%v useImageHosts=%v", f.DNSServers, f.UseImageHosts)
	}
	if _, ok := f.Networks[testSession]; !ok || len(f.Networks) != 1 || f.NetNS.NSMode != specgen.Bridge {
		t.Errorf("forwarder netns %v networks = %v, want only the session network", f.NetNS, f.Networks)
	}
	if f.Sysctl["net.ipv6.conf.all.disable_ipv6"] != "1" || f.Sysctl["net.ipv6.conf.default.disable_ipv6"] != "1" {
		t.Errorf("forwarder sysctls %v, want IPv6 off", f.Sysctl)
	}
	if f.Pod != testSession || !*f.ReadOnlyFilesystem || !slices.Equal(f.CapDrop, []string{"all"}) || !slices.Equal(f.CapAdd, []string{"NET_BIND_SERVICE"}) {
		t.Errorf("forwarder pod=%s ro=%v drop=%v add=%v", f.Pod, *f.ReadOnlyFilesystem, f.CapDrop, f.CapAdd)
	}
	if f.Env["FORWARDS_FILE"] != "/etc/router/forwards" || f.Env["FORWARDS"] != "" {
		t.Errorf("forwarder env = %v, want FORWARDS_FILE=/etc/router/forwards", f.Env)
	}
	if len(f.Mounts) != 2 || f.Mounts[0].Source != cfg.tmp || f.Mounts[0].Destination != "/etc/router" || !slices.Contains(f.Mounts[0].Options, "ro") ||
		f.Mounts[1].Source != tlsDir || f.Mounts[1].Destination != routerconf.TLSSocketDir || !slices.Contains(f.Mounts[1].Options, "ro") {
		t.Errorf("forwarder mounts = %+v, want %s read-only at /etc/router and %s read-only at %s", f.Mounts, cfg.tmp, tlsDir, routerconf.TLSSocketDir)
	}
	// The agent's container has no path to the router's TLS socket: of
	// the session's dir it mounts the CA bundle alone, read-only.
	for _, m := range eng.containers[testSession+"-claude"].Mounts {
		bundle := m.Source == filepath.Join(caDir, caBundleFile) && m.Destination == agentCABundle && slices.Equal(m.Options, []string{"ro"})
		if strings.HasPrefix(m.Source, cfg.tmp) && !bundle {
			t.Errorf("the agent mounts the session's router dir: %+v", m)
		}
	}
	for _, v := range []string{"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "PIP_CERT", "CARGO_HTTP_CAINFO"} {
		if got := eng.containers[testSession+"-claude"].Env[v]; got != agentCABundle {
			t.Errorf("agent %s = %q, want the session's bundle %s", v, got, agentCABundle)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(cfg.tmp, "forwards")); string(b) != "127.0.0.1:443=unix:"+routerconf.TLSSocket+"/tls 127.0.0.2:443=unix:"+routerconf.TLSSocket+"/tls 127.0.0.2:2222=10.89.7.2:10001\n" {
		t.Errorf("forwards = %q", b)
	}

	c := eng.containers[testSession+"-claude"]
	if c.Pod != testSession || !*c.Terminal || !*c.Stdin || !*c.Init {
		t.Errorf("agent pod=%s tty=%v stdin=%v init=%v", c.Pod, *c.Terminal, *c.Stdin, *c.Init)
	}
	// The forwarder's network and user namespaces, the image's hosts
	// file.
	if c.NetNS.NSMode != specgen.FromContainer || c.NetNS.Value != testSession+"-forwarder" || len(c.Networks) != 0 {
		t.Errorf("agent netns %+v networks %v, want the forwarder's namespace", c.NetNS, c.Networks)
	}
	if c.UserNS.NSMode != specgen.FromContainer || c.UserNS.Value != testSession+"-forwarder" || c.Hostname != "agent-sandbox" || c.UseImageHosts == nil || !*c.UseImageHosts {
		t.Errorf("agent userns %q hostname %q useImageHosts %v", c.UserNS.String(), c.Hostname, c.UseImageHosts)
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
	if len(c.Mounts) != 2 || c.Mounts[0].Source != "/work/project" || c.Mounts[0].Destination != "/work/project" || c.WorkDir != "/work/project" {
		t.Errorf("agent mounts = %+v workdir = %s", c.Mounts, c.WorkDir)
	}
	if !slices.Equal(c.Command, cfg.cmd) || c.Env["DISABLE_AUTOUPDATER"] != "1" || c.Env["ANTHROPIC_API_KEY"] != "sk-test" ||
		c.Env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] != "1" || len(c.Env) != 4+len(caBundleEnv) {
		t.Errorf("agent command = %v env = %v", c.Command, c.Env)
	}
	for name, s := range eng.containers {
		if s.Labels[labelSession] != testSession {
			t.Errorf("container %s lacks the session label", name)
		}
	}
	if sess.Labels[labelSession] != testSession || eng.pods[testSession].Labels[labelSession] != testSession {
		t.Error("network or pod lacks the session label")
	}
}

func TestImageNamesAndOverrides(t *testing.T) {
	env := map[string]string{}
	images := func() (string, string) {
		set := settingsFrom(env)
		return set.image, set.routerImage
	}
	if img, r := images(); img != "localhost/agent-sandbox:dev" || r != "localhost/agent-sandbox-router:dev" {
		t.Errorf("dev images = %s %s", img, r)
	}
	version, registry = "1.2.3", "registry.example.com/team"
	defer func() { version, registry = "dev", "" }()
	if img, r := images(); img != "registry.example.com/team/agent-sandbox:1.2.3" || r != "registry.example.com/team/agent-sandbox-router:1.2.3" {
		t.Errorf("release images = %s %s", img, r)
	}
	env["AGENT_SANDBOX_IMAGE"], env["AGENT_SANDBOX_ROUTER_IMAGE"] = "localhost/mine:1", "localhost/router:1"
	if img, r := images(); img != "localhost/mine:1" || r != "localhost/router:1" {
		t.Errorf("overridden images = %s %s", img, r)
	}
}

// A missing default image is built instead: see images_test.go.
func TestSessionMissingImageCreatesNothing(t *testing.T) {
	eng := newFakeEngine()
	cfg := testConfig(t)
	set := settingsFrom(map[string]string{"AGENT_SANDBOX_ROUTER_IMAGE": "localhost/my-router:1"})
	eng.missingImages = map[string]bool{"localhost/my-router:1": true}
	code, stderr := runSessionWith(context.Background(), eng, set, cfg)
	if code != exitRefused {
		t.Fatalf("exit code = %d, want %d", code, exitRefused)
	}
	for _, c := range eng.calls {
		if strings.Contains(c, "Create") {
			t.Fatalf("%s although an image is missing", c)
		}
	}
	if out := stderr(); !strings.Contains(out, "image localhost/my-router:1 is missing") || !strings.Contains(out, "AGENT_SANDBOX_ROUTER_IMAGE") {
		t.Fatalf("stderr does not name the image and the fix: %q", out)
	}
}

func TestSessionEndsWhenAHelperDies(t *testing.T) {
	for _, helper := range []string{"router", "forwarder"} {
		t.Run(helper, func(t *testing.T) {
			eng := newFakeEngine()
			name := testSession + "-" + helper
			eng.stopped[name] = make(chan struct{})
			eng.runHook = func(ctx context.Context) error {
				close(eng.stopped[name])
				<-ctx.Done() // the agent runs until it is stopped
				return ctx.Err()
			}
			code, stderr := runSession(context.Background(), eng, testConfig(t))
			if code != exitPodman {
				t.Fatalf("exit code = %d, want %d", code, exitPodman)
			}
			out := stderr()
			if !strings.Contains(out, "the "+helper+" ("+name+") stopped") || !strings.Contains(out, "fake log line") {
				t.Fatalf("stderr does not say which helper stopped and why: %q", out)
			}
			checkInOrder(t, eng.calls, []string{"ContainerRun " + testSession + "-claude", "ContainerStop " + testSession + "-claude", "PodRemove " + testSession})
			checkTeardown(t, eng.calls, "")
		})
	}
}

func TestSessionReportsWhatWasBlocked(t *testing.T) {
	eng := newFakeEngine()
	eng.logs = map[string]string{testSession + "-router": sampleRouterLog}
	_, stderr := runSession(context.Background(), eng, testConfig(t))
	out := stderr()
	if !strings.Contains(out, "the allowlist blocked these hosts") || !strings.Contains(out, "agent-sandbox allow denied.test") {
		t.Fatalf("no blocked summary on stderr: %q", out)
	}
	checkInOrder(t, eng.calls, []string{"ContainerLogs " + testSession + "-router", "ContainerRemove " + testSession + "-router"})

	eng = newFakeEngine()
	eng.logs = map[string]string{testSession + "-router": "dnsmasq[13]: config allowed.test is 127.0.0.1\n"}
	_, stderr = runSession(context.Background(), eng, testConfig(t))
	if out := stderr(); strings.Contains(out, "blocked") {
		t.Fatalf("summary printed although nothing was blocked: %q", out)
	}
}

// TestSessionFollowsAllowlistEdits: while the agent runs, an edit of the
// allowlist rewrites the router's and the forwarder's config in place.
func TestSessionFollowsAllowlistEdits(t *testing.T) {
	cfg := testConfig(t)
	cfg.allowlist = filepath.Join(t.TempDir(), "allowed-hosts")
	if err := os.WriteFile(cfg.allowlist, []byte("allowed.test\nallowed.test:2222\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	eng := newFakeEngine()
	eng.runHook = func(context.Context) error {
		tmp := cfg.allowlist + ".tmp"
		if err := os.WriteFile(tmp, []byte("allowed.test\nallowed.test:2222\nadded.test:22\n"), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, cfg.allowlist); err != nil {
			return err
		}
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			fw, _ := os.ReadFile(filepath.Join(cfg.tmp, "forwards"))
			dm, _ := os.ReadFile(filepath.Join(cfg.tmp, "dnsmasq.conf"))
			// allowed.test keeps its address; added.test gets the next.
			if strings.Contains(string(fw), "127.0.0.2:2222=10.89.7.2:10001 ") && strings.Contains(string(fw), "127.0.0.3:22=10.89.7.2:10002") &&
				strings.Contains(string(dm), "host-record=added.test,127.0.0.3\n") {
				return nil
			}
		}
		return errors.New("the allowlist edit did not reach the router config within a second")
	}
	if code, _ := runSession(context.Background(), eng, cfg); code != 0 {
		t.Fatalf("exit code = %d, want 0", code)
	}
}

func TestSessionHomeVolumeNotOursRefusesBeforeCreatingAnything(t *testing.T) {
	eng := newFakeEngine()
	eng.foreignVolumes = map[string][]string{"agent-sandbox-home": {"someones-db"}}
	code, stderr := runSession(context.Background(), eng, testConfig(t))
	if code != exitRefused {
		t.Fatalf("exit code = %d, want %d", code, exitRefused)
	}
	for _, c := range eng.calls {
		if strings.HasPrefix(c, "NetworkCreate") || strings.HasPrefix(c, "ContainerCreate") || strings.HasPrefix(c, "PodCreate") {
			t.Errorf("created %q after the volume was refused", c)
		}
	}
	msg := stderr()
	for _, want := range []string{"agent-sandbox-home is in use by someones-db", "AGENT_SANDBOX_HOME_VOLUME"} {
		if !strings.Contains(msg, want) {
			t.Errorf("stderr lacks %q:\n%s", want, msg)
		}
	}
}

// A session whose launch dir overlaps a running one's (the same dir, one
// inside it, one containing it) is refused at its claim, before it scans
// the dir or asks podman for anything.
func TestOverlappingSessionsAreRefusedBeforeTheScan(t *testing.T) {
	runtimeDir := t.TempDir()
	base := t.TempDir()
	running := filepath.Join(base, "mono/pkg")
	must(t, os.MkdirAll(running, 0o755))
	// This very process stands in for the running session's launcher.
	release, err := claimLaunchDir(runtimeDir, sessionreg.Claim{Session: "agent-sandbox-9-9", Dir: running})
	must(t, err)
	for _, c := range []struct{ dir, want string }{
		{running, "session agent-sandbox-9-9 runs there already"},
		{filepath.Join(running, "sub"), "it lies inside " + running + ", where session agent-sandbox-9-9 runs"},
		{filepath.Join(base, "mono"), "it contains " + running + ", where session agent-sandbox-9-9 runs"},
	} {
		cfg := testConfig(t)
		cfg.launchDir = c.dir
		s := cfg.session(settingsFrom(nil), io.Discard)
		err := s.openLaunchDir(runtimeDir)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.dir, err, c.want)
		}
		if s.made.project.root != nil {
			t.Errorf("%s was scanned although it was refused", c.dir)
		}
		s.undo.unwind(context.Background())
	}
	must(t, release())
	cfg := testConfig(t)
	cfg.launchDir = running
	s := cfg.session(settingsFrom(nil), io.Discard)
	if err := s.openLaunchDir(runtimeDir); err != nil {
		t.Errorf("after the running session ended: %v", err)
	}
	s.undo.unwind(context.Background())
	s.made.project.close()
}

// TestSessionCollectsDeadSessionsBesideItsStart: a session removes what
// killed sessions left, never a live session's, beside its own start; a
// list that fails stops the session before it creates anything.
func TestSessionCollectsDeadSessionsBesideItsStart(t *testing.T) {
	cmd := exec.Command("true")
	must(t, cmd.Run())
	deadOwner := strconv.Itoa(cmd.Process.Pid) + "@1"
	objs := []podman.Object{
		{Kind: "container", Name: "dead-router", Labels: map[string]string{labelSession: "dead", labelOwner: deadOwner}},
		{Kind: "pod", Name: "dead", Labels: map[string]string{labelSession: "dead", labelOwner: deadOwner}},
		{Kind: "pod", Name: "live", Labels: map[string]string{labelSession: "live", labelOwner: ownerID(os.Getpid())}},
	}
	eng := newFakeEngine()
	eng.labelled = objs
	eng.runCode = 4
	code, stderr := runSessionWith(context.Background(), eng, settingsFrom(nil), testConfig(t))
	if code != 4 {
		t.Fatalf("exit code = %d, want the agent's 4; stderr: %s", code, stderr())
	}
	if eng.calls[0] != "ListLabelled "+labelSession {
		t.Errorf("the dead sessions were not looked for first:\n%s", strings.Join(eng.calls, "\n"))
	}
	for _, want := range []string{"PodRemove dead", "ContainerRemove dead-router"} {
		if !slices.Contains(eng.calls, want) {
			t.Errorf("no %s:\n%s", want, strings.Join(eng.calls, "\n"))
		}
	}
	if slices.Contains(eng.calls, "PodRemove live") {
		t.Errorf("a live session's pod was removed")
	}
	eng = newFakeEngine()
	eng.labelled = objs
	eng.failOn = "ListLabelled " + labelSession
	if code, _ := runSessionWith(context.Background(), eng, settingsFrom(nil), testConfig(t)); code != exitPodman || len(eng.calls) != 1 {
		t.Errorf("a failed list: exit %d after %v, want %d and nothing else asked", code, eng.calls, exitPodman)
	}
}
