package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// runPerfSplit reads `perf script --show-task-events -F comm,pid,tid` of a
// machine-wide recording and prints, as sample lines, the CPU time and the
// number of processes started of each part of a session. perf's own view
// (--sort comm) cannot tell the launcher's podman service from the podman
// processes conmon runs as each container's exit command; the parent does.
func runPerfSplit(args []string) error {
	fs := flag.NewFlagSet("perfsplit", flag.ContinueOnError)
	hz := fs.Float64("hz", 999, "the sampling frequency perf record used (-F)")
	launcher := fs.String("launcher", "agent-sandbox", "the launcher's command name")
	if err := fs.Parse(args); err != nil {
		return err
	}
	split, err := splitPerf(os.Stdin, *launcher)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	for _, c := range cpuParts {
		fmt.Fprintf(w, "sesscpu_%s_s %.3f\n", c.key, float64(split.samples[c.key])/(*hz))
		if c.counted {
			fmt.Fprintf(w, "sessexec_%s %d\n", c.key, split.started[c.key])
		}
	}
	return nil
}

// cpuParts are the parts of a session's CPU time, in the report's order.
var cpuParts = []struct {
	key, name string
	counted   bool // the report gives how many processes of it started
}{
	{"service", "podman API service (the launcher's own)", false},
	{"cleanup", "`podman container cleanup`: each container's exit command, run by conmon", true},
	{"runc", "runc (create, init, start, kill, delete)", true},
	{"conmon", "conmon (a monitor per container)", true},
	{"network", "netavark, iptables, aardvark-dns", true},
	{"launcher", "the launcher (agent-sandbox)", false},
	{"containers", "the containers' own processes (routerd, dnsmasq, nginx, forwarder, catatonit, podman-init, the agent's command)", false},
	{"kernel", "kernel threads (kworker, ksoftirqd, rcu, …)", false},
	{"other", "everything else on the machine (perf, the harness, other users)", false},
	{"idle", "idle", false},
}

type perfSplit struct {
	samples map[string]int
	started map[string]int
}

var (
	// PERF_RECORD_FORK(child_pid:child_tid):(parent_pid:parent_tid)
	forkLine = regexp.MustCompile(`PERF_RECORD_FORK\((\d+):(\d+)\):\((\d+):(\d+)\)`)
	// PERF_RECORD_COMM exec: name:pid/tid
	execLine = regexp.MustCompile(`PERF_RECORD_COMM exec: (.*):(\d+)/(\d+)$`)
)

func splitPerf(r io.Reader, launcher string) (perfSplit, error) {
	s := perfSplit{samples: map[string]int{}, started: map[string]int{}}
	// The comm of the process that forked each process, at the fork.
	parentComm := map[int]string{}
	parentPid := map[int]int{}
	// An exit command's own children (podman re-executing itself) are part
	// of it.
	exitCommand := map[int]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		comm, pid, ok := perfCommPid(line)
		if !ok {
			if strings.TrimSpace(line) == "" {
				continue
			}
			return s, fmt.Errorf("perf script line %d: want COMM PID/TID, got %q", n, line)
		}
		if m := forkLine.FindStringSubmatch(line); m != nil {
			child, _ := strconv.Atoi(m[1])
			parent, _ := strconv.Atoi(m[3])
			if child != parent { // a process, not a thread
				parentComm[child], parentPid[child] = comm, parent
			}
			continue
		}
		if m := execLine.FindStringSubmatch(line); m != nil {
			p, _ := strconv.Atoi(m[2])
			part := cpuPart(m[1], p, parentComm, parentPid, exitCommand, launcher)
			s.started[part]++
			continue
		}
		if strings.Contains(line, "PERF_RECORD_") {
			continue
		}
		s.samples[cpuPart(comm, pid, parentComm, parentPid, exitCommand, launcher)]++
	}
	return s, sc.Err()
}

// perfCommPid splits "COMM PID/TID ..." (COMM may hold spaces).
func perfCommPid(line string) (string, int, bool) {
	f := strings.Fields(line)
	for i := 1; i < len(f); i++ {
		pidTid := strings.SplitN(f[i], "/", 2)
		if len(pidTid) != 2 {
			continue
		}
		pid, err1 := strconv.Atoi(pidTid[0])
		_, err2 := strconv.Atoi(pidTid[1])
		if err1 == nil && err2 == nil {
			return strings.Join(f[:i], " "), pid, true
		}
	}
	return "", 0, false
}

func cpuPart(comm string, pid int, parentComm map[int]string, parentPid map[int]int, exitCommand map[int]bool, launcher string) string {
	switch {
	case pid == 0:
		return "idle"
	case comm == "podman":
		if exitCommand[pid] || parentComm[pid] == "conmon" || exitCommand[parentPid[pid]] {
			exitCommand[pid] = true
			return "cleanup"
		}
		return "service"
	case strings.HasPrefix(comm, "runc") || comm == "exe" || strings.HasPrefix(comm, "memfd:"):
		return "runc"
	case comm == "conmon":
		return "conmon"
	case comm == "netavark" || comm == "iptables" || comm == "ip6tables" || comm == "aardvark-dns" ||
		comm == "tokio-runtime-w" || comm == "slirp4netns" || comm == "rootlessport":
		return "network"
	case comm == launcher || strings.HasPrefix(launcher, comm) && len(comm) == 15:
		return "launcher"
	case comm == "routerd" || comm == "dnsmasq" || comm == "nginx" || comm == "forwarder" ||
		comm == "catatonit" || comm == "podman-init" || comm == "true" || comm == "date":
		return "containers"
	case pid == 2 || parentPid[pid] == 2 || strings.HasPrefix(comm, "kworker/") || strings.HasPrefix(comm, "ksoftirqd/") ||
		strings.HasPrefix(comm, "rcu_") || strings.HasPrefix(comm, "migration/") || strings.HasPrefix(comm, "kdamond") ||
		strings.HasPrefix(comm, "cpuhp/") || strings.HasPrefix(comm, "idle_inject/"):
		return "kernel"
	}
	return "other"
}
