//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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

// secProbe is one probe with its nonce and what it must show. A blocked
// or resolvedOnly probe declares the failure it expects (why): a probe
// that fails another way, because a tool is missing, takes other options
// or crashes, proves nothing and fails its row.
type secProbe struct {
	row    int
	name   string
	nonce  string
	expect expectation
	why    reason
	shell  string
}

// reason is the one way a blocked probe may fail: one of the exit codes,
// and output matching every pattern.
type reason struct {
	say  string
	rc   []int
	want []*regexp.Regexp
}

// because declares a reason: what the table calls it, the exit codes the
// probe's command gives for it, and patterns its output must all match.
func because(say string, rc []int, want ...string) reason {
	r := reason{say: say, rc: rc}
	for _, w := range want {
		r.want = append(r.want, regexp.MustCompile(w))
	}
	return r
}

// noReason is for probes that must succeed or that the row reads itself.
var noReason reason

// brokenProbe is output that says the probe itself did not run as
// written: a missing command or file, a usage error, a missing feature,
// a traceback. It never counts as the defence's doing.
var brokenProbe = regexp.MustCompile(`(?i)not found|no such file or directory|traceback \(most recent call last\)|` +
	`curl: \(2\)|doesn't support|does not support|not supported|unrecognized option|invalid option|unknown option|` +
	`usage:|can't open file|unknown command|syntax error|unbound variable|permission denied: '\./`)

// mismatch says why r does not show reason why; "" when it does.
func (why reason) mismatch(r probeResult) string {
	if len(why.rc) == 0 {
		return "the probe declares no expected failure"
	}
	switch {
	case r.RC == 126 || r.RC == 127:
		return fmt.Sprintf("exit %d: a command was not found or could not run, so the probe never reached the defence", r.RC)
	case r.RC == 2 && !slices.Contains(why.rc, 2):
		return "exit 2: a usage error or a missing feature, not a refusal"
	}
	if m := brokenProbe.FindString(r.Out); m != "" {
		return fmt.Sprintf("the output says %q: the probe did not run as written", m)
	}
	if !slices.Contains(why.rc, r.RC) {
		return fmt.Sprintf("exit %d, but %s exits %v", r.RC, why.say, why.rc)
	}
	for _, w := range why.want {
		if !w.MatchString(r.Out) {
			return fmt.Sprintf("the output does not match /%s/", w)
		}
	}
	return ""
}

// wantReason fails t unless r failed for reason why.
func wantReason(t *testing.T, name string, r probeResult, why reason) bool {
	t.Helper()
	if m := why.mismatch(r); m != "" {
		t.Errorf("%s failed, but not for the reason the defence gives (want %s): %s; %s", name, why.say, m, r)
		return false
	}
	return true
}

