//go:build e2e

package e2e

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// createVolume makes a home volume before a baseline is taken, so that the
// first session does not change the count.
func createVolume(t *testing.T) string {
	t.Helper()
	name := homeVolume(t)
	if _, err := podman("volume", "create", name); err != nil {
		t.Fatal(err)
	}
	return name
}

// inventory is what a user's podman and runtime dir hold, by kind: the leak
// check compares it before and after, in the style of podman's own tests.
type inventory map[string][]string

var inventoryKinds = []string{"containers", "pods", "networks", "volumes", "images", "netns", "mounts", "firewall", "sockets", "runtime dirs", "tmp files", "processes"}

func takeInventory(t *testing.T) inventory {
	t.Helper()
	inv := inventory{}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
	)
	// Side by side: the podman CLI is slow to start on a busy machine.
	for kind, q := range map[string][]string{
		"containers": {"ps", "-a", "--format", "{{.Names}}"},
		"pods":       {"pod", "ps", "--format", "{{.Name}}"},
		"networks":   {"network", "ls", "--format", "{{.Name}}"},
		"volumes":    {"volume", "ls", "--format", "{{.Name}}"},
		"images":     {"images", "-a", "--noheading", "--format", "{{.ID}} {{.Repository}}:{{.Tag}}"},
	} {
		wg.Go(func() {
			out, err := podman(q...)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			inv[kind] = lines(out)
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("inventory: %v", errs)
	}
	rt := os.Getenv("XDG_RUNTIME_DIR")
	if entries, err := os.ReadDir(filepath.Join(rt, "netns")); err == nil {
		for _, e := range entries {
			inv["netns"] = append(inv["netns"], e.Name())
		}
	}
	_ = filepath.WalkDir(rt, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&fs.ModeSocket != 0 {
			inv["sockets"] = append(inv["sockets"], strings.TrimPrefix(p, rt+"/"))
		}
		return nil
	})
	inv["runtime dirs"] = runtimeEntries()
	inv["processes"] = helperProcesses()
	inv["mounts"] = rootlessMounts(rt)
	inv["firewall"] = rootlessFirewall(t, rt)
	inv["tmp files"] = tmpFiles()
	for k := range inv {
		slices.Sort(inv[k])
	}
	return inv
}

// rootlessMounts are the mount points in rootless podman's own mount
// namespace (its pause process's): containers' root file systems, their
// shm and network namespace mounts end up there.
func rootlessMounts(rt string) []string {
	b, err := os.ReadFile(filepath.Join(rt, "libpod", "tmp", "pause.pid"))
	if err != nil {
		return nil
	}
	info, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(string(b)), "mountinfo"))
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range lines(string(info)) {
		if f := strings.Fields(l); len(f) > 4 {
			out = append(out, f[4])
		}
	}
	return out
}

// rootlessFirewall is the firewall of rootless podman's network namespace
// (iptables with podman 4's netavark, nftables with podman 5's), without
// counters: netavark adds chains and rules per network and container.
func rootlessFirewall(t *testing.T, rt string) []string {
	t.Helper()
	nsFiles, _ := filepath.Glob(filepath.Join(rt, "netns", "rootless-netns*"))
	more, _ := filepath.Glob(filepath.Join(rt, "containers", "networks", "rootless-netns", "rootless-netns"))
	nsFiles = append(nsFiles, more...)
	if len(nsFiles) == 0 {
		return nil
	}
	out, err := podman("unshare", "nsenter", "--net="+nsFiles[0], "sh", "-c",
		"PATH=/usr/sbin:/sbin:$PATH; { iptables-save 2>/dev/null; nft list ruleset 2>/dev/null; } | grep -v '^#' || true")
	if err != nil {
		t.Fatalf("inventory: the rootless network namespace's firewall: %v", err)
	}
	var rules []string
	for _, l := range lines(out) {
		rules = append(rules, firewallCounters.ReplaceAllString(l, ""))
	}
	// The egress network, which the harness keeps up, has rules of its
	// own: none seen means the inventory is blind, not that all is well.
	if len(rules) == 0 {
		t.Fatalf("inventory: no firewall rules seen in %s (is iptables-save or nft installed?)", nsFiles[0])
	}
	return rules
}

var firewallCounters = regexp.MustCompile(` \[\d+:\d+\]$|counter packets \d+ bytes \d+`)

// tmpFiles are this user's entries in the shared temp dirs: nothing a
// session does may leave one.
func tmpFiles() []string {
	var out []string
	for _, dir := range []string{"/tmp", "/var/tmp", "/dev/shm"} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			fi, err := e.Info()
			if err != nil {
				continue
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == os.Getuid() {
				out = append(out, filepath.Join(dir, e.Name()))
			}
		}
	}
	return out
}

// helperProcesses are this user's podman helpers on the host; a leaked one
// outlives its session.
func helperProcesses() []string {
	var out []string
	for _, p := range userProcesses() {
		base := filepath.Base(p.args[0])
		cmdline := strings.Join(p.args, " ")
		switch {
		case base == "conmon", base == "slirp4netns", strings.HasPrefix(base, "pasta"), base == "rootlessport", base == "aardvark-dns":
		case strings.Contains(cmdline, "system service"):
		case strings.Contains(base, "agent-sandbox"):
		default:
			continue
		}
		out = append(out, fmt.Sprintf("%s (pid %d)", base, p.pid))
	}
	return out
}

