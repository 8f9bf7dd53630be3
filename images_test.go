package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

const (
	devSandbox = "localhost/agent-sandbox:dev"
	devRouter  = "localhost/agent-sandbox-router:dev"
)

// fakeContexts stands in for the embedded build contexts, so that the tests
// need no `make bins`; withBins adds the router's helpers.
func fakeContexts(t *testing.T, withBins bool) {
	t.Helper()
	m := fstest.MapFS{
		"router-image/Containerfile":         {Data: []byte("FROM ${BASE}\nCOPY forwarder.bin routerd.bin /\n")},
		"router-image/routerd/main.go":       {Data: []byte("package main\n")},
		"sandbox-image/Containerfile":        {Data: []byte("FROM ${BASE}\n")},
		"sandbox-image/containers.conf":      {Data: []byte("[engine]\n")},
		"sandbox-image/storage.conf":         {Data: []byte("[storage]\n")},
		"router-image/routerd/testdata/x.in": {Data: []byte("x")},
	}
	if withBins {
		m["router-image/forwarder.bin"] = &fstest.MapFile{Data: []byte("\x7fELF forwarder")}
		m["router-image/routerd.bin"] = &fstest.MapFile{Data: []byte("\x7fELF routerd")}
	}
	old := imageContexts
	imageContexts = m
	t.Cleanup(func() { imageContexts = old })
}

// releaseVersion makes this binary a release build for the test.
func releaseVersion(t *testing.T) {
	t.Helper()
	v, r := version, registry
	version, registry = "1.2.3", "registry.test/team"
	t.Cleanup(func() { version, registry = v, r })
}

// createCalls lists the calls that create something in podman.
func createCalls(calls []string) []string {
	var out []string
	for _, c := range calls {
		if strings.Contains(c, "Create") {
			out = append(out, c)
		}
	}
	return out
}

func TestFirstRunBuildsMissingDefaultImages(t *testing.T) {
	for _, missing := range [][]string{{devRouter}, {devSandbox}, {devSandbox, devRouter}} {
		t.Run(strings.Join(missing, "+"), func(t *testing.T) {
			fakeContexts(t, true)
			runtimeDir := t.TempDir()
			eng := newFakeEngine()
			eng.runCode = 7
			eng.missingImages = map[string]bool{}
			for _, m := range missing {
				eng.missingImages[m] = true
			}
			eng.buildOutput = "STEP 1/2: FROM docker.io/library/debian:trixie-slim\nSTEP 2/2: COPY forwarder.bin /\nCOMMIT\n"
			cfg := testConfig(t)
			code, stderr := runSessionWith(context.Background(), eng, settingsFrom(map[string]string{"XDG_RUNTIME_DIR": runtimeDir, "AGENT_SANDBOX_NO_START_GC": "1"}), cfg)
			if code != 7 {
				t.Fatalf("exit code = %d, want the agent's 7: the session goes on after the build\n%s", code, stderr())
			}
			out := stderr()
			var builds []string
			for _, m := range missing {
				builds = append(builds, "ImageBuild "+m)
			}
			// Built after both checks and before anything else.
			want := slices.Concat(setupCalls[:2], builds, setupCalls[2:])
			if got := eng.calls[:len(want)]; !slices.Equal(got, want) {
				t.Fatalf("calls = %v\nwant %v", got, want)
			}
			checkTeardown(t, eng.calls, "")
			for _, b := range eng.builds {
				if b.Args["BASE"] != defaultBaseImage {
					t.Errorf("%s: BASE = %q, want %s", b.Tag, b.Args["BASE"], defaultBaseImage)
				}
				if _, err := os.Stat(b.ContextDir); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s: build context %s left behind (%v)", b.Tag, b.ContextDir, err)
				}
				if !strings.HasPrefix(b.ContextDir, runtimeDir+"/"+testSession+".") {
					t.Errorf("%s: context %s is not a session dir under XDG_RUNTIME_DIR, which gc would clean", b.Tag, b.ContextDir)
				}
			}
			for _, m := range missing {
				if !strings.Contains(out, "image "+m+" is missing: building it") || !strings.Contains(out, "agent-sandbox: built "+m+" in ") {
					t.Errorf("stderr does not say %s is being built and was built:\n%s", m, out)
				}
			}
			if !strings.Contains(out, "image: step 2/2 COPY forwarder.bin /\n") {
				t.Errorf("stderr lacks the step lines:\n%s", out)
			}
		})
	}
}