// The failures the probes expect. dnsProbe prints dig's own exit status
// ("dig rc=N": 0 for any answer, NXDOMAIN included, 9 for no reply) and
// exits 1 when the answer has no records; sec.py prints the errno of the
// call that failed and exits 1; tcpEcho prints nc's status and the size
// of the reply.
var (
	rNXDOMAIN   = because("NXDOMAIN", []int{1}, `(?m)^dig rc=0$`, `status: NXDOMAIN`, `ANSWER: 0,`)
	rNoData     = because("empty answer", []int{1}, `(?m)^dig rc=0$`, `status: NOERROR`, `ANSWER: 0,`)
	rDigNoRoute = because("no route to the resolver (ENETUNREACH)", []int{1}, `(?m)^dig rc=9$`,
		`(?m)^;; (UDP|TCP) setup with \S+ for \S+ failed: network unreachable\.$`, `no servers could be reached`)
	rDigClosed = because("closed by the router", []int{1}, `(?m)^dig rc=9$`,
		`(?m)^;; communications error to \S+: end of file$`, `no servers could be reached`)
	rSweep = because("only the router answers, NXDOMAIN; nothing else replies", []int{1},
		`(?m)^replies: \S+/udp rcode=3 answers=0; \S+/tcp rcode=3 answers=0$`, `(?m)^no reply: (ECONNREFUSED x\d+, )?timeout x\d+$`,
		`(?m)^answered with records: none$`)
	rNoRoute       = because("ENETUNREACH", []int{1}, `(?m)^(tcp|udp) \S+ ENETUNREACH$`)
	rRefused       = because("ECONNREFUSED (nothing listens in the pod)", []int{1}, `(?m)^(tcp|udp) \S+ ECONNREFUSED$`)
	rNoAddr6       = because("no IPv6 address (EADDRNOTAVAIL)", []int{1}, `(?m)^(tcp|udp) \S+ EADDRNOTAVAIL$`)
	rSendtoNoRoute = because("sendto: ENETUNREACH", []int{1}, `(?m)^[A-Za-z_ ]+ sendto \S+: ENETUNREACH$`)
	rLL6NoAddr     = because("no IPv6 address (EADDRNOTAVAIL)", []int{1}, `(?m)^ff02::1%eth0: EADDRNOTAVAIL$`, `(?m)^ff02::2%eth0: EADDRNOTAVAIL$`)
	rPingEPERM     = because("EPERM (no NET_RAW)", []int{2}, `(?m)^ping: socket: Operation not permitted$`)
	rRawEPERM      = because("EPERM (no NET_RAW)", []int{1}, `(?m)^AF_INET/SOCK_RAW/UDP: EPERM$`, `(?m)^AF_INET/SOCK_RAW/ICMP: EPERM$`,
		`(?m)^AF_PACKET/SOCK_RAW: EPERM$`)
	rRawSendEPERM = because("EPERM (no NET_RAW)", []int{1}, `(?m)^raw socket: EPERM$`)
	rTunEPERM     = because("EPERM (no NET_ADMIN)", []int{1}, `(?m)^TUNSETIFF: EPERM$`)
	rIPEPERM      = because("EPERM (no NET_ADMIN)", []int{2}, `(?m)^RTNETLINK answers: Operation not permitted$`)
	rTuntapEPERM  = because("EPERM (no NET_ADMIN)", []int{1}, `(?m)^ioctl\(TUNSETIFF\): Operation not permitted$`)
	rHelloClosed  = because("closed by the router", []int{1}, `(?m)^hello of \d+ bytes: (closed without a reply|ECONNRESET)$`)
	rTLSClosed    = because("closed by the router", []int{35}, `(?m)^curl: \(35\) .*(unexpected eof while reading|Connection reset by peer)`)
	rNoEcho       = because("closed by the router", []int{1}, `(?m)^nc rc=0, reply of 0 bytes$`, `(?m)^no echo: closed by the far end$`)
	rCurlNXDOMAIN = because("name not resolved", []int{6}, `(?m)^curl: \(6\) Could not resolve host: `)
	rCurlNoRoute  = because("ENETUNREACH", []int{7}, `(?m)^\* Immediate connect fail for \S+: Network is unreachable$`)
	rCurlNoAddr6  = because("no IPv6 address (EADDRNOTAVAIL)", []int{7}, `(?m)^\* Immediate connect fail for \S+: Cannot assign requested address$`)
	rNoName       = because("no such name (EAI_NONAME)", []int{1}, `(?m)^getaddrinfo \S+: EAI_NONAME `)
	rNoResolver   = because("no resolver reachable (EAI_AGAIN)", []int{1}, `(?m)^getaddrinfo \S+: EAI_AGAIN `)
)

// probeSet collects a session's probes and checks them afterwards.
type probeSet struct {
	// session names the shared session that runs the set, in the
	// refusals its rows expect (s.refuse) and s.routerLogs.
	session string
	probes  []secProbe
	res     map[string]probeResult
	ran     bool // the session ran and reported
	// directNonces are row 2's direct sends, one per host and port.
	directNonces []string
}

