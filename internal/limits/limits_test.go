package limits

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestDefaults(t *testing.T) {
	for _, c := range []struct {
		mem   int64
		cpus  int
		tasks uint64
		want  Limits
	}{
		{24 << 30, 2, 0, Limits{Pids: 4096, Memory: 12 << 30, CPUs: 1}},
		{8 << 30, 8, 95000, Limits{Pids: 4096, Memory: 4 << 30, CPUs: 7}},
		// One CPU: the agent gets it, not none.
		{2 << 30, 1, 0, Limits{Pids: 4096, Memory: 1 << 30, CPUs: 1}},
		// A user limited to 4096 tasks (RHEL's default): half for the agent.
		{8 << 30, 4, 4096, Limits{Pids: 2048, Memory: 4 << 30, CPUs: 3}},
		{8 << 30, 4, 10, Limits{Pids: 32, Memory: 4 << 30, CPUs: 3}},
	} {
		if got := Defaults(c.mem, c.cpus, c.tasks); got != c.want {
			t.Errorf("Defaults(%d, %d, %d) = %+v, want %+v", c.mem, c.cpus, c.tasks, got, c.want)
		}
	}
}

func TestParse(t *testing.T) {
	for in, want := range map[string]int64{"4g": 4 << 30, "512m": 512 << 20, "512MiB": 512 << 20, "1.5G": 3 << 29, "67108864": 64 << 20, "1t": 1 << 40} {
		if got, err := ParseMemory(in); err != nil || got != want {
			t.Errorf("ParseMemory(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "g", "-1g", "10m", "lots", "NaN", "1e30g", "4x"} {
		if _, err := ParseMemory(in); err == nil || !strings.Contains(err.Error(), "--memory "+in+":") {
			t.Errorf("ParseMemory(%q): %v, want a refusal naming it", in, err)
		}
	}
	if n, err := ParsePids("2048"); err != nil || n != 2048 {
		t.Errorf("ParsePids(2048) = %d, %v", n, err)
	}
	for _, in := range []string{"0", "31", "-5", "many", "1.5"} {
		if _, err := ParsePids(in); err == nil {
			t.Errorf("ParsePids(%q) accepted", in)
		}
	}
	if f, err := ParseCPUs("1.5", 2); err != nil || f != 1.5 {
		t.Errorf("ParseCPUs(1.5) = %v, %v", f, err)
	}
	for _, in := range []string{"0", "3", "-1", "NaN", "one"} {
		if _, err := ParseCPUs(in, 2); err == nil || !strings.Contains(err.Error(), "to 2 (this machine's)") {
			t.Errorf("ParseCPUs(%q, 2): %v", in, err)
		}
	}
}

var (
	v1       = Host{Rootless: true}
	v2       = Host{Rootless: true, CgroupV2: true, Controllers: map[string]bool{"cpu": true, "memory": true, "pids": true}}
	v2NoMem  = Host{Rootless: true, CgroupV2: true, Controllers: map[string]bool{"cpu": true, "pids": true}}
	rootV1   = Host{}
	defaults = Limits{Pids: 4096, Memory: 1 << 30, CPUs: 1}
)

func TestWhatHoldsWhere(t *testing.T) {
	for _, c := range []struct {
		name  string
		h     Host
		kinds []Kind
		why   string
		res   bool // cgroup resources set at all
	}{
		{"rootless cgroup v1", v1, []Kind{Memory, CPU}, "cgroup v1", false},
		{"rootless cgroup v2, delegated", v2, nil, "", true},
		{"rootless cgroup v2, no memory controller", v2NoMem, []Kind{Memory}, "memory cgroup controller is not delegated", true},
		{"root", rootV1, nil, "", true},
	} {
		kinds, why := c.h.Unenforced(defaults)
		if !reflect.DeepEqual(kinds, c.kinds) || !strings.Contains(why, c.why) {
			t.Errorf("%s: unenforced %v (%q), want %v (%q)", c.name, kinds, why, c.kinds, c.why)
		}
		r := c.h.Resources(defaults)
		if (r != nil) != c.res {
			t.Errorf("%s: resources %+v", c.name, r)
		}
		if r != nil && r.Memory != nil && (*r.Memory.Limit != 1<<30 || *r.Memory.Swap != 1<<30) {
			t.Errorf("%s: memory %+v, want limit = swap = 1 GiB", c.name, r.Memory)
		}
		if r != nil && c.h.Controllers["memory"] != (r.Memory != nil) && c.h.Rootless {
			t.Errorf("%s: a memory limit asked of podman that cannot hold", c.name)
		}
	}
	r := v2.Resources(defaults)
	if r.Pids.Limit != 4096 || *r.CPU.Quota != 100000 || *r.CPU.Period != 100000 {
		t.Errorf("resources %+v %+v %+v", r.Pids, r.CPU, r.Memory)
	}
	// The tasks limit holds everywhere, through RLIMIT_NPROC.
	if got := NprocRlimit(defaults); len(got) != 1 || got[0].Type != "nproc" || got[0].Hard != 4096 || got[0].Soft != 4096 {
		t.Errorf("NprocRlimit = %+v", got)
	}
}

func TestAnAskedLimitThatCannotHoldRefuses(t *testing.T) {
	err := v1.Refuse(defaults, Asked{Memory: true})
	if err == nil || !strings.Contains(err.Error(), "--memory cannot be enforced on this host: rootless podman cannot set cgroup limits on cgroup v1") || !strings.Contains(err.Error(), "agent-sandbox doctor") {
		t.Errorf("v1, --memory: %v", err)
	}
	if err := v1.Refuse(defaults, Asked{CPUs: true}); err == nil || !strings.Contains(err.Error(), "--cpus") {
		t.Errorf("v1, --cpus: %v", err)
	}
	// Tasks hold everywhere; defaults never refuse.
	for _, h := range []Host{v1, v2, v2NoMem, rootV1} {
		if err := h.Refuse(defaults, Asked{Pids: true}); err != nil {
			t.Errorf("%+v, --pids: %v", h, err)
		}
		if err := h.Refuse(defaults, Asked{}); err != nil {
			t.Errorf("%+v, defaults: %v", h, err)
		}
	}
	if err := v2NoMem.Refuse(defaults, Asked{Memory: true, CPUs: true}); err == nil || !strings.Contains(err.Error(), "memory cgroup controller") {
		t.Errorf("v2 without memory, --memory: %v", err)
	}
	if err := v2.Refuse(defaults, Asked{Memory: true, CPUs: true}); err != nil {
		t.Errorf("v2, --memory --cpus: %v", err)
	}
}

func TestDelegatedControllers(t *testing.T) {
	files := map[string]string{
		"/sys/fs/cgroup/user.slice/user-1001.slice/user@1001.service/cgroup.controllers": "cpu memory pids\n",
		"/sys/fs/cgroup/own/scope/cgroup.controllers":                                    "pids\n",
	}
	read := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, errors.New("no such file")
	}
	if got := delegatedControllers(1001, []byte("0::/own/scope\n"), read); !reflect.DeepEqual(got, []string{"cpu", "memory", "pids"}) {
		t.Errorf("systemd user manager: %v", got)
	}
	if got := delegatedControllers(1002, []byte("0::/own/scope\n"), read); !reflect.DeepEqual(got, []string{"pids"}) {
		t.Errorf("own cgroup: %v", got)
	}
	if got := delegatedControllers(1002, []byte("4:memory:/x\n"), read); got != nil {
		t.Errorf("cgroup v1 membership: %v", got)
	}
}

func TestMemTotalAndDescribe(t *testing.T) {
	n, err := memTotal([]byte("MemFree: 1 kB\nMemTotal:       24576000 kB\n"))
	if err != nil || n != 24576000<<10 {
		t.Errorf("memTotal = %d, %v", n, err)
	}
	if _, err := memTotal([]byte("nothing\n")); err == nil {
		t.Error("no MemTotal accepted")
	}
	if got := Describe(Limits{Pids: 4096, Memory: 12 << 30, CPUs: 1}); got != "4096 tasks, 12 GiB memory, 1 CPU" {
		t.Errorf("Describe = %q", got)
	}
	if got := Describe(Limits{Pids: 64, Memory: 1536 << 20, CPUs: 1.5}); got != "64 tasks, 1.5 GiB memory, 1.5 CPUs" {
		t.Errorf("Describe = %q", got)
	}
	if got := v1.DescribeHeld(defaults); got != "4096 tasks (memory and CPU not enforced)" {
		t.Errorf("DescribeHeld on cgroup v1 = %q", got)
	}
	if got := v2NoMem.DescribeHeld(defaults); got != "4096 tasks, 1 CPU (memory not enforced)" {
		t.Errorf("DescribeHeld without memory = %q", got)
	}
}
