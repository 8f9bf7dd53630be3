package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
)

// runCLI runs `agent-sandbox ARGS...` as main does, with the test's
// environment and stdin, and returns the exit code, stdout and stderr.
func runCLI(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, os.LookupEnv, &iostreams.Streams{In: strings.NewReader(stdin), Out: &out, Err: &errOut}, nil, nil)
	return code, out.String(), errOut.String()
}
