// Package limits is what a session's containers may use of the machine:
// the agent's number of tasks, memory and CPU, and the small fixed limits
// of the router and the forwarder; and which of them this host can
// enforce for a rootless podman.
//
// A rootless container's cgroup limits hold only on cgroup v2 with the
// controller delegated to the user; elsewhere podman drops them with a
// warning nobody sees. The tasks limit has a second means that holds on
// every host: RLIMIT_NPROC, which the kernel counts per user per user
// namespace, and the agent's pod has a user namespace of its own. Memory
// and CPU have none: where their controller is missing the session says
// so, and a flag that asks for one refuses the session.
package limits

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	spec "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Limits is what the agent may use. Zero means no limit.
type Limits struct {
	Pids   int64   // tasks (processes and threads)
	Memory int64   // bytes
	CPUs   float64 // CPUs' worth of time
}

// Asked records which limits the user set by flag: a default that cannot
// hold is reported, an asked-for one that cannot refuses the session.
type Asked struct {
	Pids, Memory, CPUs bool
}

// The agent's defaults: what a developer's laptop survives while the
// agent runs a runaway build or a fork bomb.
const (
	DefaultPids = 4096
	// minPids leaves room for the agent's init, a shell and a build.
	minPids = 32
	// minMemory is where the agent can still start.
	minMemory = 64 << 20
)

// Defaults are the agent's limits on a machine with memTotal bytes of
// memory and cpus CPUs, for a user whose own tasks limit (RLIMIT_NPROC's
// soft value; 0 for none) is userTasks: 4096 tasks, half the memory, all
// CPUs but one. The kernel counts the agent's tasks as the user's too, so
// the agent gets at most half the user's own limit: a fork bomb inside
// leaves the user's shell and desktop the other half.
func Defaults(memTotal int64, cpus int, userTasks uint64) Limits {
	l := Limits{Pids: DefaultPids, Memory: memTotal / 2, CPUs: float64(cpus - 1)}
	if cpus <= 1 {
		l.CPUs = float64(cpus)
	}
	if userTasks > 0 && userTasks/2 < uint64(l.Pids) {
		l.Pids = max(minPids, int64(userTasks/2))
	}
	return l
}

// UserTasks is this process's soft RLIMIT_NPROC, 0 when unlimited.
func UserTasks() uint64 {
	var r unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NPROC, &r) != nil || r.Cur == unix.RLIM_INFINITY {
		return 0
	}
	return r.Cur
}

// Helper limits: the router and the forwarder are small and fixed, so a
// flood the agent makes them handle cannot take the machine.
var (
	Router    = Limits{Pids: 512, Memory: 512 << 20, CPUs: 1}
	Forwarder = Limits{Pids: 256, Memory: 128 << 20, CPUs: 1}
)

// ParsePids reads --pids: a whole number of tasks.
func ParsePids(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < minPids {
		return 0, fmt.Errorf("--pids %s: want a whole number of processes, at least %d, as in --pids 2048", s, minPids)
	}
	return n, nil
}

