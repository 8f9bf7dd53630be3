package main

import (
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/allowlist"
)

// The shipped allowlist (allowed-hosts, embedded in the binary) is the
// grammar's first user: it must parse, name what people need, and draw
// no warning of its own.

func TestDefaultAllowlistParses(t *testing.T) {
	entries, err := allowlist.Parse(strings.NewReader(string(defaultAllowlist)), "allowed-hosts")
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, e := range entries {
		have[e.String()] = true
	}
	for _, need := range []string{"api.anthropic.com", "github.com", "api.github.com", "registry.npmjs.org", "pypi.org", "proxy.golang.org", "crates.io"} {
		if !have[need] {
			t.Errorf("default allowlist lacks %s", need)
		}
	}
	// Issue 22: git goes over HTTPS, where the router adds the user's
	// token and scopes writes; a raw ssh relay carries any key.
	for _, e := range entries {
		if e.Port != allowlist.TLSPort {
			t.Errorf("default allowlist relays %s as raw TCP", e)
		}
	}
	for _, line := range strings.Split(string(defaultAllowlist), "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") && !strings.Contains(l, "#") {
			t.Errorf("default entry %q has no comment saying why", l)
		}
	}
}

func TestDefaultAllowlistLintsClean(t *testing.T) {
	entries, err := allowlist.Parse(strings.NewReader(string(defaultAllowlist)), "allowed-hosts")
	if err != nil {
		t.Fatal(err)
	}
	if got := allowlist.Lint(entries); len(got) != 0 {
		t.Errorf("the shipped allowlist draws warnings:\n%s", strings.Join(got, "\n"))
	}
}
