package main

import (
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/agent-sandbox/agent-sandbox/internal/gate"
)

// The same binary is the agent container's init (internal/gate): podman
// runs the init it is given as gate.Arg0.

// isGate says whether this process was started as the agent's init.
func isGate(args []string) bool { return len(args) > 0 && args[0] == gate.Arg0 }

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
	os.Exit(gate.Run(filepath.Join(gate.DirInAgent, gate.FIFOName), gate.InitInAgent, os.Args, syscall.Exec))
}
