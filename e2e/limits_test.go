//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The agent's limits (issue 24): a tasks limit that holds on every host,
// and memory and CPU limits where rootless podman can set them.

func TestLimits(t *testing.T) {
	runSecRows(t, secRow{51, "a fork bomb in the agent (nested user namespaces included) is stopped by its tasks limit; the host can still start processes", rowForkBomb})
	row(t, "limits: visible in podman inspect; where memory and CPU cannot be enforced the session says so once and --memory, --cpus refuse", rowLimitsShown)
	row(t, "a flood of lookups past the router log's size (or the lines the report reads) is said in the exit report, not hidden", rowLogFlood)
}

// dnsFlood sends N lookups of NAME to the pod's resolver, 128 at a time.
const dnsFlood = `import socket, struct, sys
name, n = sys.argv[1], int(sys.argv[2])
ns = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
def q(qid):
    b = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    return struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + b + struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect((ns, 53)); s.settimeout(0.5)
sent = 0
while sent < n:
    for i in range(128):
        s.send(q((sent + i) & 0xffff))
    sent += 128
    for i in range(128):
        try: s.recv(512)
        except socket.timeout: break
print("flooded", sent)
`

func rowLogFlood(t *testing.T) {
	nonce := newNonce(t)
	// A blocked name first, then a flood of an allowed one: the blocked
	// name is cut from the log, and the report must say it is partial.
	script := "getent hosts blocked-" + nonce + ".test; cat > flood.py <<'EOF'\n" + dnsFlood + "EOF\npython3 flood.py allowed.test 50000"
	r := runSession(t, sessionOpts{Cmd: []string{"sh", "-c", script}})
	wantCode(t, r, 0)
	const cut = "the router's log does not reach back to its start"
	if !strings.Contains(r.Stderr(), cut) {
		t.Errorf("after a flood the exit report does not say it is partial:\n%s", indent(r.Stderr()))
	}
	// Opened path: the same blocked name without the flood is reported,
	// and nothing is said to be cut.
	o := runSession(t, sessionOpts{Cmd: []string{"sh", "-c", "getent hosts blocked-" + nonce + ".test; true"}})
	wantCode(t, o, 0)
	if strings.Contains(o.Stderr(), cut) || !strings.Contains(o.Stderr(), "blocked-"+nonce+".test") {
		t.Errorf("without a flood: the report is said to be cut, or lacks the blocked name:\n%s", indent(o.Stderr()))
	}
}

// forkBomb forks up to 200 children that sleep, then reports how many it
// got and the error that stopped it; it kills them before it exits.
const forkBomb = `import os, signal, time, errno
kids, err = [], ""
for i in range(200):
    try:
        pid = os.fork()
    except OSError as e:
        err = errno.errorcode.get(e.errno, str(e.errno)); break
    if pid == 0:
        time.sleep(60); os._exit(0)
    kids.append(pid)
print("%s started=%d refused=%s" % (os.environ.get("WHERE", "top"), len(kids), err or "none"), flush=True)
for k in kids: os.kill(k, signal.SIGKILL)
for k in kids: os.waitpid(k, 0)
`

// forkResult reads "WHERE started=N refused=E" from out.
func forkResult(out, where string) (started int, refused string, ok bool) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == where {
			n, err := strconv.Atoi(strings.TrimPrefix(f[1], "started="))
			return n, strings.TrimPrefix(f[2], "refused="), err == nil
		}
	}
	return 0, "", false
}

func rowForkBomb(t *testing.T, ev *evidence) {
	// In the agent, and in a user namespace of its own inside it, where
	// the agent is root.
	script := "python3 -c '" + forkBomb + "'; WHERE=nested unshare -r python3 -c '" + forkBomb + "'"
	r := runSession(t, sessionOpts{Args: []string{"--pids", "64", "--exec", "sh", "-c", script}})
	wantCode(t, r, 0)
	for _, where := range []string{"top", "nested"} {
		n, refused, ok := forkResult(r.Stdout(), where)
		if !ok {
			t.Errorf("%s: no report from the fork bomb; stdout:\n%s", where, indent(r.Stdout()))
			continue
		}
		// The reason the row expects: fork(2) refused for the tasks limit.
		if refused != "EAGAIN" || n >= 64 {
			t.Errorf("%s: the fork bomb started %d processes and was stopped by %q, want fewer than 64 and EAGAIN", where, n, refused)
		}
	}
	// The host, meanwhile and after, still starts processes as the user.
	if out, err := exec.Command("sh", "-c", "echo alive").Output(); err != nil || strings.TrimSpace(string(out)) != "alive" {
		t.Errorf("the host could not start a process as the user after the fork bomb: %v %q", err, out)
	}
	// Opened path: with a limit above the bomb's size, every fork succeeds.
	o := runSession(t, sessionOpts{Args: []string{"--pids", "1000", "--exec", "sh", "-c", script}})
	wantCode(t, o, 0)
	for _, where := range []string{"top", "nested"} {
		if n, refused, ok := forkResult(o.Stdout(), where); !ok || n != 200 || refused != "none" {
			t.Errorf("opened path, %s: started %d (%q), want all 200", where, n, refused)
		}
	}
	if !t.Failed() {
		top, _, _ := forkResult(r.Stdout(), "top")
		nested, _, _ := forkResult(r.Stdout(), "nested")
		ev.add("--pids 64: a 200-process fork bomb got %d children (EAGAIN), and %d in a nested user namespace; the host forks after; with --pids 1000 all 200 start (opened path)", top, nested)
	}
}

