//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// expectation is what a probe must show.
type expectation int

const (
	// blocked: the client failed and its nonce is in no log at all.
	blocked expectation = iota
	// arrives: the client succeeded and the nonce reached the fake.
	arrives
	// allowedHostOnly: the nonce reached the allowed host's server (the
	// secfake) and nothing else: no DNS query, no canary.
	allowedHostOnly
	// resolvedOnly: the client failed, and the nonce, carried in an
	// allowlisted name, went no further than the upstream DNS query that
	// resolving the name takes (the refusal is of the answer); no
	// connection reached the address the name was rebound to.
	resolvedOnly
	// info: the row reads the output itself.
	info
)

// secProbe is one probe with its nonce and what it must show.
type secProbe struct {
	row    int
	name   string
	nonce  string
	expect expectation
	shell  string
}

// probeSet collects a session's probes and checks them afterwards.
type probeSet struct {
	probes []secProbe
	res    map[string]probeResult
	ran    bool // the session ran and reported
}

func (ps *probeSet) add(row int, name string, expect expectation, nonce, shell string) {
	ps.probes = append(ps.probes, secProbe{row, name, nonce, expect, shell})
}

func (ps *probeSet) list() []probe {
	var out []probe
	for _, p := range ps.probes {
		out = append(out, probe{p.name, p.shell})
	}
	return out
}

func (ps *probeSet) get(name string) (secProbe, bool) {
	for _, p := range ps.probes {
		if p.name == name {
			return p, true
		}
	}
	return secProbe{}, false
}

func (ps *probeSet) ofRow(row int) []secProbe {
	var out []secProbe
	for _, p := range ps.probes {
		if p.row == row {
			out = append(out, p)
		}
	}
	return out
}

// evidence accumulates one row's proof for the final table.
type evidence struct {
	mu    sync.Mutex
	parts []string
}

func (ev *evidence) add(format string, a ...any) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	ev.parts = append(ev.parts, fmt.Sprintf(format, a...))
}

func (ev *evidence) String() string {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	return strings.Join(ev.parts, "; ")
}

// check applies each probe's expectation and adds a summary to ev.
func (s *secSuite) check(t *testing.T, ev *evidence, ps *probeSet, probes []secProbe) {
	t.Helper()
	if !ps.ran {
		t.Errorf("the session with these probes did not run")
		return
	}
	var nBlocked, nArrived, nOnly, nResolved int
	var why []string
	for _, p := range probes {
		r, ok := ps.res[p.name]
		if !ok {
			t.Errorf("probe %q did not report", p.name)
			continue
		}
		switch p.expect {
		case blocked:
			leaked := false
			if r.RC == 0 {
				t.Errorf("LEAK: %s succeeded but must be blocked: %s", p.name, r)
				leaked = true
			}
			if got := s.env.seen(p.nonce); p.nonce != "" && len(got) > 0 {
				t.Errorf("LEAK: %s: nonce %s reached:\n%s\nprobe: %s", p.name, p.nonce, strings.Join(got, "\n"), r)
				leaked = true
			}
			if !leaked {
				nBlocked++
				why = append(why, failureReason(r))
			}
		case arrives:
			if r.RC != 0 {
				t.Errorf("%s must get through but failed: %s", p.name, r)
			}
			if got := s.env.seen(p.nonce); len(got) == 0 {
				t.Errorf("%s: nonce %s arrived nowhere: the path is broken or the logs are blind\nprobe: %s", p.name, p.nonce, r)
			} else {
				nArrived++
			}
		case resolvedOnly:
			var beyond []string
			queried := false
			for _, line := range s.env.seen(p.nonce) {
				dnsQuery := strings.HasPrefix(line, "secfake: ") && strings.Contains(line, " dns ")
				dnsWire := strings.Contains(line, " sniff ") && strings.Contains(line, " proto=17 ") &&
					(strings.Contains(line, " dst="+secFakeIP+" ") || strings.Contains(line, " src="+secFakeIP+" "))
				queried = queried || dnsQuery
				if !dnsQuery && !dnsWire {
					beyond = append(beyond, line)
				}
			}
			if r.RC == 0 {
				t.Errorf("LEAK: %s succeeded but must be blocked: %s", p.name, r)
			}
			if len(beyond) > 0 {
				t.Errorf("LEAK: %s: nonce %s went beyond the DNS query:\n%s", p.name, p.nonce, strings.Join(beyond, "\n"))
			}
			if r.RC != 0 && len(beyond) == 0 {
				nResolved++
				why = append(why, failureReason(r))
				if !queried {
					t.Logf("%s: the router did not even ask upstream", p.name)
				}
			}
		case allowedHostOnly:
			got := s.env.seen(p.nonce)
			var elsewhere []string
			for _, line := range got {
				// The sniffer sees the router's connection to the fake, which
				// is the allowed host.
				toFake := strings.Contains(line, " sniff ") &&
					(strings.Contains(line, " dst="+secFakeIP+" ") || strings.Contains(line, " src="+secFakeIP+" "))
				if toFake {
					continue
				}
				if !strings.HasPrefix(line, "secfake: ") || strings.Contains(line, " dns ") {
					elsewhere = append(elsewhere, line)
				}
			}
			switch {
			case len(elsewhere) > 0:
				t.Errorf("LEAK: %s: nonce %s reached more than the allowed host:\n%s", p.name, p.nonce, strings.Join(elsewhere, "\n"))
			case len(got) == 0:
				t.Errorf("%s: nonce %s did not reach the allowed host either: %s", p.name, p.nonce, r)
			default:
				nOnly++
			}
		}
	}
	if nBlocked+nResolved > 0 {
		ev.add("%d probes failed at the client (%s) and their nonces are absent from %s", nBlocked+nResolved, summarise(why), s.logsDesc())
	}
	if nResolved > 0 {
		ev.add("of these, %d carried the nonce in an allowlisted name, which only the router's upstream DNS query saw", nResolved)
	}
	if nOnly > 0 {
		ev.add("%d reached the allowed host's server only (no DNS query, no canary)", nOnly)
	}
	if nArrived > 0 {
		ev.add("%d allowed probes arrived", nArrived)
	}
}

