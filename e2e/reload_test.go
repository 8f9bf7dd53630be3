//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The live-reload row edits the allowlist of a running session, as
// `agent-sandbox allow/deny` or an editor would, and watches from inside
// whether each edit arrives: the probe script in the sandbox and the test
// take turns through files in the launch directory.

// liveTimeout bounds the whole session; each phase is a few seconds.
const liveTimeout = 3 * time.Minute

// liveLimit is how long an edit may take to reach the agent. The
// requirement is a second; the rest is slack for a loaded test machine.
const liveLimit = 2 * time.Second

// phase waits for the script to finish phase n (it touches done-n).
func (l *launcher) phase(t *testing.T, n int) {
	t.Helper()
	if !l.waitFor(90*time.Second, func() bool { return exists(filepath.Join(l.Dir, fmt.Sprintf("done-%d", n))) }) {
		t.Fatalf("the script in the sandbox never finished phase %d; stdout so far:\n%s\nstderr:\n%s",
			n, indent(l.Stdout()), indent(l.Stderr()))
	}
}

// next lets the script start phase n.
func (l *launcher) next(t *testing.T, n int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(l.Dir, fmt.Sprintf("go-%d", n)), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// edit replaces the allowlist the way `agent-sandbox allow` does: a temp
// file in the same directory, renamed over the list.
func (l *launcher) edit(t *testing.T, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(l.AllowlistPath), ".allowed-hosts.tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, l.AllowlistPath); err != nil {
		t.Fatal(err)
	}
}

// forwarderReloads counts the forwarder's "reloaded" lines: it logs one
// each time it applies a change of its listeners.
func (l *launcher) forwarderReloads(t *testing.T) int {
	t.Helper()
	out := helperLog("forwarder")
	if out == "" {
		return -1
	}
	return strings.Count(out, "forwarder: reloaded ")
}

