package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/agent-sandbox/agent-sandbox/internal/gate"
	"time"

	spec "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// gateContexts stands in for the launcher's embedded contexts: the
// forwarder's binary is all the gate takes from them.
var gateContexts = fstest.MapFS{"router-image/forwarder.bin": {Data: []byte("\x7fELF forwarder"), Mode: 0o755}}

func fakeInit() (string, error) { return testInitPath, nil }

// gatedConfig is testConfig with the gate makeDirs makes.
func gatedConfig(t *testing.T) sessionFixture {
	t.Helper()
	cfg := testConfig(t)
	g, err := makeGate(cfg.tmp, t.TempDir(), gateContexts, fakeInit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.close)
	cfg.gate = g
	return cfg
}

// readGate reads what the launcher wrote to the gate so far, without
// waiting, as the gate would.
func readGate(t *testing.T, g *agentGate) string {
	t.Helper()
	fd, err := unix.Open(filepath.Join(g.dir, gate.FIFOName), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	b := make([]byte, 16)
	n, err := unix.Read(fd, b)
	if errors.Is(err, unix.EAGAIN) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b[:n])
}

// The agent's container is started beside the helpers, with the gate as
// its init, and its command is let run only once the router and the
// forwarder are ready and the streams are attached.
func TestTheGateHoldsTheAgentUntilTheHelpersAreReady(t *testing.T) {
	cfg := gatedConfig(t)
	eng := newFakeEngine()
	eng.runCode = 7
	var before, after string
	eng.beforeBegin = func() { before = readGate(t, cfg.gate) }
	eng.runHook = func(context.Context) error { after = readGate(t, cfg.gate); return nil }
	code, stderr := runSession(context.Background(), eng, cfg)
	if code != 7 {
		t.Fatalf("exit %d, want 7; stderr:\n%s", code, stderr())
	}
	if before != "" {
		t.Errorf("the gate held %q before the launcher attached to the agent", before)
	}
	if after != gate.Word {
		t.Errorf("the gate held %q once the agent ran, want %q", after, gate.Word)
	}
	calls := eng.recorded()
	agent := testSession + "-claude"
	start := slices.Index(calls, "ContainerStart "+agent)
	run := slices.Index(calls, "ContainerRun "+agent)
	if start < 0 || run < start {
		t.Fatalf("the agent is not started before its run: %q", calls)
	}
	for _, ready := range []string{routerCalls[1], podCalls[len(podCalls)-1]} {
		if i := slices.Index(calls, ready); i < 0 || i > run {
			t.Errorf("%q is not done before the agent's run: %q", ready, calls)
		}
	}
	c := eng.containers[agent]
	if c.InitPath != cfg.gate.binary || c.Init == nil || !*c.Init {
		t.Errorf("the agent's init is %q (init %v), want the gate %q", c.InitPath, c.Init, cfg.gate.binary)
	}
	for _, want := range []struct{ src, dst string }{{testInitPath, gate.InitInAgent}, {cfg.gate.dir, gate.DirInAgent}} {
		i := slices.IndexFunc(c.Mounts, func(m spec.Mount) bool { return m.Destination == want.dst })
		if i < 0 {
			t.Errorf("no mount at %s", want.dst)
			continue
		}
		if m := c.Mounts[i]; m.Source != want.src || !slices.Contains(m.Options, "ro") {
			t.Errorf("mount at %s: %+v, want %s read-only", want.dst, m, want.src)
		}
	}
}

