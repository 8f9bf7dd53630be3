package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
)

// lookupIn reads variables from env alone: a test states the whole
// environment of its machine, so that the developer's own (an
// AGENT_SANDBOX_IMAGE, an API key) cannot reach it.
func lookupIn(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// settingsFrom is the settings of a machine whose environment is env.
func settingsFrom(env map[string]string) settings {
	s := newSettings(lookupIn(env))
	// The host's init, which no unit test runs.
	s.findInit = func() (string, error) { return testInitPath, nil }
	return s
}

// testInitPath is where the unit tests' host has its container init.
const testInitPath = "/usr/libexec/podman/catatonit"

// runCLIIn is runCLI on a machine whose environment is env.
func runCLIIn(t *testing.T, env map[string]string, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, lookupIn(env), &iostreams.Streams{In: strings.NewReader(stdin), Out: &out, Err: &errOut}, nil, nil)
	return code, out.String(), errOut.String()
}

// Every variable with a grammar is read once, by newSettings, and a bad
// one is named before anything else is looked at: a session's prepare and
// a kube export refuse at once, naming each bad variable together.
func TestSettingsReadOnceAndRefusedFirst(t *testing.T) {
	root := t.TempDir()
	ca := filepath.Join(root, "ca.pem")
	if err := os.WriteFile(ca, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := map[string]string{
		"AGENT_SANDBOX_UPSTREAM_DNS":   "dns.example",
		"AGENT_SANDBOX_UPSTREAM_ALLOW": "10.0.0.0/33",
		"AGENT_SANDBOX_API_HOSTS":      "nosuchapi=api.example",
		"AGENT_SANDBOX_API_ALLOW":      "no.such.rule",
		"AGENT_SANDBOX_PUBLISH":        "bad host",
		"AGENT_SANDBOX_UPSTREAM_CA":    ca,
		"AGENT_SANDBOX_SCAN_DIRS":      "lots",
	}
	// No allowlist, no launch dir, no XDG_RUNTIME_DIR: the settings are
	// refused before any of those is looked for.
	set := settingsFrom(bad)
	for _, err := range []error{
		set.valid(),
		func() error {
			_, err := prepare(set, io.Discard, launchArgs{cmd: []string{"true"}}, newSessionName())
			return err
		}(),
		func() error { _, err := kubeSandbox(set, kubeExportArgs{}, root, io.Discard); return err }(),
	} {
		for name := range bad {
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("the error does not name %s: %v", name, err)
			}
		}
	}
	if code := exitCode(set.valid()); code != exitRefused {
		t.Errorf("exit code %d for bad settings, want %d", code, exitRefused)
	}
	good := settingsFrom(map[string]string{"AGENT_SANDBOX_UPSTREAM_DNS": "10.0.0.53, 10.0.0.54", "AGENT_SANDBOX_UPSTREAM_ALLOW": "10.20.0.7/16",
		"AGENT_SANDBOX_API_ALLOW": "anthropic.web_fetch", "AGENT_SANDBOX_SCAN_DIRS": "500000"})
	if err := good.valid(); err != nil {
		t.Fatal(err)
	}
	p := good.parsed
	if p.upstreamDNS != "10.0.0.53,10.0.0.54" || p.upstreamAllow != "10.20.0.0/16" || !slices.Equal(p.apiAllow, []string{"anthropic.web_fetch"}) ||
		p.scanBound.Dirs != 500000 || len(p.apiHosts) == 0 {
		t.Errorf("parsed %+v", p)
	}
}