// checkControl asserts the opened-path runs arrived: the harness can see a
// leak of each probe kind.
func (s *secSuite) checkControl(t *testing.T, ev *evidence, what string, nonces ...string) {
	t.Helper()
	if !s.control.ran {
		t.Errorf("the control run did not report")
		return
	}
	missing := 0
	for _, n := range nonces {
		if len(s.env.seen(n)) == 0 {
			missing++
			t.Errorf("self-check: %s: nonce %s never arrived over the opened path: the harness could not see this leak", what, n)
		}
	}
	if missing == 0 {
		ev.add("self-check: the same %s over an opened path arrived (%d/%d nonces seen)", what, len(nonces), len(nonces))
	}
}

func (s *secSuite) logsDesc() string {
	return "every log (2 fakes, 3 canaries, gateway canary, sniffer, host canaries)"
}

// failureReason is the first telling line of a failed probe's output.
func failureReason(r probeResult) string {
	out := strings.ToLower(r.Out)
	for _, k := range []struct{ match, say string }{
		{"status: nxdomain", "NXDOMAIN"},
		{"answer: 0,", "empty answer"},
		{"enetunreach", "no route"},
		{"network is unreachable", "no route"},
		{"could not resolve", "name not resolved"},
		{"eperm", "EPERM"},
		{"operation not permitted", "EPERM"},
		{"eacces", "EACCES"},
		{"permission denied", "EACCES"},
		{"connection reset", "reset by router"},
		{"econnreset", "reset by router"},
		{"closed without a reply", "closed by router"},
		{"no echo", "closed without an echo"},
		{"could not connect", "no route or refused"},
		{"unexpected eof", "closed by router"},
		{"ssl_error_syscall", "closed by router"},
		{"econnrefused", "refused"},
		{"connection refused", "refused"},
		{"couldn't connect", "refused"},
		{"timed out", "timeout"},
		{"timeout", "timeout"},
		{"no servers could be reached", "no server reachable"},
	} {
		if strings.Contains(out, k.match) {
			return k.say
		}
	}
	return fmt.Sprintf("rc=%d", r.RC)
}

