package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// The gate: the same binary, run as the agent container's init
// (/run/podman-init, where podman mounts the init it is given), holds the
// agent's command back until the launcher says the router and the
// forwarder are ready, then becomes the real init (catatonit) with the
// arguments podman gave it. So the agent's container is started beside
// the helpers instead of after them, and nothing of the agent runs before
// the forwarder has taken its loopback ports: an agent that ran first
// could take them itself.
const (
	// gateArg0 is the path podman runs its init by.
	gateArg0 = "/run/podman-init"
	// gateFIFO is the launcher's FIFO, in a directory mounted read-only.
	gateFIFO = "/run/agent-sandbox/gate/open"
	// gateInit is the host's container init, mounted read-only.
	gateInit = "/run/agent-sandbox/init"
	// gateWord is what the launcher writes once the session is ready.
	gateWord = "go\n"
)

// gateExitCode is the gate's code when the launcher ended without opening
// it: podman's own code for a container that could not run its command.
const gateExitCode = 125

// runGate waits at fifo and execs init with args; it returns only when
// the gate did not open or init could not be run.
func runGate(fifo, init string, args []string, exec func(string, []string, []string) error) int {
	word, err := awaitGate(fifo)
	if err != nil {
		fmt.Fprintf(os.Stderr, "agent-sandbox gate: %v\n", err)
		return gateExitCode
	}
	if word != gateWord {
		// All writers closed first: the launcher ended (or was killed)
		// before the sandbox was ready, and its teardown removes this.
		fmt.Fprintln(os.Stderr, "agent-sandbox gate: the launcher ended before the sandbox was ready; the agent's command was not run")
		return gateExitCode
	}
	err = exec(init, args, os.Environ())
	fmt.Fprintf(os.Stderr, "agent-sandbox gate: run %s: %v\n", init, err)
	return gateExitCode
}

// awaitGate reads the launcher's word from fifo, or what there is when
// every writer has closed it. Opened without waiting for a writer: with
// none (a launcher that ended before this ran) the read sees the end at
// once instead of waiting for good.
func awaitGate(fifo string) (string, error) {
	fd, err := syscall.Open(fifo, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer syscall.Close(fd)
	if err := syscall.SetNonblock(fd, false); err != nil {
		return "", err
	}
	word := make([]byte, len(gateWord))
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

// isGate says whether this process was started as the agent's init.
func isGate(args []string) bool { return len(args) > 0 && args[0] == gateArg0 }

// gateMain is main for the gate.
func gateMain() {
	// Stopped while it waits (the session ended first), it ends as
	// catatonit reports a command killed by the signal, not with the Go
	// runtime's 2. The exec resets these to the defaults.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	go func() {
		sig := <-sigs
		os.Exit(128 + int(sig.(syscall.Signal)))
	}()
	os.Exit(runGate(gateFIFO, gateInit, os.Args, syscall.Exec))
}
