package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/allowlist"
)

func TestRealpath(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.MkdirAll(filepath.Join(dir, "real/sub"), 0o755))
	must(t, os.Symlink(filepath.Join(dir, "real"), filepath.Join(dir, "abs")))
	must(t, os.Symlink("real/sub", filepath.Join(dir, "rel")))
	must(t, os.Symlink(filepath.Join(dir, "nowhere/x"), filepath.Join(dir, "dangling")))
	must(t, os.Symlink("loop", filepath.Join(dir, "loop")))
	for in, want := range map[string]string{
		dir + "/abs":          dir + "/real",
		dir + "/abs/sub":      dir + "/real/sub",
		dir + "/rel/..":       dir + "/real", // ".." applies after resolving
		dir + "/missing/a/b":  dir + "/missing/a/b",
		dir + "/abs/missing":  dir + "/real/missing",
		dir + "/dangling/y":   dir + "/nowhere/x/y",
		dir + "/./real//sub/": dir + "/real/sub",
		dir + "/loop/z":       dir + "/loop/z",
	} {
		if got := realpath(in); got != want {
			t.Errorf("realpath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCheckLaunchDir(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(root, "home/u")
	project := filepath.Join(home, "src/project")
	must(t, os.MkdirAll(project, 0o755))
	must(t, os.MkdirAll(filepath.Join(root, "lists"), 0o755))
	must(t, os.Symlink(home, filepath.Join(root, "homelink")))
	must(t, os.Symlink(filepath.Join(root, "lists/hosts"), filepath.Join(project, "hosts-link")))
	defaultList := filepath.Join(home, ".config/agent-sandbox/allowed-hosts")

	for _, tc := range []struct {
		pwd, allowlist, refuse string
	}{
		{project, defaultList, ""},
		{home, defaultList, "it is or contains $HOME"},
		{filepath.Join(root, "homelink"), defaultList, "it is or contains $HOME"},
		{root, defaultList, "it is or contains $HOME"},
		{filepath.Join(home, ".config"), defaultList, "agent-sandbox"},
		{filepath.Join(root, "lists"), filepath.Join(root, "lists/hosts"), "lists"},
		// The allowlist is reached through a link inside the project.
		{filepath.Join(home, "src"), filepath.Join(project, "hosts-link"), "src/project"},
		{filepath.Join(root, "lists"), filepath.Join(project, "hosts-link"), "lists"},
	} {
		err := checkLaunchDir(tc.pwd, settingsFrom(map[string]string{"HOME": home, "AGENT_SANDBOX_ALLOWLIST": tc.allowlist}))
		switch {
		case tc.refuse == "" && err != nil:
			t.Errorf("checkLaunchDir(%s) refused: %v", tc.pwd, err)
		case tc.refuse != "" && (err == nil || !strings.Contains(err.Error(), tc.refuse)):
			t.Errorf("checkLaunchDir(%s, %s) = %v, want a refusal naming %q", tc.pwd, tc.allowlist, err, tc.refuse)
		}
	}
}

func TestEnsureAllowlistSeedsOnceAndKeepsEdits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cfg/agent-sandbox/allowed-hosts")
	var stderr bytes.Buffer
	must(t, ensureAllowlist(path, &stderr))
	if out := stderr.String(); !strings.Contains(out, "created "+path) {
		t.Errorf("no note on stderr: %q", out)
	}
	got, err := os.ReadFile(path)
	must(t, err)
	if string(got) != string(defaultAllowlist) {
		// A file beside the test binary or in /usr/share wins; either way it must parse.
		if _, err := allowlist.Parse(strings.NewReader(string(got)), path); err != nil {
			t.Fatalf("seeded allowlist does not parse: %v", err)
		}
	}
	must(t, os.WriteFile(path, []byte("mine.example\n"), 0o644))
	must(t, ensureAllowlist(path, io.Discard))
	if got, _ := os.ReadFile(path); string(got) != "mine.example\n" {
		t.Fatalf("user's allowlist was changed to %q", got)
	}
	dir := filepath.Join(t.TempDir(), "adir")
	must(t, os.Mkdir(dir, 0o755))
	if err := ensureAllowlist(dir, io.Discard); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("directory as allowlist: %v", err)
	}
}