// summarise counts reasons: "no route x6, NXDOMAIN x8".
func summarise(reasons []string) string {
	count := map[string]int{}
	var order []string
	for _, r := range reasons {
		if count[r] == 0 {
			order = append(order, r)
		}
		count[r]++
	}
	var out []string
	for _, r := range order {
		out = append(out, fmt.Sprintf("%s x%d", r, count[r]))
	}
	return strings.Join(out, ", ")
}

// dnsProbe succeeds only on a NOERROR answer with records.
func dnsProbe(args string) string {
	return `out=$(dig +time=2 +tries=1 ` + args + ` 2>&1); echo "$out"; echo "$out" | grep -q 'status: NOERROR' && ! echo "$out" | grep -q 'ANSWER: 0,'`
}

// routerVar sets $R to the router's address, the pod's only resolver.
const routerVar = `R=$(awk '/^nameserver/ {print $2; exit}' /etc/resolv.conf); `

// tcpEcho succeeds only when the payload comes back from an echo port.
func tcpEcho(host, port, payload string) string {
	return ncSend(host, port, payload) + " | grep -q " + shellQuote(payload) + " || { echo 'no echo: closed by the far end'; false; }"
}

// directTarget is a host and the ports row 2 sends to.
type directTarget struct {
	host  string
	ports []string
}

// directTargets are every fake, canary and the egress gateway, on TCP
// 22/80/443 (and the proxy port) and UDP 53/443. The harness's own fake
// serves fewer ports: it gets the ones it logs.
func directTargets() []directTarget {
	all := []string{"tcp|22", "tcp|80", "tcp|443", "tcp|3128", "udp|53", "udp|443"}
	out := []directTarget{{secFakeIP, all}, {fakeIP, []string{"tcp|443", "tcp|2222", "udp|53"}}, {egressGW, all}}
	for _, c := range secCanaries {
		out = append(out, directTarget{c.ip, all})
	}
	return out
}

// directSpecs are sec.py direct's arguments: one fresh nonce per host and
// port, so that each arrival (or its absence) is told apart.
func directSpecs(t *testing.T, targets ...directTarget) (args string, nonces []string) {
	var specs []string
	for _, tg := range targets {
		h := tg.host
		for _, pp := range tg.ports {
			proto, port, _ := strings.Cut(pp, "|")
			n := newNonce(t)
			nonces = append(nonces, n)
			specs = append(specs, shellQuote(proto+"|"+h+"|"+port+"|"+n))
		}
	}
	return strings.Join(specs, " "), nonces
}

// writeLaunchFiles puts the probe tool and the row's files in dir.
func writeLaunchFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	files["sec.py"] = secPy
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// pingPattern is ping -p's pad: the nonce's first 16 bytes, in hex.
func pingPattern(nonce string) string {
	return fmt.Sprintf("%x", needle(nonce))
}

// lineWith returns the lines of s containing all of parts.
func lineWith(s string, parts ...string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok && l != "" {
			out = append(out, l)
		}
	}
	return out
}

func uniq(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

// parallelScript runs probes width at a time and reports them in order,
// in probeScript's format: the security sessions batch about a hundred
// probes, most of which only wait for a refusal or a timeout.
func parallelScript(probes []probe, width int) string {
	var b strings.Builder
	b.WriteString("d=$(mktemp -d)\n")
	for i, p := range probes {
		fmt.Fprintf(&b, "p%d() {\n%s\n}\n", i, p.Shell)
	}
	for i := range probes {
		fmt.Fprintf(&b, "( t0=$(date +%%s%%N); p%d >$d/%d 2>&1 </dev/null; echo $? >$d/%d.rc; t1=$(date +%%s%%N); echo $(( (t1 - t0) / 1000000 )) >$d/%d.ms ) &\n", i, i, i, i)
		if (i+1)%width == 0 {
			b.WriteString("wait\n")
		}
	}
	b.WriteString("wait\n")
	for i, p := range probes {
		fmt.Fprintf(&b, "printf '%s %%s rc=%%d ms=%%d\\n%%s\\n%s-end\\n' %s \"$(cat $d/%d.rc)\" \"$(cat $d/%d.ms)\" \"$(cat $d/%d)\"\n",
			probeMark, probeMark, shellQuote(p.Name), i, i, i)
	}
	b.WriteString("rm -rf $d\nexit 0\n")
	return b.String()
}
