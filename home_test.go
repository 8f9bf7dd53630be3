package main

import (
	"bytes"
	"context"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/podman"
	"github.com/agent-sandbox/agent-sandbox/internal/projectdir"
)

func TestProjectHomeIsPerProjectAndReadable(t *testing.T) {
	a, b := projectHome("/home/u/src/web-app"), projectHome("/home/u/work/web-app")
	if a == b {
		t.Fatalf("two projects share the home %s", a)
	}
	if a != projectHome("/home/u/src/web-app") {
		t.Fatal("a project's home name is not stable")
	}
	for _, name := range []string{a, projectHome("/"), projectHome("/x/My Project:ü"), projectHome("/x/" + strings.Repeat("n", 80))} {
		if !volumeName.MatchString(name) || !strings.HasPrefix(name, "agent-sandbox-home-") || len(name) > 70 {
			t.Errorf("home name %q is not a short podman volume name", name)
		}
	}
	if !strings.HasPrefix(a, "agent-sandbox-home-web-app-") {
		t.Errorf("home name %q does not say whose it is", a)
	}
}

func TestHomeVolumeForPrefersFlagThenEnvironment(t *testing.T) {
	for _, tc := range []struct {
		flag, env, want string
		project         bool
	}{
		{"", "", projectHome("/p"), true},
		{"", "shared", "shared", false},
		{"mine", "shared", "mine", false},
	} {
		name, labels := homeVolumeFor(tc.flag, tc.env, "/p")
		if name != tc.want || labels[labelShared] != "true" || (labels[labelProject] == "/p") != tc.project {
			t.Errorf("homeVolumeFor(%q, %q) = %s %v, want %s (project label %v)", tc.flag, tc.env, name, labels, tc.want, tc.project)
		}
	}
}

func TestGCListsAndRemovesHomesOfProjectsThatAreGone(t *testing.T) {
	live := t.TempDir()
	vols := []podman.VolumeInfo{
		{Name: "agent-sandbox-home-live-1", Labels: map[string]string{labelProject: live}},
		{Name: "agent-sandbox-home-gone-2", Labels: map[string]string{labelProject: live + "/gone"}},
		{Name: "shared", Labels: map[string]string{labelShared: "true"}},
	}
	eng := newFakeEngine()
	eng.volumes = vols
	var out bytes.Buffer
	if err := collectHomes(context.Background(), eng, &out, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "agent-sandbox-home-gone-2") || strings.Contains(out.String(), "live-1") || slices.ContainsFunc(eng.calls, func(c string) bool { return strings.HasPrefix(c, "VolumeRemove") }) {
		t.Fatalf("listing: %q, calls %v", out.String(), eng.calls)
	}
	out.Reset()
	if err := collectHomes(context.Background(), eng, &out, true); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(eng.calls, "VolumeRemove agent-sandbox-home-gone-2") || slices.Contains(eng.calls, "VolumeRemove agent-sandbox-home-live-1") {
		t.Fatalf("calls %v", eng.calls)
	}
	eng.failOn = "VolumeRemove agent-sandbox-home-gone-2"
	if err := collectHomes(context.Background(), eng, &out, true); err == nil || !strings.Contains(err.Error(), "agent-sandbox-home-gone-2") {
		t.Fatalf("a failed removal was not reported: %v", err)
	}
}

func TestSpecsPassNoProxyVariablesAndProtectTheRepository(t *testing.T) {
	eng := newFakeEngine()
	cfg := testConfig(t)
	cfg.launchDir = repoTree(t)
	project, err := openProject(cfg.launchDir, projectdir.Host{}, startScanBound, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer project.close()
	cfg.project = project
	if code, _ := runSession(context.Background(), eng, cfg); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	for name, s := range eng.containers {
		if s.HTTPProxy == nil || *s.HTTPProxy {
			t.Errorf("%s: podman copies the service's *_proxy variables in", name)
		}
	}
	agent := eng.containers[testSession+"-claude"]
	ro := map[string]bool{}
	for _, m := range agent.Mounts {
		ro[strings.TrimPrefix(m.Destination, cfg.launchDir+"/")] = slices.Contains(m.Options, "ro")
	}
	for _, p := range []string{".git/config", ".git/hooks", ".claude", ".mcp.json", "lib/.git"} {
		if !ro[p] {
			t.Errorf("%s is not mounted read-only in the agent: %v", p, slices.Sorted(maps.Keys(ro)))
		}
	}
	if v, ok := ro[".git"]; !ok || v {
		t.Errorf(".git is not pinned read-write (mounted %v, ro %v)", ok, v)
	}
}
