//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestExitCodes(t *testing.T) {
	row(t, "exit status of the command is the launcher's", func(t *testing.T) {
		wantCode(t, runSession(t, sessionOpts{Cmd: []string{"sh", "-c", "exit 7"}}), 7)
	})
	row(t, "true exits 0", func(t *testing.T) {
		wantCode(t, runSession(t, sessionOpts{Cmd: []string{"true"}}), 0)
	})
}

// controlProbe goes to an allowed name in the same session as blocked probes:
// if it arrives, the path and the log worked while the others were refused.
func controlProbe(nonce string) probe {
	return probe{"control", curlHTTPS("allowed.test", "control-"+nonce)}
}

func wantControl(t *testing.T, res map[string]probeResult, nonce string) {
	t.Helper()
	wantOK(t, res, "control", "hello from allowed.test")
	wantArrived(t, "control-"+nonce, "control request to allowed.test")
}

func TestAllowlist(t *testing.T) {
	row(t, "allowed name resolves to loopback and reaches upstream over TLS", func(t *testing.T) {
		nonce := newNonce(t)
		mark := markFakeLog()
		res, _ := probeSession(t, sessionOpts{},
			probe{"resolve", "getent hosts allowed.test"},
			probe{"https", curlHTTPS("allowed.test", nonce)},
		)
		wantOK(t, res, "resolve", "allowed.test")
		wantLoopback(t, res["resolve"].Out)
		wantOK(t, res, "https", "hello from allowed.test", "path /"+nonce)
		wantArrived(t, nonce, "https to allowed.test")
		if got := fakeLogLines("https request", `host="allowed.test"`, nonce); len(got) == 0 {
			t.Errorf("the request with nonce %s did not arrive as an HTTPS request for allowed.test", nonce)
		}
		wantUpstreamQuery(t, mark, "allowed.test")
	})

	row(t, "unlisted name gets NXDOMAIN and is never asked upstream", func(t *testing.T) {
		nonce := newNonce(t)
		res, _ := probeSession(t, sessionOpts{},
			probe{"getent", "getent hosts " + nonce + "-getent.denied.test"},
			probe{"dig", "dig +time=3 +tries=1 " + nonce + "-dig.denied.test A"},
			probe{"curl", curlHTTPS(nonce+"-curl.denied.test", nonce)},
			controlProbe(nonce),
		)
		wantFailed(t, res, "getent")
		wantFailed(t, res, "curl")
		wantOK(t, res, "dig", "status: NXDOMAIN")
		wantNeverArrived(t, nonce+"-", "lookups of unlisted names")
		wantControl(t, res, nonce)
	})

	row(t, "wildcard entry covers names under it", func(t *testing.T) {
		nonce := newNonce(t)
		mark := markFakeLog()
		res, _ := probeSession(t, sessionOpts{},
			probe{"https", curlHTTPS("a.wild.test", nonce)},
		)
		wantOK(t, res, "https", "hello from a.wild.test", "path /"+nonce)
		wantArrived(t, nonce, "https to a.wild.test")
		wantUpstreamQuery(t, mark, "a.wild.test")
	})

	row(t, "wildcard entry does not cover its apex", func(t *testing.T) {
		nonce := newNonce(t)
		mark := markFakeLog()
		res, _ := probeSession(t, sessionOpts{},
			probe{"getent", "getent hosts wild.test"},
			probe{"curl", curlHTTPS("wild.test", nonce+"-apex")},
			controlProbe(nonce),
		)
		wantFailed(t, res, "getent")
		wantFailed(t, res, "curl")
		wantNeverArrived(t, nonce+"-apex", "https to the apex wild.test")
		// The apex carries no nonce, so look for it in this session's queries.
		for _, line := range strings.Split(mark.since(), "\n") {
			if strings.Contains(line, "dns ") && strings.Contains(strings.ToLower(line), `name="wild.test."`) {
				t.Errorf("LEAK: the apex wild.test was asked upstream: %s", line)
			}
		}
		wantControl(t, res, nonce)
	})

	row(t, "host:port entry carries raw TCP both ways", func(t *testing.T) {
		nonce := newNonce(t)
		res, _ := probeSession(t, sessionOpts{},
			// Kept open until the echo is back: the plain two-way path.
			probe{"tcp-open", fmt.Sprintf(`d=$(mktemp -d); mkfifo $d/in
nc -w 10 allowed.test 2222 <$d/in >$d/out 2>&1 &
exec 3>$d/in
printf '%%s\n' %[1]s-open >&3
i=0; while ! grep -q %[1]s-open $d/out && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
exec 3>&-; kill $! 2>/dev/null; wait
cat $d/out; grep -q %[1]s-open $d/out; rc=$?; rm -rf $d; exit $rc`, nonce)},
			// nc -N half-closes after sending, as many clients do; the reply
			// must still come back.
			probe{"tcp-half-close", ncSend("allowed.test", "2222", nonce+"-half")},
		)
		wantOK(t, res, "tcp-open", nonce+"-open")
		wantOK(t, res, "tcp-half-close", nonce+"-half")
		for _, sent := range []string{nonce + "-open", nonce + "-half"} {
			if got := fakeLogLines("tcp payload", sent); len(got) == 0 {
				t.Errorf("%s did not arrive as a TCP payload on the echo port", sent)
			} else {
				t.Logf("fake log: %s", strings.Join(got, "\n"))
			}
		}
	})

	row(t, "direct connections to the upstream address are blocked", func(t *testing.T) {
		nonce := newNonce(t)
		res, _ := probeSession(t, sessionOpts{},
			probe{"https-ip", "curl -sS --max-time 10 -k https://" + fakeIP + "/" + nonce + "-https"},
			probe{"https-resolve", "curl -sS --max-time 10 --cacert ./ca.pem --resolve allowed.test:443:" + fakeIP +
				" https://allowed.test/" + nonce + "-resolve"},
			probe{"tcp-ip", ncSend(fakeIP, "2222", nonce+"-tcp") + " | grep " + nonce},
			probe{"dns-ip", "dig @" + fakeIP + " +time=3 +tries=1 " + nonce + "-dns.allowed.test A"},
			controlProbe(nonce),
		)
		for _, name := range []string{"https-ip", "https-resolve", "tcp-ip", "dns-ip"} {
			wantFailed(t, res, name)
		}
		wantNeverArrived(t, nonce+"-", "direct connections to "+fakeIP)
		wantControl(t, res, nonce)
	})
}

