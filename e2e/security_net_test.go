//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Two ways an allowlisted path could carry more than the list says: a
// connection opened while a host was allowed that outlives its removal,
// and an Encrypted Client Hello, whose real destination nginx cannot see,
// behind an allowlisted outer SNI.

// netBefore has a port entry and a name that the deny row removes, and
// allowed.test, which stays.
const netBefore = `# deny row
allowed.test passthrough
allowed.test:2222
added.allowed.test passthrough
`

// netAdded only adds to netBefore: open connections must survive it.
const netAdded = netBefore + `*.wild.test passthrough
`

// denyScript holds a raw TCP connection to allowed.test:2222 and a TLS
// connection to added.allowed.test open through two edits, using each
// every 100 ms (sec.py hold), and reports when each stopped answering.
func denyScript(nonce string) string {
	return strings.NewReplacer("@N@", nonce, "@MARK@", probeMark).Replace(liveHelpers + `
N=@N@
# opened FILE: the held connection answered once.
opened() { grep -qx open "$1" && cat "$1"; }
# alive_past FILE MS: the held connection answered MS after the phase
# began and was never cut.
alive_past() {
	! grep -q '^cut' "$1" && awk -v t="$(( phase_t0 + $2 ))" '$1 == "ok" && $2 >= t { f = 1 } END { exit !f }' "$1"
}
# was_cut FILE: the held connection stopped answering; says how long after
# the phase began.
was_cut() {
	awk -v t0="$phase_t0" '$1 == "cut" { print "cut after " ($2 - t0) " ms (" $3 ")"; f = 1 } END { exit !f }' "$1"
}

# Phase 0: the test has written sec.py. Open both connections.
begin 0
python3 -S ./sec.py hold tcp allowed.test 2222 allowed.test "$N-tcp" >/tmp/hold-tcp.out 2>&1 &
python3 -S ./sec.py hold tls added.allowed.test 443 added.allowed.test "$N-tls" >/tmp/hold-tls.out 2>&1 &
until_ok hold-tcp-open 10000 'opened /tmp/hold-tcp.out'
until_ok hold-tls-open 10000 'opened /tmp/hold-tls.out'
touch done-0

# Phase 1: the test allowed *.wild.test, an edit that only adds. Both
# connections still answer after routerd's second for nginx's old workers.
begin 1
until_ok wild-https 10000 'https $N-wild.wild.test $N-wild'
until_ok hold-tcp-after-add 6000 'alive_past /tmp/hold-tcp.out 2000'
until_ok hold-tls-after-add 6000 'alive_past /tmp/hold-tls.out 2000'
touch done-1

# Phase 2: the test ran agent-sandbox deny allowed.test:2222
# added.allowed.test. Both held connections stop; allowed.test, which
# stays, answers new connections.
begin 2
until_ok hold-tcp-cut 5000 'was_cut /tmp/hold-tcp.out'
until_ok hold-tls-cut 5000 'was_cut /tmp/hold-tls.out'
until_fails removed-name 10000 'https added.allowed.test $N-removed-name'
once removed-tcp 'tcp allowed.test 2222 $N-removed-tcp'
once control-https 'https allowed.test $N-control-https'
until_ok control-wild 5000 'https $N-cw.wild.test $N-control-wild'
touch done-2
exit 0
`)
}

// cutAfter reads was_cut's "cut after N ms".
var cutAfter = regexp.MustCompile(`cut after (-?\d+) ms`)

