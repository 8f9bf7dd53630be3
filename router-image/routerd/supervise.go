package main

import (
	"context"
	"errors"
	"io"
	"log"
	"os/exec"
	"strconv"
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
	// reloads brings changed config files that passed their check.
	reloads <-chan reload
	// cut ends a child's old workers after a reload that asks for it;
	// without workers set, reloads cut nothing.
	cut cutter
}

type exit struct {
	index int
	err   error
}

// reload asks the supervisor to make a child take a new config file:
// with signal, or by a restart when signal is 0.
type reload struct {
	child  string
	file   string // for the log
	signal syscall.Signal
	// cut: the connections the child holds from before must end (for a
	// child reloaded by signal).
	cut bool
}

// overdue says a restarting child had its grace period; seq tells one
// restart from a later one of the same child.
type overdue struct{ index, seq int }

// run starts every child and waits until one of them exits, a DNS server
// fails (an error on stopped, which names it) or ctx ends; then it stops
// the rest. A child that exits because a reload restarts it is started
// again. It returns 0 when ctx ended it and 1 when something failed on
// its own.
func (s *supervisor) run(ctx context.Context, stopped <-chan error) int {
	exits := make(chan exit, len(s.children))
	var cmds []*exec.Cmd
	for i := range s.children {
		cmd, err := s.start(i, exits)
		if err != nil {
			s.stop(cmds, exits)
			return 1
		}
		cmds = append(cmds, cmd)
	}

	code := 0
	done := make([]bool, len(cmds))
	// restarting holds, per child, the seq of the restart under way or 0.
	restarting := make([]int, len(cmds))
	restartFile := make([]string, len(cmds))
	late := make(chan overdue, len(cmds))
	seq := 0
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case e := <-exits:
			if restarting[e.index] != 0 {
				restarting[e.index] = 0
				awaitGroupGone(cmds[e.index].Process.Pid, groupGoneBound)
				cmd, err := s.start(e.index, exits)
				if err != nil {
					done[e.index] = true
					code = 1
					break loop
				}
				cmds[e.index] = cmd
				s.log.Printf("reloaded %s (restarted %s)", restartFile[e.index], s.children[e.index].name)
				continue
			}
			done[e.index] = true
			s.log.Printf("%s exited: %s", s.children[e.index].name, describe(e.err))
			code = 1
			break loop
		case err := <-stopped:
			s.log.Printf("%v", err)
			code = 1
			break loop
		case r := <-s.reloads:
			i := s.index(r.child)
			switch {
			case i < 0:
				s.log.Printf("cannot reload %s: no child %s", r.file, r.child)
			case r.signal != 0:
				// The workers from before the signal hold every
				// connection let in under the config being replaced.
				var old []proc
				// hack/mutation-check's deny-cut leaves them all running.
				if r.cut && s.cut.workers != nil && !mutated("deny-cut") {
					old = s.cut.workers(cmds[i].Process.Pid)
				}
				if err := cmds[i].Process.Signal(r.signal); err != nil {
					s.log.Printf("cannot reload %s: %v", r.file, err)
					continue
				}
				s.log.Printf("reloaded %s", r.file)
				if !r.cut {
					// Said, so that a test can tell the decision from
					// a cut that is merely late.
					s.log.Printf("%s only added entries: the old %s workers keep their connections", r.file, s.children[i].name)
				}
				if old != nil {
					name, file := s.children[i].name, r.file
					go func() {
						if n := s.cut.cut(ctx, old); ctx.Err() == nil {
							// nginx then reports each connection as an
							// "open socket left" alert.
							s.log.Printf("%s dropped entries: ended %s and the connections they held", file, plural(n, "old "+name+" worker"))
						}
					}()
				}
			case restarting[i] != 0:
				// The restart under way reads the newest file anyway.
			default:
				seq++
				restarting[i] = seq
				restartFile[i] = r.file
				_ = syscall.Kill(-cmds[i].Process.Pid, syscall.SIGTERM)
				due := overdue{i, seq}
				time.AfterFunc(s.grace, func() {
					select {
					case late <- due:
					default:
					}
				})
			}
		case d := <-late:
			if restarting[d.index] == d.seq {
				s.log.Printf("%s did not stop within %v for its restart, killing it", s.children[d.index].name, s.grace)
				_ = syscall.Kill(-cmds[d.index].Process.Pid, syscall.SIGKILL)
			}
		}
	}
	s.stopRemaining(cmds, done, exits)
	return code
}

// awaitGroupGone waits a moment for the stopped child's group to be
// gone: dnsmasq forks a process for each TCP query, which holds its
// listening socket, and a new dnsmasq started while one lives fails on
// "Address already in use" (seen once in
// TestFrontKeepsAnsweringThroughDnsmasqRestarts), ending the router. The
// wait is bounded (a group member the kernel has not reaped yet still
// counts): past it the new child starts as before.
func awaitGroupGone(pgid int, bound time.Duration) {
	for deadline := time.Now().Add(bound); syscall.Kill(-pgid, 0) == nil && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
}

// groupGoneBound bounds awaitGroupGone.
const groupGoneBound = 250 * time.Millisecond

// start starts child i and reports its end on exits.
func (s *supervisor) start(i int, exits chan<- exit) (*exec.Cmd, error) {
	c := s.children[i]
	if len(c.argv) == 0 {
		s.log.Printf("cannot start %s: no command", c.name)
		return nil, errors.New("no command")
	}
	cmd := exec.Command(c.argv[0], c.argv[1:]...)
	cmd.Stdout, cmd.Stderr = s.stdout, s.stderr
	// A group of its own lets us stop the child's children too, and keeps
	// a terminal's ^C from reaching children before we decide.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		s.log.Printf("cannot start %s: %v", c.name, err)
		return nil, err
	}
	go func() { exits <- exit{i, cmd.Wait()} }()
	return cmd, nil
}

func (s *supervisor) index(name string) int {
	for i, c := range s.children {
		if c.name == name {
			return i
		}
	}
	return -1
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

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