func TestBuildSpecPassesBaseAndHostCA(t *testing.T) {
	set := settingsFrom(map[string]string{"AGENT_SANDBOX_BASE_IMAGE": "localhost/my-base:1"})
	var sandbox, router sessionImage
	for _, im := range sessionImages(set) {
		if im.role == "sandbox" {
			sandbox = im
		} else {
			router = im
		}
	}
	b := buildSpec(sandbox, set.baseImage, "/ctx", true)
	if b.Tag != sandbox.name || b.ContextDir != "/ctx" || !b.NoCache || b.Args["BASE"] != "localhost/my-base:1" {
		t.Errorf("sandbox build = %+v", b)
	}
	_, err := os.Stat(hostCABundle)
	if wantCA := err == nil; wantCA != slices.Equal(b.Secrets, []string{"id=hostca,src=" + hostCABundle}) {
		t.Errorf("sandbox secrets = %v with the host bundle present=%v", b.Secrets, wantCA)
	}
	if r := buildSpec(router, defaultBaseImage, "/ctx", false); len(r.Secrets) != 0 || r.NoCache {
		t.Errorf("router build = %+v: it needs no secret", r)
	}
}

func TestCustomMissingImageIsRefusedAndNothingBuilt(t *testing.T) {
	for _, env := range []string{"AGENT_SANDBOX_IMAGE", "AGENT_SANDBOX_ROUTER_IMAGE"} {
		t.Run(env, func(t *testing.T) {
			fakeContexts(t, true)
			eng := newFakeEngine()
			cfg := testConfig(t)
			set := settingsFrom(map[string]string{env: "localhost/custom:1"})
			// The default images are missing too: no build for them either.
			eng.missingImages = map[string]bool{"localhost/custom:1": true, devSandbox: true, devRouter: true}
			code, stderr := runSessionWith(context.Background(), eng, set, cfg)
			if code != exitRefused {
				t.Fatalf("exit code = %d, want %d", code, exitRefused)
			}
			out := stderr()
			for _, c := range eng.calls {
				if strings.HasPrefix(c, "Image") && !strings.HasPrefix(c, "ImageExists") {
					t.Errorf("%s although a custom image is missing", c)
				}
			}
			if c := createCalls(eng.calls); len(c) > 0 {
				t.Errorf("created %v although an image is missing", c)
			}
			if !strings.Contains(out, "image localhost/custom:1 is missing") || !strings.Contains(out, "unset "+env) {
				t.Errorf("stderr does not name the image and the fix: %q", out)
			}
			if n := strings.Count(out, "\n"); n != 1 {
				t.Errorf("stderr has %d lines, want one clear error: %q", n, out)
			}
		})
	}
}

// The default name, set explicitly, is still agent-sandbox's own image.
func TestDefaultNameSetExplicitlyIsBuilt(t *testing.T) {
	fakeContexts(t, true)
	set := settingsFrom(map[string]string{"XDG_RUNTIME_DIR": t.TempDir(), "AGENT_SANDBOX_ROUTER_IMAGE": devRouter})
	eng := newFakeEngine()
	cfg := testConfig(t)
	eng.missingImages = map[string]bool{devRouter: true}
	if code, _ := runSessionWith(context.Background(), eng, set, cfg); code != 0 {
		t.Fatalf("exit code = %d, want 0", code)
	}
	if !slices.Contains(eng.calls, "ImageBuild "+devRouter) {
		t.Errorf("no build of %s:\n%s", devRouter, strings.Join(eng.calls, "\n"))
	}
}