// cgroupV1 says whether this host has no unified cgroup hierarchy, where
// rootless podman sets no cgroup limit.
func cgroupV1(t *testing.T) bool {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		t.Fatal(err)
	}
	return st.Type != unix.CGROUP2_SUPER_MAGIC
}

func rowLimitsShown(t *testing.T) {
	v1 := cgroupV1(t)
	l := startLauncher(t, sessionOpts{Trace: true, Args: []string{"--pids", "300", "--exec", "sh", "-c", "touch ready; i=0; while [ ! -e done ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done"}})
	if !l.waitFile("ready", 60*time.Second) {
		l.signal(unix.SIGTERM)
		l.wait()
		t.Fatal("the session did not start")
	}
	out, err := podman("container", "inspect", "--format", "{{json .HostConfig}}", l.sessionName()+"-claude")
	if err := os.WriteFile(filepath.Join(l.Dir, "done"), nil, 0o644); err != nil {
		t.Error(err)
	}
	l.wait()
	l.wantCode(0)
	if err != nil {
		t.Fatalf("podman inspect: %v", err)
	}
	var hc struct {
		Ulimits []struct {
			Name       string
			Soft, Hard uint64
		}
		OomScoreAdj int
		Memory      int64
		PidsLimit   int64
		NanoCpus    int64
		CpuQuota    int64
	}
	if err := json.Unmarshal([]byte(out), &hc); err != nil {
		t.Fatalf("inspect output: %v\n%s", err, out)
	}
	nproc := false
	for _, u := range hc.Ulimits {
		if u.Name == "RLIMIT_NPROC" && u.Soft == 300 && u.Hard == 300 {
			nproc = true
		}
	}
	if !nproc || hc.OomScoreAdj != 500 {
		t.Errorf("inspect: ulimits %+v, OOM score adj %d; want RLIMIT_NPROC 300 and 500", hc.Ulimits, hc.OomScoreAdj)
	}
	warning := "the memory and CPU limits are not enforced here: rootless podman cannot set cgroup limits on cgroup v1 (the limit of 300 processes holds)"
	if v1 {
		if strings.Count(l.Stderr(), warning) != 1 {
			t.Errorf("cgroup v1: the session did not say once that memory and CPU are not limited:\n%s", indent(l.Stderr()))
		}
		if hc.Memory != 0 || hc.CpuQuota != 0 {
			t.Errorf("cgroup v1: podman shows memory %d and CPU quota %d, which cannot hold here", hc.Memory, hc.CpuQuota)
		}
		before := podmanInventory(t)
		for _, flag := range []string{"--memory=1g", "--cpus=1"} {
			name, _, _ := strings.Cut(flag, "=")
			r := runSession(t, sessionOpts{Args: []string{flag, "--exec", "echo", "ran"}})
			wantCode(t, r, 1)
			if want := name + " cannot be enforced on this host: rootless podman cannot set cgroup limits on cgroup v1; run agent-sandbox doctor"; !strings.Contains(r.Stderr(), want) || strings.Contains(r.Stdout(), "ran") {
				t.Errorf("%s on cgroup v1: stderr lacks %q (or the command ran):\n%s", flag, want, indent(r.Stderr()))
			}
		}
		if after := podmanInventory(t); strings.Join(after, "\n") != strings.Join(before, "\n") {
			t.Errorf("a refused limit created objects:\nbefore %v\nafter %v", before, after)
		}
		return
	}
	// A host that delegates the controllers: the limits hold and show.
	if strings.Contains(l.Stderr(), "not enforced here") {
		t.Errorf("cgroup v2: the session says limits are not enforced:\n%s", indent(l.Stderr()))
	}
	if hc.PidsLimit != 300 || hc.Memory == 0 || hc.CpuQuota == 0 {
		t.Errorf("cgroup v2: inspect shows pids %d, memory %d, CPU quota %d", hc.PidsLimit, hc.Memory, hc.CpuQuota)
	}
}
