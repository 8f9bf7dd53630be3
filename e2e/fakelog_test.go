//go:build e2e

package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Evidence rule: a "blocked" row passes only when the client failed AND the
// fake never saw the probe's nonce; an "allowed" row must see it arrive, which
// proves the log is live and the harness could see a leak.

func fakeLogPath() string { return filepath.Join(harness.fakeDir, "fake.log") }

func fakeLog() string {
	b, _ := os.ReadFile(fakeLogPath())
	return string(b)
}

// fakeLogContains matches case-insensitively: resolvers may change the case
// of names they forward.
func fakeLogContains(s string) bool {
	return strings.Contains(strings.ToLower(fakeLog()), strings.ToLower(s))
}

// fakeLogLines returns the lines holding all of parts.
func fakeLogLines(parts ...string) []string {
	var out []string
	for _, line := range strings.Split(fakeLog(), "\n") {
		low := strings.ToLower(line)
		ok := line != ""
		for _, p := range parts {
			ok = ok && strings.Contains(low, strings.ToLower(p))
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

// logMark remembers how far the fake log went, so a row can look only at
// what its own session caused.
type logMark int

func markFakeLog() logMark { return logMark(len(fakeLog())) }

func (m logMark) since() string {
	s := fakeLog()
	if int(m) > len(s) {
		return ""
	}
	return s[m:]
}

// newNonce is a lowercase DNS-label-safe token unique to one probe.
func newNonce(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "n" + hex.EncodeToString(b)
}

// wantArrived asserts the fake saw the nonce (the allowed/control half).
func wantArrived(t *testing.T, nonce, what string) {
	t.Helper()
	// Lines are written before the fake replies, but give a slow disk a moment.
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if fakeLogContains(nonce) {
			t.Logf("fake log for %s: %s", what, strings.Join(fakeLogLines(nonce), "\n"))
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: the fake upstream never saw nonce %s; the path is broken or the harness is blind", what, nonce)
			return
		}
	}
}

// wantNeverArrived asserts the fake has no trace of the nonce (the blocked
// half), once a marker to each of its listeners is in its log
// (marker_test.go): a missing marker fails the row as well.
func wantNeverArrived(t *testing.T, nonce, what string) {
	t.Helper()
	settleFakeLog(t, what)
	if got := fakeLogLines(nonce); len(got) > 0 {
		t.Errorf("LEAK: %s: the fake upstream saw nonce %s:\n%s", what, nonce, strings.Join(got, "\n"))
	}
}