// wantUpstreamQuery asserts the router resolved name through the fake DNS,
// i.e. it honoured AGENT_SANDBOX_UPSTREAM_DNS rather than another resolver.
func wantUpstreamQuery(t *testing.T, mark logMark, name string) {
	t.Helper()
	for _, line := range strings.Split(mark.since(), "\n") {
		if strings.Contains(line, " query ") && strings.Contains(strings.ToLower(line), `name="`+name+`."`) {
			return
		}
	}
	t.Errorf("the fake DNS was never asked for %s during the session: the router resolved it elsewhere", name)
}

func wantLoopback(t *testing.T, getent string) {
	t.Helper()
	for _, f := range strings.Fields(getent) {
		if a, err := netip.ParseAddr(f); err == nil {
			if !a.IsLoopback() {
				t.Errorf("allowed.test resolved to %s, want a loopback address (the forwarder)", a)
			}
			return
		}
	}
	t.Errorf("no address in getent output %q", getent)
}

func TestLaunchDir(t *testing.T) {
	row(t, "files belong to the invoking user and pwd is the launch dir", func(t *testing.T) {
		res, r := probeSession(t, sessionOpts{},
			probe{"pwd", "pwd"},
			probe{"write", "echo data > owned.txt && mkdir sub && echo x > sub/nested.txt"},
		)
		wantOK(t, res, "write")
		if got := strings.TrimSpace(res["pwd"].Out); got != r.Dir {
			t.Errorf("pwd inside = %q, want the launch dir %q", got, r.Dir)
		}
		for _, f := range []string{"owned.txt", "sub", "sub/nested.txt"} {
			fi, err := os.Stat(filepath.Join(r.Dir, f))
			if err != nil {
				t.Errorf("%s was not written to the launch dir: %v", f, err)
				continue
			}
			st := fi.Sys().(*syscall.Stat_t)
			if int(st.Uid) != os.Getuid() || int(st.Gid) != os.Getgid() {
				t.Errorf("%s is owned by %d:%d on the host, want the invoking user %d:%d", f, st.Uid, st.Gid, os.Getuid(), os.Getgid())
			}
		}
	})

	row(t, "home volume persists across sessions and is per volume", func(t *testing.T) {
		nonce := newNonce(t)
		vol := homeVolume(t)
		res, _ := probeSession(t, sessionOpts{HomeVolume: vol},
			probe{"write", "echo " + nonce + " > /home/claude/persist-" + nonce},
		)
		wantOK(t, res, "write")
		if _, err := podman("volume", "exists", vol); err != nil {
			t.Errorf("the session did not use AGENT_SANDBOX_HOME_VOLUME=%s: %v", vol, err)
		}
		res, _ = probeSession(t, sessionOpts{HomeVolume: vol},
			probe{"read", "cat /home/claude/persist-" + nonce},
		)
		wantOK(t, res, "read", nonce)
		res, _ = probeSession(t, sessionOpts{},
			probe{"other-volume", "cat /home/claude/persist-" + nonce},
		)
		wantFailed(t, res, "other-volume")
	})
}

func TestClaudeCLI(t *testing.T) {
	row(t, "claude --version runs as uid 1000", func(t *testing.T) {
		res, _ := probeSession(t, sessionOpts{},
			probe{"uid", "id -u"},
			probe{"version", "timeout 60 claude --version"},
		)
		wantOK(t, res, "uid")
		if got := strings.TrimSpace(res["uid"].Out); got != "1000" {
			t.Errorf("id -u inside = %q, want 1000", got)
		}
		wantOK(t, res, "version", "Claude Code")
	})
}

