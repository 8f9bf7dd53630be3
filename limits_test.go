package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/limits"
	"github.com/agent-sandbox/agent-sandbox/internal/routerlog"
)

var (
	cgroupV1Machine = machine{memTotal: 24 << 30, cpus: 2, limits: limits.Host{Rootless: true}}
	cgroupV2Machine = machine{memTotal: 24 << 30, cpus: 2, limits: limits.Host{Rootless: true, CgroupV2: true,
		Controllers: map[string]bool{"cpu": true, "memory": true, "pids": true}}}
)

func TestLaunchArgsTakeLimits(t *testing.T) {
	la, err := parseLaunchArgs([]string{"--pids", "512", "--memory=2g", "--cpus", "1", "--exec", "true"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if la.limits != (limits.Limits{Pids: 512, Memory: 2 << 30, CPUs: 1}) || la.asked != (limits.Asked{Pids: true, Memory: true, CPUs: true}) {
		t.Errorf("limits %+v asked %+v", la.limits, la.asked)
	}
	for args, want := range map[string]string{
		"--pids":          "--pids needs a number of processes, as in: agent-sandbox --pids 2048",
		"--memory 1k":     "--memory 1k: want a size such as 4g or 512m",
		"--cpus 0":        "--cpus 0: want a number of CPUs from 0.01 to",
		"--pids lots":     "--pids lots: want a whole number of processes",
		"--memory":        "--memory needs a size",
		"--cpus=":         "--cpus : want a number",
		"--pids 8 --exec": "--pids 8: want a whole number of processes, at least 32",
	} {
		if _, err := parseLaunchArgs(strings.Fields(args), nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
}

func TestSessionLimits(t *testing.T) {
	l, _, note, err := sessionLimits(cgroupV1Machine, launchArgs{})
	if err != nil || l != (limits.Limits{Pids: 4096, Memory: 12 << 30, CPUs: 1}) {
		t.Fatalf("defaults on cgroup v1: %+v, %v", l, err)
	}
	if want := "the memory and CPU limits are not enforced here: rootless podman cannot set cgroup limits on cgroup v1 (the limit of 4096 processes holds); agent-sandbox doctor says how to get them"; note != want {
		t.Errorf("note %q, want %q", note, want)
	}
	if _, _, _, err := sessionLimits(cgroupV1Machine, launchArgs{limits: limits.Limits{Memory: 4 << 30}, asked: limits.Asked{Memory: true}}); err == nil || !strings.Contains(err.Error(), "--memory cannot be enforced on this host") {
		t.Errorf("--memory on cgroup v1: %v", err)
	}
	l, _, _, err = sessionLimits(cgroupV1Machine, launchArgs{limits: limits.Limits{Pids: 100}, asked: limits.Asked{Pids: true}})
	if err != nil || l.Pids != 100 || l.Memory != 12<<30 {
		t.Errorf("--pids 100 on cgroup v1: %+v, %v", l, err)
	}
	l, _, note, err = sessionLimits(cgroupV2Machine, launchArgs{limits: limits.Limits{Memory: 4 << 30, CPUs: 0.5}, asked: limits.Asked{Memory: true, CPUs: true}})
	if err != nil || l != (limits.Limits{Pids: 4096, Memory: 4 << 30, CPUs: 0.5}) || note != "" {
		t.Errorf("cgroup v2: %+v, %v, note %q", l, err, note)
	}
}

func TestTheLimitsNoteIsSaidOnceTheSessionRuns(t *testing.T) {
	eng := newFakeEngine()
	cfg := testConfig(t)
	cfg.limitsNote = "the memory and CPU limits are not enforced here"
	_, out := runSession(context.Background(), eng, cfg)
	if strings.Count(out(), "agent-sandbox: the memory and CPU limits are not enforced here\n") != 1 {
		t.Errorf("said:\n%s", out())
	}
}

func TestSessionSpecsCarryTheLimits(t *testing.T) {
	for _, m := range []machine{cgroupV1Machine, cgroupV2Machine} {
		eng := newFakeEngine()
		cfg := testConfig(t)
		cfg.limits, cfg.host = limits.Limits{Pids: 300, Memory: 1 << 30, CPUs: 1}, m.limits
		runSession(context.Background(), eng, cfg)
		a := eng.containers[testSession+"-claude"]
		f := eng.containers[testSession+"-forwarder"]
		r := eng.containers[testSession+"-router"]
		if len(a.Rlimits) != 1 || a.Rlimits[0].Type != "nproc" || a.Rlimits[0].Hard != 300 {
			t.Errorf("agent rlimits %+v, want nproc 300 on every host", a.Rlimits)
		}
		if a.OOMScoreAdj == nil || *a.OOMScoreAdj != agentOOMScoreAdj {
			t.Errorf("agent OOM score adj %v", a.OOMScoreAdj)
		}
		if len(f.Rlimits) != 1 || f.Rlimits[0].Hard != uint64(limits.Forwarder.Pids) {
			t.Errorf("forwarder rlimits %+v", f.Rlimits)
		}
		if len(r.Rlimits) != 0 {
			t.Errorf("router rlimits %+v: its root's count is shared", r.Rlimits)
		}
		if !m.limits.CgroupV2 {
			// podman would drop them with a warning no one reads.
			if a.ResourceLimits != nil || r.ResourceLimits != nil || f.ResourceLimits != nil {
				t.Errorf("cgroup v1: cgroup limits asked of podman: %+v %+v %+v", a.ResourceLimits, r.ResourceLimits, f.ResourceLimits)
			}
			continue
		}
		if a.ResourceLimits == nil || a.ResourceLimits.Pids.Limit != 300 || *a.ResourceLimits.Memory.Limit != 1<<30 || *a.ResourceLimits.CPU.Quota != 100000 {
			t.Errorf("agent resources %+v", a.ResourceLimits)
		}
		if r.ResourceLimits == nil || *r.ResourceLimits.Memory.Limit != limits.Router.Memory || r.ResourceLimits.Pids.Limit != limits.Router.Pids {
			t.Errorf("router resources %+v", r.ResourceLimits)
		}
		if f.ResourceLimits == nil || *f.ResourceLimits.Memory.Limit != limits.Forwarder.Memory {
			t.Errorf("forwarder resources %+v", f.ResourceLimits)
		}
	}
}

func TestDoctorLimits(t *testing.T) {
	r := checkLimits(cgroupV1Machine)
	if !r.warning || !r.ok() || !strings.Contains(r.problem, "memory and CPU limits are not enforced: rootless podman cannot set cgroup limits on cgroup v1") || !strings.Contains(r.fix, "systemd.unified_cgroup_hierarchy=1") || !strings.Contains(r.fix, "Delegate=") {
		t.Errorf("cgroup v1: %+v", r)
	}
	noMem := cgroupV2Machine
	noMem.limits.Controllers = map[string]bool{"pids": true, "cpu": true}
	if r := checkLimits(noMem); !r.warning || !strings.Contains(r.problem, "memory cgroup controller is not delegated") || strings.Contains(r.fix, "unified_cgroup") {
		t.Errorf("cgroup v2 without memory: %+v", r)
	}
	if r := checkLimits(cgroupV2Machine); r.warning || !r.ok() || !strings.Contains(r.detail, "4096 tasks, 12 GiB memory, 1 CPU") {
		t.Errorf("cgroup v2: %+v", r)
	}
	var out bytes.Buffer
	checkLimits(cgroupV1Machine).print(&out)
	if !strings.HasPrefix(out.String(), "warn limits: ") || !strings.Contains(out.String(), "\n     fix: ") {
		t.Errorf("printed %q", out.String())
	}
}

func TestLogsAreBoundedAndTheReportReadsTheTail(t *testing.T) {
	eng := newFakeEngine()
	runSession(context.Background(), eng, testConfig(t))
	for _, c := range []string{"-router", "-forwarder", "-claude"} {
		spec := eng.containers[testSession+c]
		if spec.LogConfiguration == nil || spec.LogConfiguration.Size != containerLogMax {
			t.Errorf("%s: log configuration %+v, want a size bound", c, spec.LogConfiguration)
		}
	}
	if d := eng.containers[testSession+"-router"].LogConfiguration.Driver; d != "k8s-file" {
		t.Errorf("router log driver %q, want k8s-file (bounded, no dropped lines)", d)
	}
	got := eng.logLines[testSession+"-router"]
	if len(got) == 0 {
		t.Fatal("the exit report did not read the router's log")
	}
	for _, n := range got {
		if n <= 0 || n > routerReportLines {
			t.Errorf("the router's log read with %d lines, want its tail (at most %d)", n, routerReportLines)
		}
	}
}

func TestALongRouterLogIsSaidToBeCut(t *testing.T) {
	for _, whole := range []bool{true, false} {
		eng := newFakeEngine()
		cfg := testConfig(t)
		log := strings.Repeat("dnsmasq: query[A] x.test from 10.89.7.3\n", 10)
		if whole {
			log = routerlog.StartLine + "\n" + log
		}
		eng.logs = map[string]string{testSession + "-router": log}
		_, out := runSession(context.Background(), eng, cfg)
		if cut := strings.Contains(out(), "the router's log does not reach back to its start"); cut == whole {
			t.Errorf("whole %v: said cut = %v:\n%s", whole, cut, out())
		}
	}
}