func TestDenyCutsOpenConnections(t *testing.T) {
	row(t, "deny ends open connections to removed entries within 2s; an edit that only adds keeps them", func(t *testing.T) {
		nonce := newNonce(t)
		s := startLauncher(t, sessionOpts{Allowlist: netBefore, Cmd: agentCmd(denyScript(nonce)), Timeout: liveTimeout})
		if err := os.WriteFile(filepath.Join(s.Dir, "sec.py"), []byte(secPy), 0o644); err != nil {
			t.Fatal(err)
		}
		s.next(t, 0)

		s.phase(t, 0)
		s.edit(t, netAdded)
		s.next(t, 1)

		s.phase(t, 1)
		deny := startLauncher(t, sessionOpts{Args: []string{"deny", "allowed.test:2222", "added.allowed.test"}, BareEnv: true, CombinedOutput: true,
			Env: map[string]string{"AGENT_SANDBOX_ALLOWLIST": s.AllowlistPath, "XDG_CONFIG_HOME": mkdir(t, "xdg-")}}).wait()
		if deny.Err != nil {
			t.Fatalf("agent-sandbox deny: %v\n%s", deny.Err, deny.Stdout())
		}
		s.next(t, 2)

		s.phase(t, 2)
		s.wait()
		assertNoLeftovers(t)
		wantCode(t, s, 0)
		res := parseProbes(s.Stdout())

		// Both connections carried data before any edit, and the fake saw
		// it: a cut seen later is the router's doing, not a dead path.
		wantOK(t, res, "hold-tcp-open")
		wantOK(t, res, "hold-tls-open")
		wantArrived(t, nonce+"-tcp-1", "the held TCP connection's first line")
		wantArrived(t, nonce+"-tls-1", "the held TLS connection's first request")

		// An edit that only adds keeps them, past routerd's grace.
		wantOK(t, res, "wild-https", "hello from "+nonce+"-wild.wild.test")
		wantOK(t, res, "hold-tcp-after-add")
		wantOK(t, res, "hold-tls-after-add")

		// deny: each stops within the limit.
		for _, name := range []string{"hold-tcp-cut", "hold-tls-cut"} {
			wantOK(t, res, name)
			p, ok := res[name]
			if !ok || p.RC != 0 {
				continue
			}
			m := cutAfter.FindStringSubmatch(p.Out)
			if m == nil {
				t.Errorf("%s: no time in %q", name, p.Out)
				continue
			}
			ms, _ := strconv.Atoi(m[1])
			if d := time.Duration(ms) * time.Millisecond; d > liveLimit {
				t.Errorf("%s: the connection carried data until %v after deny, want within %v", name, d, liveLimit)
			} else {
				t.Logf("%s: %s", name, strings.TrimSpace(p.Out))
			}
		}
		// New connections to what was removed fail; allowed.test and the
		// wildcard, which stay, answer (the control).
		// (removed-name's first tries may still pass while the change
		// travels; the held connections' cuts come later, so removed-tcp's
		// does not.)
		wantOK(t, res, "removed-name")
		wantFailed(t, res, "removed-tcp")
		wantNeverArrived(t, nonce+"-removed-tcp", "tcp to allowed.test:2222 after deny")
		wantOK(t, res, "control-https", "hello from allowed.test")
		wantArrived(t, nonce+"-control-https", "https to allowed.test after deny")
		wantOK(t, res, "control-wild", "hello from "+nonce+"-cw.wild.test")
		wantArrived(t, nonce+"-control-wild", "https under *.wild.test after deny")

		for _, p := range []string{"hold-tcp-open", "hold-tls-open", "wild-https", "hold-tcp-after-add", "hold-tls-after-add",
			"hold-tcp-cut", "hold-tls-cut", "removed-name", "removed-tcp", "control-https", "control-wild"} {
			if _, ok := res[p]; !ok {
				t.Errorf("probe %q did not report", p)
			}
		}
	})
}

func TestECHIsRefused(t *testing.T) {
	row(t, "a ClientHello with encrypted_client_hello behind an allowlisted SNI is closed before it reaches the host", func(t *testing.T) {
		dir := launchDir(t)
		if err := os.WriteFile(filepath.Join(dir, "sec.py"), []byte(secPy), 0o644); err != nil {
			t.Fatal(err)
		}
		ech, alpn, name := newNonce(t), newNonce(t), newNonce(t)
		hello := "python3 -S ./sec.py hello "
		res, _ := probeSession(t, sessionOpts{Dir: dir},
			// The ECH hello carries its nonce in the clear twice: in the
			// ECH payload and in ALPN, which the fake logs for every hello
			// it sees.
			probe{"ech hello to allowed.test", hello + "allowed.test 443 --sni allowed.test --alpn " + ech + " --ech " + ech},
			probe{"ech hello at the forwarder's 127.0.0.1", hello + "127.0.0.1 443 --sni allowed.test --alpn " + ech + "-lo --ech " + ech + "-lo"},
			// Around the forwarder: nginx's TLS server is not on the
			// router's address, only on a socket the agent has no path to.
			probe{"ech hello straight to the router's address", "R=$(awk '/^nameserver/{print $2; exit}' /etc/resolv.conf); " +
				hello + "$R 443 --sni allowed.test --alpn " + ech + "-r --ech " + ech + "-r"},
			// The opened path: the same hello without the extension.
			probe{"the same hello without ech", hello + "allowed.test 443 --sni allowed.test --alpn " + alpn},
			probe{"a new connection after the refusals", "curl -sS --max-time 10 --cacert ./ca.pem https://allowed.test/" + name},
		)
		wantFailed(t, res, "ech hello to allowed.test")
		wantFailed(t, res, "ech hello at the forwarder's 127.0.0.1")
		if p := res["ech hello straight to the router's address"]; p.RC == 0 || !strings.Contains(p.Out, "ECONNREFUSED") {
			t.Errorf("a hello straight to the router's 443 was not refused at connect: %s", p)
		}
		wantNeverArrived(t, ech, "a ClientHello with encrypted_client_hello")
		wantOK(t, res, "the same hello without ech", "server hello")
		wantArrived(t, alpn, "the same ClientHello without encrypted_client_hello")
		wantOK(t, res, "a new connection after the refusals", "hello from allowed.test")
		wantArrived(t, name, "https to allowed.test after the refusals")
	})
}
