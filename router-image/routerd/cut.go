package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// When an allowlist edit removes an entry, an agent's open connection to
// it must stop, not live on in the nginx worker that accepted it. After
// SIGHUP nginx's old workers keep every connection they hold until it
// ends, and nginx cannot tell a removed entry's connections from the
// others: worker_shutdown_timeout would close them all on every reload,
// also when the edit only added hosts. So routerd ends the old workers
// itself, and only after a reload whose config drops a line of the one
// they run: their connections to hosts that stay allowed are closed too,
// and clients reconnect to the new worker. The forwarder, in the pod,
// closes the relays of removed pairs at once; this catches what it
// cannot tell apart (every name without a port entry shares 127.0.0.1:443)
// and connections made to the router directly.

const (
	// cutGrace is how long the old workers get to finish what they were
	// doing (a response in flight) before they are ended.
	cutGrace = time.Second
	// cutPatience bounds the wait for nginx to tell the old workers to
	// quit, which shows in their title: ending one before that would
	// have the master start it again with the config it runs.
	cutPatience = 5 * time.Second
	cutPoll     = 20 * time.Millisecond
)

// proc is a process, told apart from a later one with the same pid by
// its start time.
type proc struct {
	pid   int
	start uint64
}

// childrenOf lists the processes whose parent is ppid.
func childrenOf(ppid int) []proc {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var out []proc
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if parent, start, ok := procStat(pid); ok && parent == ppid {
			out = append(out, proc{pid, start})
		}
	}
	return out
}

// procStat reads a running process's parent and start time from
// /proc/PID/stat, whose second field, the command name in parentheses,
// may hold spaces and parentheses itself. A zombie does not count.
func procStat(pid int) (ppid int, start uint64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	// After the name: state (3), ppid (4), ... starttime (22).
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0, 0, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	return ppid, start, err1 == nil && err2 == nil
}

// alive says whether p still runs as the same process.
func (p proc) alive() bool {
	_, start, ok := procStat(p.pid)
	return ok && start == p.start
}

// nginxShuttingDown says whether nginx has told the worker pid to quit:
// it then calls itself "nginx: worker process is shutting down".
func nginxShuttingDown(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return err == nil && bytes.Contains(b, []byte("shutting down"))
}

// cutter ends a child's old workers after a reload; its fields are
// replaced in tests.
type cutter struct {
	grace, patience time.Duration
	workers         func(master int) []proc
	quitting        func(pid int) bool
}

var nginxCutter = cutter{grace: cutGrace, patience: cutPatience, workers: childrenOf, quitting: nginxShuttingDown}

// cut waits grace, and until nginx has told each of old to quit (at most
// patience more), then sends SIGTERM to those still running, on which an
// nginx worker exits at once, closing its connections. It returns how
// many it ended.
func (c cutter) cut(ctx context.Context, old []proc) int {
	t := time.NewTimer(c.grace)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return 0
	case <-t.C:
	}
	deadline := time.Now().Add(c.patience)
	n := 0
	for _, p := range old {
		for p.alive() && !c.quitting(p.pid) && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return n
			case <-time.After(cutPoll):
			}
		}
		if p.alive() && syscall.Kill(p.pid, syscall.SIGTERM) == nil {
			n++
		}
	}
	return n
}
