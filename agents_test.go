package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/agent-sandbox/agent-sandbox/internal/allowlist"
	"github.com/agent-sandbox/agent-sandbox/internal/podman"
)

func TestLookupAgent(t *testing.T) {
	for _, n := range []string{"claude", "codex", "gemini"} {
		if a, err := lookupAgent(n, "--agent"); err != nil || a.name != n {
			t.Errorf("%s: %+v, %v", n, a, err)
		}
	}
	if _, err := lookupAgent("copilot", "AGENT_SANDBOX_AGENT"); err == nil || err.Error() != "AGENT_SANDBOX_AGENT copilot: not an agent agent-sandbox knows; pick one of claude, codex, gemini" {
		t.Errorf("unknown: %v", err)
	}
	// Claude Code's own --agent (a subagent of its) passes through.
	for _, args := range [][]string{{"--agent", "reviewer", "-p", "hi"}, {"--agent=reviewer"}} {
		la, err := parseLaunchArgs(args, nil)
		if err != nil || la.agent != "" || !slices.Equal(la.cmd, append([]string{"claude"}, args...)) {
			t.Errorf("%q: agent %q cmd %q, %v; want it all for claude", args, la.agent, la.cmd, err)
		}
	}
	if la, err := parseLaunchArgs([]string{"--agent=codex", "--pids", "64"}, nil); err != nil || la.agent != "codex" || la.limits.Pids != 64 {
		t.Errorf("--agent=codex: %+v, %v", la, err)
	}
	if _, err := parseLaunchArgs([]string{"--agent"}, nil); err == nil || !strings.Contains(err.Error(), "--agent needs an agent") {
		t.Errorf("--agent alone: %v", err)
	}
}

func pickFor(t *testing.T, env map[string]string, args ...string) (sessionConfig, error) {
	t.Helper()
	la, err := parseLaunchArgs(args, nil)
	if err != nil {
		t.Fatal(err)
	}
	set := settingsFrom(env)
	cfg := sessionConfig{cmd: la.cmd, entries: []allowlist.Entry{{Host: "api.openai.com", Port: 443}, {Host: "example.com", Port: 443}}}
	err = cfg.pickAgent(set, la)
	return cfg, err
}

func TestPickAgent(t *testing.T) {
	// Claude Code by default: the sandbox image, claude with the arguments.
	cfg, err := pickFor(t, nil, "--resume")
	if err != nil || cfg.agent.name != "claude" || cfg.image != "localhost/agent-sandbox:dev" || !slices.Equal(cfg.cmd, []string{"claude", "--resume"}) || len(cfg.agentHosts) != 0 {
		t.Errorf("default: %+v, %v", cfg, err)
	}
	// Codex: its image, its command, its recipe's hosts added once.
	cfg, err = pickFor(t, map[string]string{"XDG_CONFIG_HOME": t.TempDir()}, "--agent", "codex", "exec", "hi")
	if err != nil || cfg.image != "localhost/agent-sandbox-codex:dev" || !slices.Equal(cfg.cmd, []string{"codex", "exec", "hi"}) {
		t.Fatalf("codex: %+v, %v", cfg, err)
	}
	var hosts []string
	for _, e := range cfg.agentHosts {
		hosts = append(hosts, e.String())
	}
	if !slices.Equal(hosts, []string{"api.openai.com", "auth.openai.com", "chatgpt.com"}) {
		t.Errorf("codex hosts %v", hosts)
	}
	if len(cfg.entries) != 4 || len(cfg.listed) != 2 {
		t.Errorf("entries %v (listed %v): want the list plus the two hosts it lacked", cfg.entries, cfg.listed)
	}
	// With a key, the API host alone: no sign-in hosts.
	cfg, err = pickFor(t, map[string]string{"OPENAI_API_KEY": "sk-x", "XDG_CONFIG_HOME": t.TempDir()}, "--agent", "codex")
	if err != nil || len(cfg.agentHosts) != 1 || cfg.agentHosts[0].Host != "api.openai.com" {
		t.Errorf("codex with a key: %+v, %v", cfg.agentHosts, err)
	}
	// AGENT_SANDBOX_AGENT sets the default; --exec keeps its command.
	cfg, err = pickFor(t, map[string]string{"AGENT_SANDBOX_AGENT": "gemini"}, "--exec", "gemini", "--version")
	if err != nil || cfg.image != "localhost/agent-sandbox-gemini:dev" || !slices.Equal(cfg.cmd, []string{"gemini", "--version"}) {
		t.Errorf("gemini by env, --exec: %+v, %v", cfg, err)
	}
	// --agent wins over the variable.
	if cfg, err = pickFor(t, map[string]string{"AGENT_SANDBOX_AGENT": "gemini"}, "--agent", "claude"); err != nil || cfg.agent.name != "claude" {
		t.Errorf("--agent over the env: %+v, %v", cfg.agent, err)
	}
	// The API pointed elsewhere (the tests' fake): that host alone.
	cfg, err = pickFor(t, map[string]string{"AGENT_SANDBOX_API_HOSTS": "openai=openai-api.allowed.test"}, "--agent", "codex")
	if err != nil || len(cfg.agentHosts) != 1 || cfg.agentHosts[0].Host != "openai-api.allowed.test" {
		t.Errorf("codex with its API elsewhere: %+v, %v", cfg.agentHosts, err)
	}
	// No silent choice between two images.
	if _, err := pickFor(t, map[string]string{"AGENT_SANDBOX_IMAGE": "localhost/mine:1"}, "--agent", "codex"); err == nil ||
		!strings.Contains(err.Error(), "--agent codex runs its own image, built on agent-sandbox's, but AGENT_SANDBOX_IMAGE names localhost/mine:1: unset one of them") {
		t.Errorf("codex with AGENT_SANDBOX_IMAGE: %v", err)
	}
	if _, err := pickFor(t, map[string]string{"AGENT_SANDBOX_AGENT": "nope"}); err == nil || !strings.Contains(err.Error(), "AGENT_SANDBOX_AGENT nope") {
		t.Errorf("a bad AGENT_SANDBOX_AGENT: %v", err)
	}
}

