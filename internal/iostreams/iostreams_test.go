package iostreams

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/testpty"
	"golang.org/x/sys/unix"
)

func TestPrefixed(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"one", "agent-sandbox: one\n"},
		{"one\n", "agent-sandbox: one\n"},
		{"head:\n  a\n  b\n", "agent-sandbox: head:\nagent-sandbox:   a\nagent-sandbox:   b\n"},
	} {
		if got := Prefixed(c.in); got != c.want {
			t.Errorf("Prefixed(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestSay(t *testing.T) {
	var b bytes.Buffer
	Say(&b, "created %s; edit it", "/x/allowed-hosts")
	if got := b.String(); got != "agent-sandbox: created /x/allowed-hosts; edit it\n" {
		t.Errorf("Say wrote %q", got)
	}
}

// Streams over buffers or plain files are no terminal: the agent gets
// none, and progress is a line per step.
func TestStreamsNotATerminal(t *testing.T) {
	var out bytes.Buffer
	s := &Streams{In: strings.NewReader(""), Out: &out, Err: &out}
	if s.Interactive() {
		t.Error("buffers are interactive")
	}
	if _, _, ok := s.Size(); ok {
		t.Error("buffers have a size")
	}
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s = &Streams{In: f, Out: f, Err: f}
	if _, ok := s.InFd(); !ok {
		t.Error("a file has no fd")
	}
	if s.Interactive() || IsTerminal(f) {
		t.Error("a plain file is a terminal")
	}
	if _, ok := Width(f); ok {
		t.Error("a plain file has a width")
	}
}

// A terminal on both stdin and stdout is interactive, with the size the
// terminal has.
func TestStreamsOnATerminal(t *testing.T) {
	_, tty := testpty.Open(t)
	if err := unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: 132, Row: 43}); err != nil {
		t.Fatal(err)
	}
	s := &Streams{In: tty, Out: tty, Err: tty}
	if !s.Interactive() || !IsTerminal(tty) {
		t.Fatal("a terminal is not interactive")
	}
	if w, h, ok := s.Size(); !ok || w != 132 || h != 43 {
		t.Errorf("size = %dx%d (%v), want 132x43", w, h, ok)
	}
	if s.Out = new(bytes.Buffer); s.Interactive() {
		t.Error("a terminal on stdin alone is interactive")
	}
}