// A session that fails before the agent runs never opens the gate: its
// end is closed, and the gate sees the end of the FIFO instead of the word.
func TestAFailedStartLeavesTheGateShut(t *testing.T) {
	cfg := gatedConfig(t)
	eng := newFakeEngine()
	eng.notReady = testSession + "-forwarder"
	if code, _ := runSession(context.Background(), eng, cfg); code == 0 {
		t.Fatal("the session ran with its forwarder not ready")
	}
	if slices.Contains(eng.recorded(), "ContainerRun "+testSession+"-claude") {
		t.Fatal("the agent was run")
	}
	if got := readGate(t, cfg.gate); got != "" {
		t.Errorf("the gate holds %q", got)
	}
	// The launcher's end is closed: a reader gets EOF, not a wait.
	fd, err := unix.Open(filepath.Join(cfg.gate.dir, gate.FIFOName), unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if n, err := unix.Read(fd, make([]byte, 4)); n != 0 || err != nil {
		t.Errorf("read %d, %v; want EOF", n, err)
	}
}

// The forwarder's binary is copied once for each launcher binary: a
// session started after the first reads none of it; copies no session
// took for a day go when a new one is made.
func TestTheGateBinaryIsCopiedOncePerLauncher(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, gateDirName, "old-launcher")
	if err := os.MkdirAll(filepath.Dir(old), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(old, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	longAgo := time.Now().Add(-gateUnusedFor - time.Hour)
	if err := os.Chtimes(old, longAgo, longAgo); err != nil {
		t.Fatal(err)
	}
	path, err := installGateBinary(dir, gateContexts)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(path) != filepath.Join(dir, gateDirName) {
		t.Errorf("copy at %s, want it in %s", path, gateDirName)
	}
	b, err := os.ReadFile(path)
	fi, _ := os.Stat(path)
	if err != nil || string(b) != "\x7fELF forwarder" || fi.Mode().Perm() != 0o755 {
		t.Fatalf("copy %q (%v), mode %v", b, err, fi.Mode().Perm())
	}
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a copy unused for a day is still there: %v", err)
	}
	if err := os.WriteFile(path, []byte("kept"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, longAgo, longAgo); err != nil {
		t.Fatal(err)
	}
	again, err := installGateBinary(dir, gateContexts)
	if b, _ := os.ReadFile(again); err != nil || again != path || string(b) != "kept" {
		t.Errorf("second copy %s (%v) holds %q: want the first, untouched", again, err, b)
	}
	if fi, _ := os.Stat(path); time.Since(fi.ModTime()) > time.Hour {
		t.Error("a copy taken again keeps its old time: it would be pruned while in use")
	}
	left, _ := filepath.Glob(filepath.Join(dir, gateDirName, ".tmp.*"))
	if len(left) > 0 {
		t.Errorf("temp copies left: %v", left)
	}
}

// A launcher built without the forwarder's binary starts the agent after
// the helpers, as before the gate; one that cannot find the host's init
// says what to install.
func TestGateWithoutItsParts(t *testing.T) {
	if _, err := makeGate(t.TempDir(), t.TempDir(), fstest.MapFS{}, fakeInit); !errors.Is(err, errNoGate) {
		t.Errorf("no forwarder binary: %v, want errNoGate", err)
	}
	_, err := makeGate(t.TempDir(), t.TempDir(), gateContexts, func() (string, error) { return "", errors.New("not found") })
	if err == nil || !strings.Contains(err.Error(), "install catatonit") {
		t.Errorf("no init: %v", err)
	}
}

// The agent joins the forwarder's user namespace, whose root is the
// forwarder's user: an image that names no user runs as the sandbox's
// uid 1000, as it did in a pod's namespace; one that names a user keeps it.
func TestAnImageWithoutAUserRunsAsTheSandboxsUser(t *testing.T) {
	for _, c := range []struct{ imageUser, want string }{{"", sandboxUser}, {"claude", ""}, {"root", ""}} {
		eng := newFakeEngine()
		cfg := testConfig(t)
		eng.imageUsers = map[string]string{cfg.image: c.imageUser}
		runSession(context.Background(), eng, cfg)
		if got := eng.containers[testSession+"-claude"].User; got != c.want {
			t.Errorf("image user %q: the agent's user is %q, want %q", c.imageUser, got, c.want)
		}
		if !slices.Contains(eng.recorded(), "ImageUser "+cfg.image) {
			t.Errorf("the agent's image was not asked for its user: %q", eng.recorded())
		}
	}
}

// What becomes the agent's init must be the user's alone.
func TestTheGateCopyMustBeTheUsersAlone(t *testing.T) {
	dir := t.TempDir()
	gdir := filepath.Join(dir, gateDirName)
	if err := os.Mkdir(gdir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(gdir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := installGateBinary(dir, gateContexts); err == nil || !strings.Contains(err.Error(), "nobody else may write") {
		t.Errorf("a dir others may write: %v", err)
	}
	if err := os.Chmod(gdir, 0o700); err != nil {
		t.Fatal(err)
	}
	name, err := gateBinaryName()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/bin/sh", filepath.Join(gdir, name)); err != nil {
		t.Fatal(err)
	}
	if _, err := installGateBinary(dir, gateContexts); err == nil || !strings.Contains(err.Error(), "a regular file") {
		t.Errorf("a link in the copy's place: %v", err)
	}
}

// A signal at any step of a gated session's start ends it as an ungated
// one's: what was made goes, and the gate, never opened, ends the agent's
// container without its command.
func TestGatedSessionSignalAtEachStep(t *testing.T) {
	agentStart := "ContainerStart " + testSession + "-claude"
	for _, step := range append(slices.Clone(happyCalls), agentStart) {
		t.Run(step, func(t *testing.T) {
			cfg := gatedConfig(t)
			eng := newFakeEngine()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			eng.cancelOn, eng.cancel = step, cancel
			code, stderr := runSession(ctx, eng, cfg)
			if code != exitSignal {
				t.Fatalf("exit code = %d, want %d; stderr: %s", code, exitSignal, stderr())
			}
			if step != agentRun {
				if got := readGate(t, cfg.gate); got != "" {
					t.Errorf("the gate holds %q although the signal came at %q", got, step)
				}
			}
			checkTeardown(t, eng.calls, "")
		})
	}
}