func TestPrepareRefusals(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	list := filepath.Join(root, "hosts")
	must(t, os.WriteFile(list, []byte("ok.example\n"), 0o644))
	env := map[string]string{"HOME": filepath.Join(root, "home"), "XDG_CONFIG_HOME": filepath.Join(root, "config"), "AGENT_SANDBOX_ALLOWLIST": list}

	colon := filepath.Join(root, "a:b")
	must(t, os.Mkdir(colon, 0o755))
	t.Chdir(colon)
	if _, err := prepare(settingsFrom(env), io.Discard, launchArgs{cmd: []string{"true"}}, newSessionName()); err == nil || !strings.Contains(err.Error(), "':'") {
		t.Fatalf("dir with ':' accepted: %v", err)
	}

	project := filepath.Join(root, "project")
	must(t, os.Mkdir(project, 0o755))
	t.Chdir(project)
	env["AGENT_SANDBOX_UPSTREAM_DNS"] = "10.0.0.1,not-an-ip"
	if _, err := prepare(settingsFrom(env), io.Discard, launchArgs{cmd: []string{"true"}}, newSessionName()); err == nil || !strings.Contains(err.Error(), `AGENT_SANDBOX_UPSTREAM_DNS: "not-an-ip"`) {
		t.Fatalf("bad upstream DNS accepted: %v", err)
	}
	env["AGENT_SANDBOX_UPSTREAM_DNS"], env["AGENT_SANDBOX_UPSTREAM_ALLOW"] = "10.99.0.10", "10.99.0.0/33"
	if _, err := prepare(settingsFrom(env), io.Discard, launchArgs{cmd: []string{"true"}}, newSessionName()); err == nil || !strings.Contains(err.Error(), "AGENT_SANDBOX_UPSTREAM_ALLOW") {
		t.Fatalf("bad upstream allow accepted: %v", err)
	}
	env["AGENT_SANDBOX_UPSTREAM_ALLOW"] = "10.99.0.7/24"
	cfg, err := prepare(settingsFrom(env), io.Discard, launchArgs{cmd: []string{"true"}}, newSessionName())
	must(t, err)
	if cfg.upstreamAllow != "10.99.0.0/24" || cfg.upstreamDNS != "10.99.0.10" || cfg.launchDir != project || len(cfg.entries) != 1 {
		t.Fatalf("prepare = %+v", cfg)
	}
	if !strings.HasPrefix(cfg.name, "agent-sandbox-") {
		t.Fatalf("session name %q", cfg.name)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestCheckLaunchDirRefusesWhereSocketsLive(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	runtime := filepath.Join(root, "run/user/1000")
	tmpdir := filepath.Join(root, "mytmp")
	project := filepath.Join(root, "src/project")
	for _, d := range []string{runtime, tmpdir, project} {
		must(t, os.MkdirAll(d, 0o755))
	}
	set := settingsFrom(map[string]string{"HOME": filepath.Join(root, "home/u"), "XDG_RUNTIME_DIR": runtime, "TMPDIR": tmpdir})
	for dir, refuse := range map[string]string{
		"/":                        "it is or contains /,",
		"/tmp":                     "it is or contains /tmp,",
		"/var/tmp":                 "/var/tmp",
		"/var":                     "/var/tmp",
		"/run":                     "/run",
		"/dev/shm":                 "/dev/shm",
		"/dev":                     "/dev/shm",
		runtime:                    "$XDG_RUNTIME_DIR",
		filepath.Join(root, "run"): "$XDG_RUNTIME_DIR",
		// Its API service's socket dir, whose socket may appear only
		// after the scan.
		filepath.Join(runtime, "agent-sandbox-podman"): "it lies inside $XDG_RUNTIME_DIR",
		filepath.Join(runtime, "x/y"):                  "it lies inside $XDG_RUNTIME_DIR",
		tmpdir:                                         "$TMPDIR",
		project:                                        "",
		filepath.Join(project, "x"):                    "",
	} {
		err := checkLaunchDir(dir, set)
		switch {
		case refuse == "" && err != nil:
			t.Errorf("checkLaunchDir(%s) refused: %v", dir, err)
		case refuse != "" && (err == nil || !strings.Contains(err.Error(), refuse)):
			t.Errorf("checkLaunchDir(%s) = %v, want a refusal naming %q", dir, err, refuse)
		}
	}
}
