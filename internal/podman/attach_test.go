package podman

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
	"github.com/agent-sandbox/agent-sandbox/internal/trace"
)

// The attach reads stdin only once there is input, and its read ends the
// moment the run does: what the user types at the next prompt is left to
// the shell.
func TestInterruptibleStdin(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	in, closeIn := interruptibleStdin(&iostreams.Streams{In: r})
	if _, err := w.WriteString("typed\n"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := in.Read(buf)
	if err != nil || string(buf[:n]) != "typed\n" {
		t.Fatalf("read %q, %v; want the typed line", buf[:n], err)
	}
	read := make(chan error, 1)
	go func() { _, err := in.Read(buf); read <- err }()
	select {
	case err := <-read:
		t.Fatalf("a read with nothing typed returned: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	closeIn()
	select {
	case err := <-read:
		if !errors.Is(err, io.EOF) {
			t.Fatalf("the read ended with %v, want EOF", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("closing did not end the read")
	}
	// What is typed after the run is still there for the next reader.
	if _, err := w.WriteString("next prompt\n"); err != nil {
		t.Fatal(err)
	}
	n, _ = r.Read(buf)
	if string(buf[:n]) != "next prompt\n" {
		t.Errorf("the shell got %q", buf[:n])
	}
}

// Streams with no file behind stdin are read as they are.
func TestInterruptibleStdinNoFile(t *testing.T) {
	in, closeIn := interruptibleStdin(&iostreams.Streams{In: strings.NewReader("piped")})
	defer closeIn()
	b, err := io.ReadAll(in)
	if err != nil || string(b) != "piped" {
		t.Fatalf("read %q, %v", b, err)
	}
}

// A call is timed only when tracing is on.
func TestClientTimesItsCalls(t *testing.T) {
	if done := (bindingsClient{}).step("pod create x"); done == nil {
		t.Fatal("no func without a tracer")
	} else {
		done()
	}
	var out bytes.Buffer
	c := bindingsClient{trace: trace.New(true, &out)}
	c.step("pod create agent-sandbox-1-2")()
	if got := out.String(); !strings.HasPrefix(got, "agent-sandbox: trace ") || !strings.HasSuffix(got, " pod create agent-sandbox-1-2\n") {
		t.Errorf("trace line %q", got)
	}
}
