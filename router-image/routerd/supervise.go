package main

import (
	"context"
	"io"
	"log"
	"os/exec"
	"syscall"
	"time"
)

// child is one long-running program of the router.
type child struct {
	name string
	argv []string
}

type supervisor struct {
	children []child
	// grace is how long children get between SIGTERM and SIGKILL.
	grace          time.Duration
	stdout, stderr io.Writer
	log            *log.Logger
}

type exit struct {
	index int
	err   error
}

// run starts every child and waits until one of them exits, the filter
// fails (an error on stopped) or ctx ends; then it stops the rest. It
// returns 0 when ctx ended it and 1 when something failed on its own.
func (s *supervisor) run(ctx context.Context, stopped <-chan error) int {
	exits := make(chan exit, len(s.children))
	var cmds []*exec.Cmd
	for i, c := range s.children {
		if len(c.argv) == 0 {
			s.log.Printf("cannot start %s: no command", c.name)
			s.stop(cmds, exits)
			return 1
		}
		cmd := exec.Command(c.argv[0], c.argv[1:]...)
		cmd.Stdout, cmd.Stderr = s.stdout, s.stderr
		// A group of its own lets us stop the child's children too, and keeps
		// a terminal's ^C from reaching children before we decide.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			s.log.Printf("cannot start %s: %v", c.name, err)
			s.stop(cmds, exits)
			return 1
		}
		cmds = append(cmds, cmd)
		go func() { exits <- exit{i, cmd.Wait()} }()
	}

	code := 0
	done := make([]bool, len(cmds))
	select {
	case <-ctx.Done():
	case e := <-exits:
		done[e.index] = true
		s.log.Printf("%s exited: %s", s.children[e.index].name, describe(e.err))
		code = 1
	case err := <-stopped:
		s.log.Printf("dns filter stopped: %v", err)
		code = 1
	}
	s.stopRemaining(cmds, done, exits)
	return code
}

func describe(err error) string {
	if err == nil {
		return "exit status 0 (it should run until stopped)"
	}
	return err.Error()
}

// stop ends every started child; none has been reaped yet.
func (s *supervisor) stop(cmds []*exec.Cmd, exits <-chan exit) {
	s.stopRemaining(cmds, make([]bool, len(cmds)), exits)
}

// stopRemaining sends SIGTERM to the children not yet done, SIGKILL after
// the grace period, and returns once all have been reaped.
func (s *supervisor) stopRemaining(cmds []*exec.Cmd, done []bool, exits <-chan exit) {
	signalAll := func(sig syscall.Signal) {
		for i, cmd := range cmds {
			if !done[i] {
				_ = syscall.Kill(-cmd.Process.Pid, sig)
			}
		}
	}
	left := 0
	for _, d := range done {
		if !d {
			left++
		}
	}
	if left == 0 {
		return
	}
	signalAll(syscall.SIGTERM)
	kill := time.NewTimer(s.grace)
	defer kill.Stop()
	for left > 0 {
		select {
		case e := <-exits:
			done[e.index] = true
			left--
		case <-kill.C:
			for i := range cmds {
				if !done[i] {
					s.log.Printf("%s did not stop within %v, killing it", s.children[i].name, s.grace)
				}
			}
			signalAll(syscall.SIGKILL)
		}
	}
}
