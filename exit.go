package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
)

// Exit codes besides the agent's own.
const (
	exitRefused = 1   // the launcher refused to start
	exitPodman  = 125 // podman or its API failed, as `podman run` reports it
	exitSignal  = 130 // a signal ended the session
)

// Every step returns an error; these types say what it means for the exit
// code. Any other error is podman's (125), as `podman run` reports it.

// refusal: the launcher refused to start (or a command its input), before
// it created anything. The message names the fix.
type refusal struct{ err error }

func (r refusal) Error() string { return r.err.Error() }
func (r refusal) Unwrap() error { return r.err }

// refusef is a refusal with a message of its own.
func refusef(format string, a ...any) error { return refusal{fmt.Errorf(format, a...)} }

// refused marks err, if any, as a refusal.
func refused(err error) error {
	if err == nil {
		return nil
	}
	return refusal{err}
}

// agentExit is the agent's own exit code, which becomes the launcher's.
type agentExit int

func (a agentExit) Error() string { return fmt.Sprintf("the agent exited with %d", int(a)) }

// errInterrupted means a signal (or a terminal's hang-up) ended the
// command, at whatever step it was: nothing more is said about it.
var errInterrupted = errors.New("interrupted")

// reported is a failure whose command has already said all there is to
// say (doctor's report, say): only its exit code is left.
type reported int

func (r reported) Error() string { return fmt.Sprintf("failed (exit %d)", int(r)) }

// exitCode is the process exit code for what a command returned.
func exitCode(err error) int {
	var (
		agent agentExit
		done  reported
	)
	switch {
	case err == nil:
		return 0
	case errors.As(err, &agent):
		return int(agent)
	case errors.Is(err, errInterrupted):
		return exitSignal
	case errors.As(err, &done):
		return int(done)
	case errors.As(err, new(refusal)):
		return exitRefused
	}
	return exitPodman
}

// report writes what the user is told about err: every line of its
// message with the prefix; nothing for an agent's exit, a signal, or a
// failure its command reported itself.
func report(w io.Writer, err error) {
	if err == nil || errors.As(err, new(agentExit)) || errors.Is(err, errInterrupted) || errors.As(err, new(reported)) {
		return
	}
	fmt.Fprint(w, iostreams.Prefixed(strings.TrimRight(err.Error(), "\n")))
}