func (ps *probeSet) add(row int, name string, expect expectation, why reason, nonce, shell string) {
	ps.probes = append(ps.probes, secProbe{row, name, nonce, expect, why, shell})
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
			if !leaked && wantReason(t, p.name, r, p.why) {
				nBlocked++
				why = append(why, p.why.say)
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
			if r.RC != 0 && len(beyond) == 0 && wantReason(t, p.name, r, p.why) {
				nResolved++
				why = append(why, p.why.say)
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

// dnsProbe succeeds only on a NOERROR answer with records. It prints
// dig's output and exit status.
func dnsProbe(args string) string {
	return `out=$(dig +time=2 +tries=1 ` + args + ` 2>&1); rc=$?; echo "$out"; echo "dig rc=$rc"; ` +
		`[ $rc = 0 ] && echo "$out" | grep -q 'status: NOERROR' && ! echo "$out" | grep -q 'ANSWER: 0,'`
}

// routerVar sets $R to the router's address, the pod's only resolver
// (with sed and head: a nested container has no /etc/alternatives, so
// no awk).
const routerVar = `R=$(sed -n 's/^nameserver[[:space:]]*//p' /etc/resolv.conf | head -n1); `

// tcpEcho succeeds only when the payload comes back from an echo port. It
// prints nc's status and the reply's size: "nc rc=0, reply of 0 bytes" is
// a connection the far end closed without a word.
func tcpEcho(host, port, payload string) string {
	return "got=$(" + ncSend(host, port, payload) + " 2>&1); rc=$?; echo \"$got\"; echo \"nc rc=$rc, reply of ${#got} bytes\"; " +
		"echo \"$got\" | grep -q " + shellQuote(payload) + " || { echo 'no echo: closed by the far end'; false; }"
}

// curlV is curl with its connection log: curl's own message does not say
// which errno a connect failed with. Only curl's error and the lines
// about connecting are kept. (No printf: row 9 fills %s with a nonce.)
func curlV(args string) string {
	return "out=$(curl -v " + args + " 2>&1); rc=$?; " +
		`echo "$out" | grep -E '^curl: |^\* .*(Trying|[Cc]onnect|Immediate|[Ff]ailed)'; (exit $rc)`
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

// preflight is the first thing each security session's script runs: it
// checks every command and feature that session's probes use, reports
// as a probe named name, and ends the script with exit 3 when anything is
// missing, so that no probe can fail for want of a tool and count as
// blocked. cmds are commands; features are "description|shell test".
func preflight(name string, cmds []string, features ...string) string {
	var b strings.Builder
	b.WriteString("pf_missing=; pf_n=0\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "pf_n=$((pf_n+1)); command -v %s >/dev/null 2>&1 || pf_missing=\"$pf_missing\n  command %s\"\n", c, c)
	}
	for _, f := range features {
		desc, test, _ := strings.Cut(f, "|")
		fmt.Fprintf(&b, "pf_n=$((pf_n+1)); ( %s ) >/dev/null 2>&1 </dev/null || pf_missing=\"$pf_missing\n  %s\"\n", test, strings.ReplaceAll(desc, `"`, `'`))
	}
	fmt.Fprintf(&b, "if [ -n \"$pf_missing\" ]; then printf '%s %%s rc=1 ms=0\\npreflight: missing inside the sandbox:%%b\\n%s-end\\n' %s \"$pf_missing\"; exit 3; fi\n",
		probeMark, probeMark, shellQuote(name))
	fmt.Fprintf(&b, "printf '%s %%s rc=0 ms=0\\npreflight: %%d checks passed\\n%s-end\\n' %s $pf_n\n", probeMark, probeMark, shellQuote(name))
	return b.String()
}

// Preflight features the security sessions share.
const (
	pfSecPy = "python3 -S ./sec.py and the modules and socket constants it uses|test -r ./sec.py && python3 -S -c " +
		"'import errno, os, random, socket, ssl, struct, subprocess, sys, threading, time, fcntl; " +
		"socket.MSG_DONTROUTE; socket.AF_PACKET; socket.SOCK_RAW; socket.IPPROTO_RAW; socket.AF_UNIX; socket.if_nametoindex; socket.gaierror; socket.EAI_AGAIN; socket.EAI_NONAME'"
	pfNcN       = `nc -N (OpenBSD netcat: close after stdin ends)|nc -h 2>&1 | grep -qE '^usage: nc \[-[[:alnum:]]*N'`
	pfDigTCP    = `dig with +tcp|dig -h 2>&1 | grep -qF '+[no]tcp'`
	pfPingPad   = "ping -p (the pad pattern carries the nonce)|ping -h 2>&1 | grep -q -- '-p <pattern>'"
	pfCurl6     = "curl with IPv6 (curl -6)|curl -V | grep -qw IPv6"
	pfUnshareU  = "unshare -Ur (a user namespace of the agent's own)|unshare -Ur true"
	pfUnshareUm = "unshare -Urm with bind mounts (row 9's edited files)|unshare -Urm sh -c 'mount --bind /etc/hostname /etc/hostname'"
	pfTun       = "/dev/net/tun (the tun probes open it)|test -c /dev/net/tun"
	pfIPTuntap  = "ip tuntap (iproute2)|ip tuntap help 2>&1 | grep -q 'ip tuntap'"
	pfCA        = "./ca.pem (the test CA)|test -s ./ca.pem"
)

// parallelScript runs probes width at a time and reports them in order,
// in probeScript's format: the security sessions batch about a hundred
// probes, most of which only wait for a refusal or a timeout. pre runs
// first (the preflight), post after the reports.
func parallelScript(probes []probe, width int, pre, post string) string {
	var b strings.Builder
	b.WriteString(pre)
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
	b.WriteString("rm -rf $d\n")
	b.WriteString(post)
	b.WriteString("exit 0\n")
	return b.String()
}