func TestReleaseBuildPullsMissingImages(t *testing.T) {
	fakeContexts(t, true)
	eng := newFakeEngine()
	cfg := testConfig(t)
	releaseVersion(t)
	sandbox, router := "registry.test/team/agent-sandbox:1.2.3", "registry.test/team/agent-sandbox-router:1.2.3"
	eng.missingImages = map[string]bool{sandbox: true, router: true}
	code, stderr := runSession(context.Background(), eng, cfg)
	if code != 0 {
		t.Fatalf("exit code = %d, want 0\n%s", code, stderr())
	}
	out := stderr()
	want := []string{"ImageExists " + sandbox, "ImageExists " + router, "ImagePull " + sandbox, "ImagePull " + router, setupCalls[2]}
	if got := eng.calls[:len(want)]; !slices.Equal(got, want) {
		t.Fatalf("calls = %v\nwant %v", got, want)
	}
	if len(eng.builds) > 0 {
		t.Errorf("a release build built %v instead of pulling", eng.builds)
	}
	for _, w := range []string{"pulling router image: copying blob 1 (sha256:0123456789ab)", "pulling router image: writing manifest", "pulled " + router + " in "} {
		if !strings.Contains(out, w) {
			t.Errorf("stderr lacks %q:\n%s", w, out)
		}
	}
}

func TestFirstRunWithoutHelpersNamesMakeBuild(t *testing.T) {
	fakeContexts(t, false)
	eng := newFakeEngine()
	cfg := testConfig(t)
	eng.missingImages = map[string]bool{devSandbox: true, devRouter: true}
	code, stderr := runSession(context.Background(), eng, cfg)
	if code != exitRefused {
		t.Fatalf("exit code = %d, want %d", code, exitRefused)
	}
	out := stderr()
	// Checked before any build: the sandbox image (minutes) is not built
	// only for the router's to fail.
	if len(eng.builds) > 0 || len(createCalls(eng.calls)) > 0 {
		t.Errorf("calls despite the missing helpers:\n%s", strings.Join(eng.calls, "\n"))
	}
	for _, w := range []string{"router image", "forwarder.bin and routerd.bin", "make build"} {
		if !strings.Contains(out, w) {
			t.Errorf("stderr lacks %q: %q", w, out)
		}
	}
	// Without the router missing, the sandbox builds fine.
	eng = newFakeEngine()
	eng.missingImages = map[string]bool{devSandbox: true}
	set := settingsFrom(map[string]string{"XDG_RUNTIME_DIR": t.TempDir()})
	if code, _ := runSessionWith(context.Background(), eng, set, cfg); code != 0 {
		t.Fatalf("sandbox-only build: exit code = %d, want 0", code)
	}
}

func TestFailedBuildShowsItsOutputAndCreatesNothing(t *testing.T) {
	fakeContexts(t, true)
	set := settingsFrom(map[string]string{"XDG_RUNTIME_DIR": t.TempDir()})
	eng := newFakeEngine()
	cfg := testConfig(t)
	eng.missingImages = map[string]bool{devRouter: true}
	eng.buildOutput = "STEP 1/3: FROM base\nSTEP 2/3: RUN apt-get update\nE: Unable to locate package nginx\n"
	eng.failOn = "ImageBuild " + devRouter
	code, stderr := runSessionWith(context.Background(), eng, set, cfg)
	if code != exitPodman {
		t.Fatalf("exit code = %d, want %d", code, exitPodman)
	}
	out := stderr()
	if c := createCalls(eng.calls); len(c) > 0 {
		t.Errorf("created %v although the build failed", c)
	}
	for _, w := range []string{
		"building router image failed at step 2/3 RUN apt-get update",
		"    E: Unable to locate package nginx\n",
		"cannot build image " + devRouter,
		"agent-sandbox build --only router",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("stderr lacks %q:\n%s", w, out)
		}
	}
}

func TestWriteContextWritesTopLevelFilesWithFixedModes(t *testing.T) {
	fakeContexts(t, true)
	var router sessionImage
	for _, im := range sessionImages(settingsFrom(nil)) {
		if im.role == "router" {
			router = im
		}
	}
	parent := t.TempDir()
	dir, err := writeContext(parent, "agent-sandbox-1-2", router)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(dir) != parent || !sessionDir.MatchString(filepath.Base(dir)) {
		t.Errorf("context dir %s: want a session-named dir in %s, for gc", dir, parent)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]os.FileMode{}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		got[e.Name()] = fi.Mode()
	}
	want := map[string]os.FileMode{"Containerfile": 0o644, "forwarder.bin": 0o755, "routerd.bin": 0o755}
	if len(got) != len(want) {
		t.Errorf("context holds %v, want %v (the helper's source stays out)", got, want)
	}
	for n, m := range want {
		if got[n] != m {
			t.Errorf("%s mode = %v, want %v", n, got[n], m)
		}
	}
}