// diff says what changed between two inventories; "" if nothing did.
func (a inventory) diff(b inventory) string {
	var sb strings.Builder
	for _, kind := range inventoryKinds {
		var added, gone []string
		for _, x := range b[kind] {
			if !slices.Contains(a[kind], x) {
				added = append(added, x)
			}
		}
		for _, x := range a[kind] {
			if !slices.Contains(b[kind], x) {
				gone = append(gone, x)
			}
		}
		if len(added)+len(gone) > 0 {
			fmt.Fprintf(&sb, "  %s: %d -> %d", kind, len(a[kind]), len(b[kind]))
			if len(added) > 0 {
				fmt.Fprintf(&sb, "; new: %s", strings.Join(added, ", "))
			}
			if len(gone) > 0 {
				fmt.Fprintf(&sb, "; gone: %s", strings.Join(gone, ", "))
			}
			sb.WriteString("\n")
		}
	}
	return sb.String()
}

func (a inventory) counts() string {
	var parts []string
	for _, kind := range inventoryKinds {
		parts = append(parts, fmt.Sprintf("%s=%d", kind, len(a[kind])))
	}
	return strings.Join(parts, " ")
}

// wantInventory fails the row unless the inventory is back to base, but
// for the named volumes the row created on purpose. A teardown that
// finishes after the launcher exited is still a failure, but the row says so.
// leakSince fails the row if the inventory differs from base once a
// session has ended, naming the session (what), and returns the inventory
// to compare the next session with: each leak is reported once, by the
// session that made it.
func leakSince(t *testing.T, base inventory, what string) inventory {
	t.Helper()
	now := takeInventory(t)
	for deadline := time.Now().Add(3 * time.Second); base.diff(now) != "" && time.Now().Before(deadline); {
		// podman's exit commands may still be finishing.
		time.Sleep(200 * time.Millisecond)
		now = takeInventory(t)
	}
	if d := base.diff(now); d != "" {
		t.Errorf("%s left this behind:\n%s", what, d)
	}
	return now
}

func wantInventory(t *testing.T, base inventory, what string, newVolumes ...string) {
	t.Helper()
	now := func() inventory {
		inv := takeInventory(t)
		inv["volumes"] = slices.DeleteFunc(inv["volumes"], func(v string) bool { return slices.Contains(newVolumes, v) })
		return inv
	}
	d := base.diff(now())
	if d == "" {
		return
	}
	// The row fails either way; watching a while longer only tells a late
	// teardown from a leak.
	later := d
	for deadline := time.Now().Add(3 * time.Second); later != "" && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		later = base.diff(now())
	}
	if later == "" {
		t.Errorf("%s: podman and the runtime dir were back to the start only up to 3s after the launcher exited:\n%s", what, d)
	} else {
		t.Errorf("%s: podman and the runtime dir differ from the start:\n%s", what, later)
	}
}

// stillThere reports which of the named podman objects exist.
func stillThere(kind string, names ...string) []string {
	var out []string
	for _, n := range names {
		var err error
		switch kind {
		case "container":
			_, err = podman("container", "exists", n)
		case "pod":
			_, err = podman("pod", "exists", n)
		case "network":
			_, err = podman("network", "exists", n)
		case "volume":
			_, err = podman("volume", "exists", n)
		}
		if err == nil {
			out = append(out, kind+" "+n)
		}
	}
	return out
}

// sessionObjectsOf lists the pod, containers and network of one session.
func sessionObjectsOf(name string) []string {
	var out []string
	out = append(out, stillThere("pod", name)...)
	out = append(out, stillThere("container", name+"-router", name+"-forwarder", name+"-claude")...)
	out = append(out, stillThere("network", name)...)
	return out
}

// runtimeDirsOf lists a launcher's temp dirs under XDG_RUNTIME_DIR.
func runtimeDirsOf(pid int) []string {
	m, _ := filepath.Glob(filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), fmt.Sprintf("agent-sandbox-*-%d*", pid)))
	return m
}

// serviceOf finds the pid of the shared podman API service a launcher
// uses: the one whose environment has the launcher's XDG_CONFIG_HOME,
// which every launcher here gets a dir of its own for (and which keys the
// service, internal/apiservice).
func serviceOf(l *launcher) int {
	for _, p := range userProcesses() {
		if !strings.Contains(strings.Join(p.args, " "), "system service") {
			continue
		}
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.pid))
		if slices.Contains(strings.Split(string(env), "\x00"), "XDG_CONFIG_HOME="+l.configHome) {
			return p.pid
		}
	}
	return 0
}

// writeScript writes an executable shell script into a fresh directory.
func writeScript(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(mkdir(t, "bin-"), name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// within fails the row if d exceeds limit.
func within(t *testing.T, what string, d, limit time.Duration) {
	t.Helper()
	if d > limit {
		t.Errorf("%s took %s, want at most %s", what, d.Round(time.Millisecond), limit)
	} else {
		t.Logf("%s took %s", what, d.Round(time.Millisecond))
	}
}