// helperLog is the log of the running session's router or forwarder; ""
// when there is none.
func helperLog(role string) string {
	name := runningHelper(role)
	if name == "" {
		return ""
	}
	out, err := exec.Command("podman", "logs", name).CombinedOutput()
	if err != nil {
		return ""
	}
	return string(out)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// liveHelpers are the shell functions of the live rows' probe scripts.
// Every probe is reported in probeScript's format, so parseProbes reads
// it. Timed probes report how long they took to succeed (or to fail)
// after the phase began, which is right after the edit. SIGPIPE is
// ignored: a write to a held connection that was cut must fail, not end
// the script.
const liveHelpers = `
set -u
trap '' PIPE
now() { echo $(( $(date +%s%N) / 1000000 )); }
report() { printf '@MARK@ %s rc=%d ms=%d\n%s\n@MARK@-end\n' "$1" "$2" "$3" "$4"; }
# once NAME CMD: run CMD once.
once() {
	t0=$(now); out=$(eval "$2" 2>&1 </dev/null); rc=$?
	report "$1" "$rc" $(( $(now) - t0 )) "$out"
}
# until_ok NAME LIMIT_MS CMD: run CMD until it succeeds; ms counts from
# the start of the phase.
until_ok() {
	while :; do
		out=$(eval "$3" 2>&1 </dev/null); rc=$?; el=$(( $(now) - phase_t0 ))
		if [ "$rc" -eq 0 ] || [ "$el" -gt "$2" ]; then report "$1" "$rc" "$el" "$out"; return; fi
		sleep 0.1
	done
}
# until_fails NAME LIMIT_MS CMD: run CMD until it fails; rc 0 means it did.
until_fails() {
	while :; do
		out=$(eval "$3" 2>&1 </dev/null); rc=$?; el=$(( $(now) - phase_t0 ))
		if [ "$rc" -ne 0 ]; then report "$1" 0 "$el" "$out"; return; fi
		if [ "$el" -gt "$2" ]; then report "$1" 1 "$el" "still works: $out"; return; fi
		sleep 0.1
	done
}
begin() {
	i=0
	while [ ! -e "go-$1" ]; do
		sleep 0.05; i=$((i + 1))
		if [ "$i" -gt 2400 ]; then echo "no go-$1 from the test" >&2; exit 3; fi
	done
	phase_t0=$(now)
}
addr() { getent hosts "$1" | awk '{print $1; exit}'; }
https() { curl -sS --max-time 3 --cacert ./ca.pem "https://$1/$2"; }
tcp() { printf '%s\n' "$3" | nc -N -w 3 "$1" "$2" | grep "$3"; }
`

// liveScript is the probe script of the live-reload row: it runs phase n
// once go-n exists.
func liveScript(nonce string) string {
	return strings.NewReplacer("@N@", nonce, "@MARK@", probeMark).Replace(liveHelpers + `
N=@N@
# held sends a line on the connection opened at the start and waits for
# its echo.
held() {
	printf '%s\n' "$2" >&3
	t0=$(now); rc=1
	while [ $(( $(now) - t0 )) -lt 5000 ]; do
		if grep -q "$2" /tmp/held.out; then rc=0; break; fi
		sleep 0.05
	done
	report "$1" "$rc" $(( $(now) - t0 )) "$(cat /tmp/held.out)"
}
# echoed TAG: a line sent on the held connection comes back within a
# second (the tag is made unique, as until_fails repeats it).
echoed() {
	tag="$1-$(now)"
	printf '%s\n' "$tag" >&3 || return 1
	t0=$(now)
	while [ $(( $(now) - t0 )) -lt 1000 ]; do
		if grep -q "$tag" /tmp/held.out; then return 0; fi
		sleep 0.05
	done
	return 1
}

# Phase 0, before any edit: a raw TCP connection that stays open
# throughout, and the state the edits will change.
mkfifo /tmp/held.in
nc allowed.test 2222 </tmp/held.in >/tmp/held.out 2>&1 &
exec 3>/tmp/held.in
held held-before "$N-held-before"
echo "$(addr allowed.test)" > /tmp/addr0
once addr-before 'addr allowed.test'
once added-before "https added.allowed.test $N-added-before"
touch done-0

# Phase 1: the test allowed added.allowed.test and added.allowed.test:2222.
begin 1
until_ok added-https 10000 'https added.allowed.test $N-added-https'
until_ok added-tcp 10000 'tcp added.allowed.test 2222 $N-added-tcp'
added_addr=$(addr added.allowed.test)
once added-addr 'echo $added_addr'
# routerd said it keeps nginx's old workers (an edit that only adds), and
# with them the connection: the test saw that and touched kept-1.
i=0
while [ ! -e kept-1 ]; do
	sleep 0.05; i=$((i + 1))
	if [ "$i" -gt 1200 ]; then echo "no kept-1 from the test" >&2; exit 3; fi
done
held held-after-add "$N-held-after-add"
once addr-after-add 'addr allowed.test'
touch done-1

# Phase 2: the test wrote a list that does not parse.
begin 2
once bad-added-https 'https added.allowed.test $N-bad-added-https'
once bad-added-tcp 'tcp added.allowed.test 2222 $N-bad-added-tcp'
once bad-control 'https allowed.test $N-bad-control'
touch done-2

# Phase 3: the test removed added.allowed.test again.
begin 3
until_fails removed-name 10000 'https added.allowed.test $N-removed-name'
# The held connection goes too, though allowed.test:2222 stays: the edit
# removed entries, and nginx's old workers end with every connection they
# hold.
until_fails held-after-remove 5000 'echoed "$N-held-after-remove"'
# Once the forwarder has applied the removal too (the test saw it say so
# and touched polled-3), a program that cached the address gets nowhere
# either.
i=0
while [ ! -e polled-3 ]; do
	sleep 0.05; i=$((i + 1))
	if [ "$i" -gt 1200 ]; then echo "no polled-3 from the test" >&2; exit 3; fi
done
once removed-https-addr 'curl -sS --max-time 3 --cacert ./ca.pem --resolve added.allowed.test:443:$added_addr https://added.allowed.test/$N-removed-https-addr'
once removed-tcp-addr 'tcp $added_addr 2222 $N-removed-tcp-addr'
once reconnect 'tcp allowed.test 2222 $N-reconnect'
once control 'https allowed.test $N-control'
touch done-3
exec 3>&-
exit 0
`)
}

const liveBefore = `# live reload row
allowed.test passthrough
allowed.test:2222
*.wild.test passthrough
`

// added.allowed.test sorts before allowed.test: planned from scratch it
// would take allowed.test's loopback address, which open connections and
// cached answers still use.
const liveAdded = liveBefore + `added.allowed.test passthrough
added.allowed.test:2222
`

// liveBad keeps allowed.test but would drop added.allowed.test, if it
// were applied; its line 5 does not parse.
const liveBad = `# live reload row
allowed.test passthrough
allowed.test:2222
*.wild.test passthrough
*.bad*.test
`

func TestLiveReload(t *testing.T) {
	row(t, "allowlist edits reach a running session within a second; open connections survive an addition and end with a removal", func(t *testing.T) {
		nonce := newNonce(t)
		s := startLauncher(t, sessionOpts{Allowlist: liveBefore, Cmd: agentCmd(liveScript(nonce)), Timeout: liveTimeout})

		s.phase(t, 0)
		s.edit(t, liveAdded)
		s.next(t, 1)
		// An edit that only adds keeps nginx's old workers: routerd says
		// so at the reload, and only then is the held connection probed.
		if !s.waitFor(30*time.Second, func() bool {
			return strings.Contains(helperLog("router"), "nginx.conf only added entries: the old nginx workers keep their connections")
		}) {
			t.Errorf("routerd never said it kept nginx's workers after an edit that only adds:\n%s", indent(helperLog("router")))
		}
		if err := os.WriteFile(filepath.Join(s.Dir, "kept-1"), nil, 0o644); err != nil {
			t.Fatal(err)
		}

		s.phase(t, 1)
		s.edit(t, liveBad)
		if !s.waitFor(5*time.Second, func() bool { return strings.Contains(s.Stderr(), "line 5") }) {
			t.Errorf("no warning about the bad edit on the launcher's stderr within 5s:\n%s", indent(s.Stderr()))
		}
		s.next(t, 2)

		s.phase(t, 2)
		reloads := s.forwarderReloads(t)
		s.edit(t, liveBefore)
		s.next(t, 3)
		// The removal's last part to arrive is the forwarder's (routerd's
		// cut is what held-after-remove waits for): the old address is
		// probed once it said it reloaded.
		switch {
		case reloads < 0:
			t.Errorf("cannot read the forwarder's log before the removal")
		case !s.waitFor(30*time.Second, func() bool { return s.forwarderReloads(t) > reloads }):
			t.Errorf("the forwarder never said it reloaded after the removal")
		}
		if err := os.WriteFile(filepath.Join(s.Dir, "polled-3"), nil, 0o644); err != nil {
			t.Fatal(err)
		}

		s.phase(t, 3)
		s.wait()
		assertNoLeftovers(t)
		wantCode(t, s, 0)
		res := parseProbes(s.Stdout())

		// Before: the held connection works and added.allowed.test does not.
		wantOK(t, res, "held-before", nonce+"-held-before")
		wantFailed(t, res, "added-before")
		wantNeverArrived(t, nonce+"-added-before", "https to added.allowed.test before it was allowed")

		// Adding: the new host is reached over TLS and raw TCP within the
		// limit, and the connection opened before still carries data.
		for _, name := range []string{"added-https", "added-tcp"} {
			wantOK(t, res, name)
			if p, ok := res[name]; ok && p.Elapsed > liveLimit {
				t.Errorf("%s succeeded only %v after the edit, want within %v", name, p.Elapsed, liveLimit)
			}
			t.Logf("%s: reached %v after the edit", name, res[name].Elapsed)
		}
		wantOK(t, res, "added-https", "hello from added.allowed.test", "path /"+nonce+"-added-https")
		wantArrived(t, nonce+"-added-https", "https to added.allowed.test after it was allowed")
		wantArrived(t, nonce+"-added-tcp", "tcp to added.allowed.test:2222 after it was allowed")
		wantOK(t, res, "held-after-add", nonce+"-held-after-add")
		before, after := strings.TrimSpace(res["addr-before"].Out), strings.TrimSpace(res["addr-after-add"].Out)
		if before == "" || before != after {
			t.Errorf("allowed.test resolved to %q before the edit and %q after: a reload must not move a host", before, after)
		}
		if a := strings.TrimSpace(res["added-addr"].Out); a == "" || a == before {
			t.Errorf("added.allowed.test got address %q (allowed.test has %q)", a, before)
		}

		// A bad edit: warned about, and the list before it stays in force.
		for _, want := range []string{s.AllowlistPath, "line 5", "keeps its previous list"} {
			if !strings.Contains(s.Stderr(), want) {
				t.Errorf("the warning about the bad edit lacks %q:\n%s", want, indent(s.Stderr()))
			}
		}
		wantOK(t, res, "bad-added-https", "hello from added.allowed.test")
		wantOK(t, res, "bad-added-tcp", nonce+"-bad-added-tcp")
		wantOK(t, res, "bad-control", "hello from allowed.test")

		// Removing: the name stops working within the limit, and so does
		// its old address. The held connection ends with nginx's old
		// workers (routerd cuts them when an edit removes entries); a new
		// one to allowed.test:2222, which stays, works, as does
		// allowed.test.
		wantOK(t, res, "removed-name")
		if p, ok := res["removed-name"]; ok && p.Elapsed > liveLimit {
			t.Errorf("added.allowed.test still worked %v after it was removed, want under %v", p.Elapsed, liveLimit)
		}
		wantFailed(t, res, "removed-https-addr")
		wantFailed(t, res, "removed-tcp-addr")
		wantNeverArrived(t, nonce+"-removed-https-addr", "https to the removed host's old address")
		wantNeverArrived(t, nonce+"-removed-tcp-addr", "tcp to the removed host's old address")
		wantOK(t, res, "held-after-remove")
		t.Logf("held-after-remove: the held connection stopped %v after the edit", res["held-after-remove"].Elapsed)
		wantOK(t, res, "reconnect", nonce+"-reconnect")
		wantArrived(t, nonce+"-reconnect", "a new connection to allowed.test:2222 after the removal")
		wantOK(t, res, "control", "hello from allowed.test")
		wantArrived(t, nonce+"-control", "control request to allowed.test")

		for _, p := range []string{"held-before", "added-before", "added-https", "added-tcp", "held-after-add",
			"bad-added-https", "bad-added-tcp", "bad-control", "removed-name", "held-after-remove",
			"removed-https-addr", "removed-tcp-addr", "reconnect", "control"} {
			if _, ok := res[p]; !ok {
				t.Errorf("probe %q did not report", p)
			}
		}
	})
}