// The real embedded contexts hold what the Containerfiles COPY.
func TestEmbeddedContextsHoldTheirFiles(t *testing.T) {
	for _, f := range []string{"router-image/Containerfile", "sandbox-image/Containerfile", "sandbox-image/containers.conf", "sandbox-image/storage.conf"} {
		if _, err := embeddedContexts.Open(f); err != nil {
			t.Errorf("%s is not embedded: %v", f, err)
		}
	}
}

func TestBuildCommandRefusesUnknownImage(t *testing.T) {
	code, stderr := runBuildCommand(settingsFrom(nil), "claude")
	if code != exitRefused {
		t.Fatalf("exit code = %d, want %d", code, exitRefused)
	}
	if out := stderr(); !strings.Contains(out, "--only claude") || !strings.Contains(out, "--only router") {
		t.Errorf("stderr = %q", out)
	}
}

func TestBuildCommandNeedsHelpersForTheRouter(t *testing.T) {
	fakeContexts(t, false)
	code, stderr := runBuildCommand(settingsFrom(nil), "router")
	if code != exitRefused {
		t.Fatalf("exit code = %d, want %d", code, exitRefused)
	}
	if out := stderr(); !strings.Contains(out, "make build") {
		t.Errorf("stderr = %q", out)
	}
}

func TestProgress(t *testing.T) {
	build := "STEP 1/3: FROM docker.io/library/debian:trixie-slim\n" +
		"STEP 2/3: RUN apt-get update  && apt-get install -y --no-install-recommends    dnsmasq-base nginx\n" +
		"Get:1 http://deb.debian.test trixie InRelease\n" +
		"--> Using cache 0123456789abcdef\n" +
		"STEP 3/3: COPY forwarder.bin /usr/local/bin/forwarder\n" +
		"COMMIT localhost/agent-sandbox-router:dev\n"
	long := "STEP 4/9: RUN " + strings.Repeat("x", 200) + "\n"
	cases := []struct {
		name   string
		tty    bool
		parse  func(string) (string, bool)
		chunks []string
		err    error
		want   []string // in this order
		absent []string
	}{
		{
			name: "plain build: one line per step", parse: parseBuildLine, chunks: []string{build},
			want: []string{
				"agent-sandbox: building router image\n",
				"agent-sandbox: building router image: step 1/3 FROM docker.io/library/debian:trixie-slim\n",
				"agent-sandbox: building router image: step 2/3 RUN apt-get update && apt-get install -y --no-install-recommends dnsmasq-base nginx\n",
				"agent-sandbox: building router image: step 3/3 COPY forwarder.bin /usr/local/bin/forwarder\n",
				"agent-sandbox: built it in 0s\n",
			},
			absent: []string{"\r", "\033", "Get:1", "COMMIT"},
		},
		{
			name: "plain build: lines split anywhere", parse: parseBuildLine,
			chunks: []string{"STEP 1/", "3: FROM base\nST", "EP 2/3: RUN true\n"},
			want:   []string{"image: step 1/3 FROM base\n", "image: step 2/3 RUN true\n"},
		},
		{
			name: "plain build: long steps are cut", parse: parseBuildLine, chunks: []string{long},
			want:   []string{"image: step 4/9 RUN xxx", "xxx...\n"},
			absent: []string{strings.Repeat("x", 100)},
		},
		{
			name: "terminal build: one line rewritten", tty: true, parse: parseBuildLine, chunks: []string{build},
			want: []string{
				"\r\033[Kagent-sandbox: building router image",
				"\r\033[Kagent-sandbox: building router image: step 1/3 FROM",
				"\r\033[Kagent-sandbox: building router image: step 2/3 RUN apt-get",
				"\r\033[Kagent-sandbox: building router image: step 3/3 COPY",
				"\r\033[Kagent-sandbox: built it in 0s\n",
			},
			absent: []string{"forwarder\n", "Get:1"},
		},
		{
			name: "terminal build: cut to the width", tty: true, parse: parseBuildLine, chunks: []string{long},
			want:   []string{"step 4/9 RUN xxx", "xxx...\r"},
			absent: []string{strings.Repeat("x", 80)},
		},
		{
			name: "failed build: the last lines", parse: parseBuildLine, err: errFake,
			chunks: []string{"STEP 1/2: FROM base\nSTEP 2/2: RUN false\nsome output\nError: exit status 1"},
			want: []string{
				"agent-sandbox: building router image failed at step 2/2 RUN false after 0s; its last output:\n",
				"    STEP 1/2: FROM base\n    STEP 2/2: RUN false\n    some output\n    Error: exit status 1\n",
			},
			absent: []string{"built it"},
		},
		{
			name: "interrupted build: no failure report", tty: true, parse: parseBuildLine, err: context.Canceled,
			chunks: []string{"STEP 1/2: FROM base\n"},
			absent: []string{"failed", "built it"},
		},
		{
			name: "plain pull: blobs counted", parse: newPullParser(),
			chunks: []string{"Trying to pull registry.test/x:1...\nGetting image source signatures\n" +
				"Copying blob sha256:aaaaaaaaaaaaaaaaaaaa\nCopying blob sha256:bbbbbbbbbbbbbbbbbbbbbb\n" +
				"Copying config sha256:cccccccccccccccc\nWriting manifest to image destination\n"},
			want: []string{
				"image: copying blob 1 (sha256:aaaaaaaaaaaa)\n",
				"image: copying blob 2 (sha256:bbbbbbbbbbbb)\n",
				"image: copying config\n",
				"image: writing manifest\n",
			},
			absent: []string{"Trying", "signatures"},
		},
		{
			name: "terminal pull", tty: true, parse: newPullParser(),
			chunks: []string{"Copying blob sha256:aaaaaaaaaaaaaaaaaaaa\n"},
			want:   []string{"\r\033[Kagent-sandbox: building router image: copying blob 1 (sha256:aaaaaaaaaaaa)"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			p := newProgress(&buf, c.tty, "building router image", c.parse)
			fixed := p.start
			p.now = func() time.Time { return fixed }
			for _, ch := range c.chunks {
				if _, err := p.Write([]byte(ch)); err != nil {
					t.Fatal(err)
				}
			}
			p.finish(c.err, "built it")
			out := buf.String()
			rest := out
			for _, w := range c.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("output lacks %q (in order):\n%q", w, out)
				}
				rest = rest[i+len(w):]
			}
			for _, a := range c.absent {
				if strings.Contains(out, a) {
					t.Errorf("output has %q:\n%q", a, out)
				}
			}
			if c.tty {
				for _, l := range strings.Split(out, "\r") {
					if n := len([]rune(strings.TrimSuffix(strings.TrimPrefix(l, "\033[K"), "\n"))); n > 79 {
						t.Errorf("terminal line of %d runes exceeds the width: %q", n, l)
					}
				}
			}
		})
	}
}

