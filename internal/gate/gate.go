// Package gate is the agent's gate, both sides of it: the launcher holds a
// FIFO and writes Word into it once the router and the forwarder are
// ready; the forwarder's binary, run as the agent container's init, waits
// for that word (Run) and then becomes the real init (catatonit) with the
// arguments podman gave it. So the agent's container is started beside
// the helpers instead of after them, and nothing of the agent runs before
// the forwarder has taken its loopback ports and routerd has written the
// agent's CA bundle.
package gate

import (
	"fmt"
	"os"
	"syscall"
)

// Where the gate finds what it needs in the agent's container, and what
// the launcher writes.
const (
	// Arg0 is the path podman runs an init it is given by.
	Arg0 = "/run/podman-init"
	// DirInAgent holds the launcher's FIFO, mounted read-only.
	DirInAgent = "/run/agent-sandbox/gate"
	// FIFOName is the FIFO's name in DirInAgent (and in the launcher's
	// session dir).
	FIFOName = "open"
	// InitInAgent is the host's container init, mounted read-only.
	InitInAgent = "/run/agent-sandbox/init"
	// Word is what the launcher writes once the session is ready.
	Word = "go\n"
	// ExitCode is the gate's code when the launcher ended without
	// opening it: podman's own code for a container that could not run
	// its command.
	ExitCode = 125
)

// Run waits at fifo and execs init with args; it returns (the code to
// exit with) only when the gate did not open or init could not be run.
func Run(fifo, init string, args []string, exec func(string, []string, []string) error) int {
	word, err := Await(fifo)
	if err != nil {
		fmt.Fprintf(os.Stderr, "agent-sandbox gate: %v\n", err)
		return ExitCode
	}
	if word != Word {
		// All writers closed first: the launcher ended (or was killed)
		// before the sandbox was ready, and its teardown removes this.
		fmt.Fprintln(os.Stderr, "agent-sandbox gate: the launcher ended before the sandbox was ready; the agent's command was not run")
		return ExitCode
	}
	err = exec(init, args, os.Environ())
	fmt.Fprintf(os.Stderr, "agent-sandbox gate: run %s: %v\n", init, err)
	return ExitCode
}

// Await reads the launcher's word from fifo, or what there is when every
// writer has closed it. Opened without waiting for a writer: with none (a
// launcher that ended before this ran) the read sees the end at once
// instead of waiting for good.
func Await(fifo string) (string, error) {
	fd, err := syscall.Open(fifo, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer syscall.Close(fd)
	if err := syscall.SetNonblock(fd, false); err != nil {
		return "", err
	}
	word := make([]byte, len(Word))
	n := 0
	for n < len(word) {
		m, err := syscall.Read(fd, word[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return "", err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return string(word[:n]), nil
}
