package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
	"github.com/agent-sandbox/agent-sandbox/internal/projectdir"
	"github.com/agent-sandbox/agent-sandbox/internal/sessionreg"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// `agent-sandbox ps` and `stop`: the user's running sessions, read from
// the register each session claims its launch dir in (protect.go), and a
// way to end one from another terminal.

func newPsCommand(set settings) *cobra.Command {
	return reportFlagErrors(&cobra.Command{
		Use:   "ps",
		Short: "List your running sessions",
		Long: `ps lists your running sessions: each one's name, launch dir, agent command,
start time, published ports and limits. A session is listed from its start's
checks until it has reported how the agent ended.`,
		Example: `  agent-sandbox ps
  agent-sandbox stop agent-sandbox-1796280465-6078`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			runtimeDir, err := set.requireRuntimeDir()
			if err != nil {
				return err
			}
			claims, err := sessionreg.Open(runtimeDir, ownerAlive).Running()
			if err != nil {
				return err
			}
			printSessions(cmd.OutOrStdout(), claims, time.Now())
			return nil
		},
	})
}

// printSessions writes claims as a table, oldest first.
func printSessions(w io.Writer, claims []sessionreg.Claim, now time.Time) {
	slices.SortFunc(claims, func(a, b sessionreg.Claim) int { return a.Started.Compare(b.Started) })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tDIR\tAGENT\tSTARTED\tPORTS\tLIMITS")
	for _, c := range claims {
		ports := strings.Join(c.Ports, ",")
		if ports == "" {
			ports = "-"
		}
		started := "-"
		if !c.Started.IsZero() {
			started = c.Started.Local().Format("15:04:05") + " (" + now.Sub(c.Started).Round(time.Second).String() + " ago)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Session, projectdir.Quote(c.Dir), describeCommand(c.Command), started, ports, orDash(c.Limits))
	}
	tw.Flush()
}

// describeCommand is the agent command as ps shows it: its first word,
// and the rest cut short.
func describeCommand(cmd []string) string {
	if len(cmd) == 0 {
		return "-"
	}
	words := make([]string, len(cmd))
	for i, w := range cmd {
		words[i] = projectdir.Quote(w)
	}
	s := strings.Join(words, " ")
	// ASCII: tabwriter counts bytes.
	if r := []rune(s); len(r) > 40 {
		s = string(r[:37]) + "..."
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// stopWait bounds how long stop waits for the session to report its end.
const stopWait = 30 * time.Second

func newStopCommand(ctx context.Context, set settings) *cobra.Command {
	return reportFlagErrors(&cobra.Command{
		Use:   "stop SESSION...",
		Short: "End running sessions, as if their agent had exited",
		Long: `stop ends each named session (as agent-sandbox ps lists them) the way a
signal to its launcher would: the agent is stopped, the exit report is
printed in the session's own terminal, and the teardown runs. It waits until
the session has reported its end.`,
		Example: `  agent-sandbox ps
  agent-sandbox stop agent-sandbox-1796280465-6078`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, names []string) error {
			runtimeDir, err := set.requireRuntimeDir()
			if err != nil {
				return err
			}
			return stopSessions(ctx, sessionreg.Open(runtimeDir, ownerAlive), names, cmd.ErrOrStderr(), signalOwner)
		},
	})
}

// stopSignal asks a session's owner (the keeper that runs it) to stop its
// agent: the session then ends as when the agent exits.
const stopSignal = syscall.SIGUSR1

func signalOwner(owner string) error {
	pid, _, _ := strings.Cut(owner, "@")
	n, err := strconv.Atoi(pid)
	if err != nil || n <= 0 {
		return fmt.Errorf("its owner %q is not a process", owner)
	}
	// Through a pidfd, checked after it is open: a pid reused by another
	// process since the register was read is never signalled (SIGUSR1
	// would end most programs).
	fd, err := unix.PidfdOpen(n, 0)
	if err != nil {
		return fmt.Errorf("its owner (pid %d) is gone: %w", n, err)
	}
	defer unix.Close(fd)
	if !ownerAlive(owner) {
		return fmt.Errorf("its owner (pid %d) is gone", n)
	}
	return unix.PidfdSendSignal(fd, stopSignal, nil, 0)
}

// stopSessions signals each named session's owner and waits for its
// claim to go. Every name is checked before any session is signalled.
func stopSessions(ctx context.Context, reg sessionreg.Register, names []string, out io.Writer, signal func(owner string) error) error {
	running, err := reg.Running()
	if err != nil {
		return err
	}
	var stop []sessionreg.Claim
	for _, name := range names {
		i := slices.IndexFunc(running, func(c sessionreg.Claim) bool { return c.Session == name })
		if i < 0 {
			return refusef("no running session %s; agent-sandbox ps lists them", name)
		}
		stop = append(stop, running[i])
	}
	for _, c := range stop {
		// The owner checked alive a moment ago, by pid and start time:
		// a reused pid is never signalled.
		if !ownerAlive(c.Owner) {
			continue
		}
		if err := signal(c.Owner); err != nil {
			return fmt.Errorf("cannot stop session %s: %w", c.Session, err)
		}
	}
	deadline := time.Now().Add(stopWait)
	for _, c := range stop {
		for {
			live, err := reg.Running()
			if err != nil {
				return err
			}
			if !slices.ContainsFunc(live, func(l sessionreg.Claim) bool { return l.Session == c.Session }) {
				iostreams.Say(out, "stopped session %s in %s", c.Session, projectdir.Quote(c.Dir))
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("session %s was asked to stop but still runs after %s; its launcher's terminal says why", c.Session, stopWait)
			}
			select {
			case <-ctx.Done():
				return errInterrupted
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}