// ParseMemory reads --memory: bytes, or a number with k, m or g (binary
// units, as podman takes them).
func ParseMemory(s string) (int64, error) {
	bad := fmt.Errorf("--memory %s: want a size such as 4g or 512m (at least 64m)", s)
	num, mult := strings.ToLower(s), int64(1)
	num = strings.TrimSuffix(strings.TrimSuffix(num, "ib"), "b")
	if num != "" {
		switch num[len(num)-1] {
		case 'k':
			mult = 1 << 10
		case 'm':
			mult = 1 << 20
		case 'g':
			mult = 1 << 30
		case 't':
			mult = 1 << 40
		}
		if mult > 1 {
			num = num[:len(num)-1]
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(f) || f <= 0 || f*float64(mult) > math.MaxInt64/2 {
		return 0, bad
	}
	n := int64(f * float64(mult))
	if n < minMemory {
		return 0, bad
	}
	return n, nil
}

// ParseCPUs reads --cpus: a number of CPUs' worth of time, at most the
// machine's.
func ParseCPUs(s string, machine int) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || f < 0.01 || f > float64(machine) {
		return 0, fmt.Errorf("--cpus %s: want a number of CPUs from 0.01 to %d (this machine's), as in --cpus 1.5", s, machine)
	}
	return f, nil
}

// Host is what this machine lets a podman of this user limit.
type Host struct {
	Rootless bool
	CgroupV2 bool
	// Controllers are the cgroup v2 controllers delegated to the user
	// (all of them when not rootless).
	Controllers map[string]bool
}

// Kind is one limit.
type Kind string

const (
	Pids   Kind = "pids"
	Memory Kind = "memory"
	CPU    Kind = "cpu"
)

// Cgroup says whether the kind's cgroup limit holds, and if not why.
func (h Host) Cgroup(k Kind) (bool, string) {
	if !h.Rootless {
		return true, ""
	}
	if !h.CgroupV2 {
		return false, "rootless podman cannot set cgroup limits on cgroup v1"
	}
	if !h.Controllers[string(k)] {
		return false, fmt.Sprintf("the %s cgroup controller is not delegated to your user", k)
	}
	return true, ""
}

// Unenforced lists, for l, the limits that do not hold here, and why (one
// reason for all, the first found). The tasks limit always holds: where
// its cgroup does not, RLIMIT_NPROC does.
func (h Host) Unenforced(l Limits) (kinds []Kind, why string) {
	for _, k := range []Kind{Memory, CPU} {
		if (k == Memory && l.Memory == 0) || (k == CPU && l.CPUs == 0) {
			continue
		}
		if ok, w := h.Cgroup(k); !ok {
			kinds = append(kinds, k)
			if why == "" {
				why = w
			}
		}
	}
	return kinds, why
}

// Refuse is the refusal for a limit the user asked for that cannot hold
// here, or nil.
func (h Host) Refuse(l Limits, asked Asked) error {
	for _, c := range []struct {
		k     Kind
		asked bool
		flag  string
	}{{Memory, asked.Memory && l.Memory > 0, "--memory"}, {CPU, asked.CPUs && l.CPUs > 0, "--cpus"}} {
		if !c.asked {
			continue
		}
		if ok, why := h.Cgroup(c.k); !ok {
			return fmt.Errorf("%s cannot be enforced on this host: %s; run agent-sandbox doctor for how to get it, or leave %s out", c.flag, why, c.flag)
		}
	}
	return nil
}

// cpuPeriod is the CFS period the quota is a share of (podman's default).
const cpuPeriod = 100000

// Resources is the cgroup part of l that holds here, for podman's spec;
// nil if none does (podman would drop it with a warning).
func (h Host) Resources(l Limits) *spec.LinuxResources {
	r := &spec.LinuxResources{}
	set := false
	if ok, _ := h.Cgroup(Pids); ok && l.Pids > 0 {
		r.Pids = &spec.LinuxPids{Limit: l.Pids}
		set = true
	}
	if ok, _ := h.Cgroup(Memory); ok && l.Memory > 0 {
		// No swap beyond the limit: memory+swap is the limit itself.
		r.Memory = &spec.LinuxMemory{Limit: ptr(l.Memory), Swap: ptr(l.Memory)}
		set = true
	}
	if ok, _ := h.Cgroup(CPU); ok && l.CPUs > 0 {
		r.CPU = &spec.LinuxCPU{Quota: ptr(int64(l.CPUs * cpuPeriod)), Period: ptr(uint64(cpuPeriod))}
		set = true
	}
	if !set {
		return nil
	}
	return r
}

// NprocRlimit is l's tasks limit as RLIMIT_NPROC (podman names it "nproc"), for a container whose
// user has a user namespace of its own (the agent's pod): the kernel then
// counts that user's tasks in it, nested containers included, and the
// agent cannot raise the hard limit. Nil when there is no tasks limit.
func NprocRlimit(l Limits) []spec.POSIXRlimit {
	if l.Pids <= 0 {
		return nil
	}
	return []spec.POSIXRlimit{{Type: "nproc", Hard: uint64(l.Pids), Soft: uint64(l.Pids)}}
}

func ptr[T any](v T) *T { return &v }

// cgroupRoot is where the unified hierarchy is mounted.
const cgroupRoot = "/sys/fs/cgroup"

// Probe reads this machine's cgroup setup for the user uid.
func Probe(uid int) Host {
	h := Host{Rootless: uid != 0, Controllers: map[string]bool{}}
	var st unix.Statfs_t
	if unix.Statfs(cgroupRoot, &st) != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		return h
	}
	h.CgroupV2 = true
	own, _ := os.ReadFile("/proc/self/cgroup")
	for _, c := range delegatedControllers(uid, own, os.ReadFile) {
		h.Controllers[c] = true
	}
	return h
}

// delegatedControllers are the controllers rootless podman can use: those
// of the user's systemd manager (podman's containers go under it with the
// systemd cgroup manager), else those of the cgroup we run in (cgroupfs).
func delegatedControllers(uid int, procSelfCgroup []byte, read func(string) ([]byte, error)) []string {
	paths := []string{filepath.Join(cgroupRoot, fmt.Sprintf("user.slice/user-%d.slice/user@%d.service", uid, uid), "cgroup.controllers")}
	sc := bufio.NewScanner(bytes.NewReader(procSelfCgroup))
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			paths = append(paths, filepath.Join(cgroupRoot, filepath.Clean("/"+p), "cgroup.controllers"))
		}
	}
	for _, p := range paths {
		if b, err := read(p); err == nil {
			return strings.Fields(string(b))
		}
	}
	return nil
}

// MemTotal is the machine's memory in bytes, from /proc/meminfo.
func MemTotal() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	return memTotal(b)
}

func memTotal(meminfo []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, err
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("/proc/meminfo has no MemTotal line")
}

// Describe is l as a person reads it: "4096 tasks, 11.7 GiB memory, 1 CPU".
func Describe(l Limits) string {
	var parts []string
	if l.Pids > 0 {
		parts = append(parts, fmt.Sprintf("%d tasks", l.Pids))
	}
	if l.Memory > 0 {
		parts = append(parts, FormatBytes(l.Memory)+" memory")
	}
	if l.CPUs > 0 {
		unit := "CPUs"
		if l.CPUs == 1 {
			unit = "CPU"
		}
		parts = append(parts, strconv.FormatFloat(l.CPUs, 'f', -1, 64)+" "+unit)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// FormatBytes is n in the largest binary unit that keeps a whole number
// or one decimal.
func FormatBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	return strconv.FormatFloat(math.Round(f*10)/10, 'f', -1, 64) + " " + units[i]
}

// Names are kinds as a sentence names them: "memory and CPU".
func Names(kinds []Kind) string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = string(k)
		if k == CPU {
			names[i] = "CPU"
		}
	}
	if len(names) <= 1 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// DescribeHeld is Describe of the limits that hold here, and which do not:
// "4096 tasks (memory and CPU not enforced)".
func (h Host) DescribeHeld(l Limits) string {
	kinds, _ := h.Unenforced(l)
	for _, k := range kinds {
		switch k {
		case Memory:
			l.Memory = 0
		case CPU:
			l.CPUs = 0
		}
	}
	s := Describe(l)
	if len(kinds) > 0 {
		s += " (" + Names(kinds) + " not enforced)"
	}
	return s
}
