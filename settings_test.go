package main

import (
	"bytes"
	"context"
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
func settingsFrom(env map[string]string) settings { return newSettings(lookupIn(env)) }

// runCLIIn is runCLI on a machine whose environment is env.
func runCLIIn(t *testing.T, env map[string]string, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, lookupIn(env), &iostreams.Streams{In: strings.NewReader(stdin), Out: &out, Err: &errOut}, nil, nil)
	return code, out.String(), errOut.String()
}