func TestLocalNames(t *testing.T) {
	row(t, "localhost and the sandbox's hostname resolve without asking the router", func(t *testing.T) {
		res, r := probeSession(t, sessionOpts{},
			probe{"localhost", "getent ahostsv4 localhost"},
			probe{"hostname", "getent ahostsv4 $(hostname)"},
		)
		wantOK(t, res, "localhost", "127.0.0.1")
		wantOK(t, res, "hostname", "127.0.0.1")
		// A name the router was asked for would be in the blocked summary.
		if strings.Contains(r.Stderr(), "blocked") {
			t.Errorf("a local name went to the router:\n%s", r.Stderr())
		}
	})
}

func TestSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		row(t, sig.String()+" ends a running session with 130 and tears it down", func(t *testing.T) {
			r := runSession(t, sessionOpts{
				Cmd:       []string{"sh", "-c", "touch started && exec sleep 300"},
				Signal:    sig,
				ReadyFile: "started",
			})
			if r.SignalledAt.IsZero() {
				t.Fatalf("the command never started inside, so no %s was sent", sig)
			}
			wantCode(t, r, 130)
		})
	}
}

func TestRefusals(t *testing.T) {
	row(t, "launching from $HOME is refused before anything is created", func(t *testing.T) {
		home := os.Getenv("HOME")
		before := podmanInventory(t)
		r := runSession(t, sessionOpts{Dir: home, Cmd: []string{"true"}})
		wantCode(t, r, 1)
		if !strings.Contains(r.Stderr(), home) {
			t.Errorf("stderr does not name %s:\n%s", home, indent(r.Stderr()))
		}
		wantNothingCreated(t, before, r)
	})
}

func TestBadAllowlist(t *testing.T) {
	row(t, "bad allowlist line is refused before anything is created", func(t *testing.T) {
		before := podmanInventory(t)
		r := runSession(t, sessionOpts{
			Allowlist: "allowed.test\n*.bad*.test\n",
			Cmd:       []string{"true"},
		})
		wantCode(t, r, 1)
		for _, want := range []string{r.AllowlistPath, "line 2"} {
			if !strings.Contains(r.Stderr(), want) {
				t.Errorf("stderr does not name %q:\n%s", want, indent(r.Stderr()))
			}
		}
		wantNothingCreated(t, before, r)
	})
}

// wantNothingCreated compares podman listings around a refused session.
func wantNothingCreated(t *testing.T, before []string, r *launcher) {
	t.Helper()
	for _, obj := range newObjects(before, podmanInventory(t)) {
		// Other users of this podman store may create things meanwhile;
		// the launcher's objects are recognisable by name or label.
		if isLauncherObject(obj, r.HomeVolume) {
			t.Errorf("a refused session created %s", obj)
		} else {
			t.Logf("ignoring %s: created meanwhile, not by the launcher", obj)
		}
	}
	if _, err := podman("volume", "exists", r.HomeVolume); err == nil {
		t.Errorf("the home volume %s was created for a refused session", r.HomeVolume)
	}
}

// podmanInventory lists every container, pod, network and volume as
// "kind name labels".
func podmanInventory(t *testing.T) []string {
	t.Helper()
	var all []string
	for _, q := range [][]string{
		{"ps", "-a", "--format", "container {{.Names}} {{.Labels}}"},
		{"pod", "ps", "--format", "pod {{.Name}} {{.Labels}}"},
		{"network", "ls", "--format", "network {{.Name}} {{.Labels}}"},
		{"volume", "ls", "--format", "volume {{.Name}} {{.Labels}}"},
	} {
		out, err := podman(q...)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines(out) {
			if q[0] == "network" {
				l = sortedNetworkLabels(l)
			}
			all = append(all, l)
		}
	}
	return all
}

// sortedNetworkLabels puts the labels of a "network NAME k=v,k=v" line in
// order: podman network ls prints them in Go's map order, which changes
// from one call to the next, so that a network that was there all along
// (a running session's) would look new.
func sortedNetworkLabels(line string) string {
	f := strings.SplitN(line, " ", 3)
	if len(f) < 3 {
		return line
	}
	labels := strings.Split(f[2], ",")
	slices.Sort(labels)
	return f[0] + " " + f[1] + " " + strings.Join(labels, ",")
}

func newObjects(before, after []string) []string {
	var out []string
	for _, a := range after {
		if !slices.Contains(before, a) {
			out = append(out, a)
		}
	}
	return out
}

// isLauncherObject attributes a new object to the refused launcher. Sessions
// carry their launcher's pid in their names and labels; objects without one
// count as the launcher's unless they are volumes, whose only possible
// source here is the session's home volume.
func isLauncherObject(obj, homeVolume string) bool {
	f := strings.Fields(obj)
	if len(f) < 2 {
		return false
	}
	if m := sessionPID.FindStringSubmatch(obj); m != nil {
		pid, _ := strconv.Atoi(m[1])
		_, ok := launched.Load(pid)
		return ok
	}
	if f[0] == "volume" {
		return f[1] == homeVolume
	}
	return strings.HasPrefix(f[1], "agent-sandbox") || strings.Contains(obj, "agent-sandbox.")
}