func TestParseBuildLine(t *testing.T) {
	for in, want := range map[string]string{
		"STEP 1/5: FROM base":           "step 1/5 FROM base",
		"STEP 12: RUN  a   b":           "step 12 RUN a b",
		"--> Using cache 0123":          "",
		"Successfully tagged localhost": "",
		"step 1/5: lower case":          "",
	} {
		got, ok := parseBuildLine(in)
		if ok != (want != "") || got != want {
			t.Errorf("parseBuildLine(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

func TestBuildCommandNeverBuildsOverAnImageTheUserNamed(t *testing.T) {
	set := settingsFrom(map[string]string{"AGENT_SANDBOX_IMAGE": "localhost/agent-sandbox-codex:dev"})
	code, stderr := runBuildCommand(set, "sandbox")
	if code != exitRefused {
		t.Fatalf("exit code = %d, want %d", code, exitRefused)
	}
	out := stderr()
	for _, want := range []string{"AGENT_SANDBOX_IMAGE names localhost/agent-sandbox-codex:dev", "unset AGENT_SANDBOX_IMAGE"} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr lacks %q: %q", want, out)
		}
	}
}

// runBuildCommand runs `agent-sandbox build --only only` with the settings
// set, and returns its exit code and its stderr.
func runBuildCommand(set settings, only string) (int, func() string) {
	out := &lockedBuffer{}
	err := buildCommand(context.Background(), set, out, only, false)
	report(out, err)
	return exitCode(err), out.String
}