func TestAnAgentImageIsBuiltOnTheSandboxImageFromItsRecipe(t *testing.T) {
	fakeContexts(t, true)
	m := imageContexts.(fstest.MapFS)
	m["recipes/codex/Containerfile"] = &fstest.MapFile{Data: []byte("ARG BASE\nFROM ${BASE}\nCOPY codex /usr/local/bin/\n")}
	m["recipes/codex/codex"] = &fstest.MapFile{Data: []byte("#!/bin/sh\nexec real-codex \"$@\"\n")}
	m["recipes/codex/allowed-hosts"] = &fstest.MapFile{Data: []byte("api.openai.com\n")}
	set := settingsFrom(map[string]string{"XDG_RUNTIME_DIR": t.TempDir()})
	eng := newFakeEngine()
	eng.runCode = 7
	eng.missingImages = map[string]bool{devSandbox: true, "localhost/agent-sandbox-codex:dev": true}
	cfg := testConfig(t)
	a, _ := lookupAgent("codex", "--agent")
	cfg.agent, cfg.image = a, a.imageName()
	var modes = map[string]os.FileMode{}
	eng.buildHook = func(b podman.ImageBuild) {
		_ = filepath.Walk(b.ContextDir, func(p string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() {
				modes[filepath.Base(p)] = fi.Mode().Perm()
			}
			return nil
		})
	}
	if code, out := runSessionWith(context.Background(), eng, set, cfg); code != 7 {
		t.Fatalf("exit %d\n%s", code, out())
	}
	if len(eng.builds) != 2 || eng.builds[0].Tag != devSandbox || eng.builds[1].Tag != "localhost/agent-sandbox-codex:dev" {
		t.Fatalf("builds %+v: want the sandbox image, then codex's on it", eng.builds)
	}
	if b := eng.builds[1]; b.Args["BASE"] != devSandbox {
		t.Errorf("codex image BASE = %q, want the sandbox image", b.Args["BASE"])
	}
	if modes["codex"] != 0o755 || modes["Containerfile"] != 0o644 {
		t.Errorf("context modes %v: the wrapper script must run", modes)
	}
	if c := eng.containers[testSession+"-claude"]; c.Image != "localhost/agent-sandbox-codex:dev" {
		t.Errorf("the agent runs %s", c.Image)
	}
}

func TestAgentHostsLineNamesOnlyWhatThePresetAdded(t *testing.T) {
	a, _ := lookupAgent("codex", "--agent")
	hosts := []allowlist.Entry{{Host: "api.openai.com", Port: 443}, {Host: "chatgpt.com", Port: 443}, {Host: "chatgpt.com", Port: 443}}
	listed := []allowlist.Entry{{Host: "api.openai.com", Port: 443, Passthrough: true}}
	if got := agentHostsLine(a, hosts, listed); got != "agent codex: allowed for this session, not written to your allowlist: chatgpt.com" {
		t.Errorf("line %q", got)
	}
	if got := agentHostsLine(a, hosts[:1], listed); got != "" {
		t.Errorf("nothing added, but said %q", got)
	}
	if got := withAgentHosts(listed, hosts); len(got) != 2 || !got[0].Passthrough {
		t.Errorf("merged %+v: want the listed entry as it is, and chatgpt.com once", got)
	}
}
