package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"
)

// readmeExitCodes is the first column of README.md's exit-code table.
func readmeExitCodes(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	section := regexp.MustCompile(`(?s)\n## Exit codes\n(.*?)\n## `).FindSubmatch(b)
	if section == nil {
		t.Fatal("README.md has no Exit codes section")
	}
	var codes []string
	for _, m := range regexp.MustCompile(`(?m)^\| ([^|]+?) \| `).FindAllSubmatch(section[1], -1) {
		if c := string(m[1]); c != "code" {
			codes = append(codes, c)
		}
	}
	return codes
}

// TestExitCodesAreTheREADMEsTable: each row of README.md's table is what
// exitCode gives for the errors of that kind, and there is no code the
// README does not list.
func TestExitCodesAreTheREADMEsTable(t *testing.T) {
	const agentRow = "the agent's own"
	for _, tc := range []struct {
		what string
		err  error
		row  string
		want int
	}{
		{"the agent exits 0", agentExit(0), agentRow, 0},
		{"the agent exits 42", agentExit(42), agentRow, 42},
		{"the agent is killed by SIGTERM", agentExit(143), agentRow, 143},
		{"a bad allowlist", refused(errors.New("line 3: bad")), "1", 1},
		{"a refusal wrapped by its caller", fmt.Errorf("prepare: %w", refusef("refusing to mount /")), "1", 1},
		{"a home volume that is not ours", refusal{volumeNotOurs{"home", []string{"db"}}}, "1", 1},
		{"a list of problems its command reported", reported(exitRefused), "1", 1},
		{"a podman API call that failed", errors.New("create network x: boom"), "125", 125},
		{"the router died", fmt.Errorf("%w; the session ends", helperDied{"r", "router"}), "125", 125},
		{"gc could not remove something", errors.Join(cleanupFailed{"pod x", errors.New("busy")}), "125", 125},
		{"a signal", errInterrupted, "130", 130},
		{"a signal while teardown failed too", errors.Join(errInterrupted, errors.New("busy")), "130", 130},
	} {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("%s: exit code %d, want %d", tc.what, got, tc.want)
		}
		if n, err := strconv.Atoi(tc.row); err == nil && n != tc.want {
			t.Errorf("%s: the table's row %q is not its code %d", tc.what, tc.row, tc.want)
		}
	}
	rows := readmeExitCodes(t)
	if want := []string{agentRow, "1", "125", "130"}; !slices.Equal(rows, want) {
		t.Errorf("README.md's exit codes are %q, want %q: update this table test with the README", rows, want)
	}
	if exitCode(nil) != 0 {
		t.Error("no error must exit 0")
	}
}

// TestReportSaysOneThingPerLine: what the user reads on stderr.
func TestReportSaysOneThingPerLine(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{refusef("allowed-hosts: line 2: bad\nfix or remove the line"), "agent-sandbox: allowed-hosts: line 2: bad\nagent-sandbox: fix or remove the line\n"},
		{errors.New("create pod x: boom\n"), "agent-sandbox: create pod x: boom\n"},
		{agentExit(3), ""},
		{errInterrupted, ""},
		{reported(1), ""},
		{nil, ""},
	} {
		var out bytes.Buffer
		report(&out, tc.err)
		if out.String() != tc.want {
			t.Errorf("report(%v) = %q, want %q", tc.err, out.String(), tc.want)
		}
	}
}
