//go:build e2e

package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSecurity is issue 3: every known way out of the sandbox, each with
// evidence. A probe of a blocked path passes only when the client failed
// AND its fresh nonce is in no log: the harness's fake, the security fake,
// three canary containers outside the allowed upstream range, a canary and
// a packet sniffer in podman's rootless network namespace (the egress
// gateway), and canaries of the test on the host's loopback and own
// address. Each probe kind is also run over a deliberately opened path
// (an allowlisted name, a wider UPSTREAM_ALLOW, or a plain container on
// the egress network) and must arrive there, so a blind harness cannot
// pass. Probes are batched: one main session, one with the canaries'
// ranges allowed, one control container, one nested-podman session; rows
// 13, 14 and 27 run their own sessions.
func TestSecurity(t *testing.T) {
	env, err := startSecEnv()
	t.Cleanup(env.close)
	s := &secSuite{env: env, setupErr: err}
	registerSecTable()
	if err == nil {
		s.runShared(t)
		secTable.Lock()
		secTable.header = fmt.Sprintf("fixtures %.1fs; shared: %s", env.setupTime.Seconds(), strings.Join(s.took, ", "))
		secTable.Unlock()
	}
	for _, r := range secRows {
		row(t, fmt.Sprintf("%02d %s", r.n, r.title), func(t *testing.T) {
			ev := &evidence{}
			start := time.Now()
			t.Cleanup(func() { recordSecRow(r.n, r.title, t, ev, time.Since(start)) })
			if s.setupErr != nil {
				t.Fatalf("security fixtures failed: %v", s.setupErr)
			}
			if len(s.preflightErrs) > 0 {
				t.Fatalf("PREFLIGHT FAILED: the sandbox lacks what the probes need, so no row proves anything:\n%s", indent(strings.Join(s.preflightErrs, "\n")))
			}
			if len(s.settleErrs) > 0 {
				t.Fatalf("MARKERS MISSING %s (see above): the logs were never shown complete, so no absence in them proves anything", strings.Join(s.settleErrs, ", "))
			}
			r.fn(s, t, ev)
		})
	}
}

var secRows = []struct {
	n     int
	title string
	fn    func(*secSuite, *testing.T, *evidence)
}{
	{1, "DNS exfiltration: denied names over UDP and TCP, every type, long labels, to the router and the whole session subnet", (*secSuite).row1},
	{2, "direct IP: TCP 22/80/443 and UDP 53/443 to the fakes, canaries and egress gateway have no route", (*secSuite).row2},
	{3, "IPv6: no IPv6 address or route, curl -6 to the machine's IPv6 fails, AAAA empty, link-local reaches nothing", (*secSuite).row3},
	{4, "UDP, QUIC and ICMP: ping fails, a QUIC Initial and UDP datagrams to an allowed name's address go nowhere", (*secSuite).row4},
	{5, "SNI tricks at the router: only allowlisted names reach the TLS server", (*secSuite).row5},
	{6, "HTTPS/SVCB records (ECH keys) are never answered", (*secSuite).row6},
	{7, "rebinding and SSRF through the router: loopback, egress gateway and canaries outside the allowed range are refused", (*secSuite).row7},
	{8, "the host: its loopback, its own address and host.containers.internal are unreachable, directly and via the router", (*secSuite).row8},
	{9, "editing /etc/resolv.conf or /etc/hosts gains nothing", (*secSuite).row9},
	{10, "raw sockets and new user namespaces: no NET_RAW/NET_ADMIN in the pod's network, even after unshare -Ur", (*secSuite).row10},
	{11, "nested podman has exactly the agent's egress", (*secSuite).row11},
	{12, "no podman API socket or host runtime directory is visible inside", (*secSuite).row12},
	{13, "router and forwarder are invisible; killing either fails closed and ends the session non-zero", (*secSuite).row13},
	{14, "a router whose config fails to load stops the launch before the agent starts", (*secSuite).row14},
	// Rows 15-20 are TestFileBoundary's (files_test.go).
	{27, "another session: a second session reaches neither a running session's router (DNS, its port entry, 443, its egress address) nor its pod (TCP, UDP, MSG_DONTROUTE); the sniffer sees traffic on session bridges", (*secSuite).row27},
	{28, "the uplink: sends to the machine leave podman's network namespace through slirp4netns or pasta, and the sniffer logs them there", (*secSuite).row28},
}

// secSuite holds the shared sessions' probes and results.
type secSuite struct {
	env      *secEnv
	setupErr error

	main, opened, control, nested probeSet
	// kube is rows 1-8's probes again, in the agent pod of `kube export
	// --runtime podman` run by podman kube play (security_kube_test.go).
	kube              probeSet
	kubePeer          []secProbe // row 5's probes from a peer with the link key (runKubePeer)
	kubeQuiet         []string   // what the canaries logged during it
	kubeSkipped       []string   // probes of rows 1-8 not run there, and why
	kubeBroken        string     // why the kube session proves nothing, "" when it ran
	mainMark, mainEnd marks      // the logs before and after the main session
	quietLines        []string
	controlNonces     map[string][]string // probe kind -> nonces sent over opened paths
	edited            map[string]string   // row 9's names
	nestedModes       []string
	nestedNonces      map[string]map[string]string // mode -> probe -> nonce
	took              []string                     // the shared sessions' times
	preflightErrs     []string                     // what the sessions' preflights found missing
	settleErrs        []string                     // the points whose markers did not all arrive
	routerLogs        map[string]string            // shared session -> its router's log
	refusals          []refusal                    // routerd refusals rows 7 and 8 expect
}

func (s *secSuite) allowlist(extra ...string) string {
	p := strconv.Itoa(s.env.hostPort)
	h := strings.ReplaceAll(s.env.hostIPs[0], ".", "-")
	lines := []string{
		"# e2e security allowlist",
		// Passthrough, as in defaultAllowlist: these rows read what the
		// client itself sent at the fake.
		"allowed.test passthrough", "*.wild.test passthrough", "allowed.test:2222", "*." + rebindSuffix + " passthrough",
		"ip-127-0-0-1-lo." + rebindSuffix + ":5353 # routerd's own resolver on the router's loopback",
		"ip-127-0-0-1-hl." + rebindSuffix + ":" + p + " # the host canaries' port on the router's loopback",
		"ip-10-99-0-1-gw." + rebindSuffix + ":2222 # the egress gateway",
		"ip-10-99-0-200-c0." + rebindSuffix + ":2222",
		"ip-172-31-99-20-c1." + rebindSuffix + ":2222",
		"ip-192-168-99-20-c2." + rebindSuffix + ":2222",
		"ip-" + h + "-host." + rebindSuffix + ":" + p + " # this machine's own address",
		"ip-10-99-0-11-dns." + rebindSuffix + ":53 # opened path: DNS over TCP to the fake",
	}
	return strings.Join(append(lines, extra...), "\n") + "\n"
}

func (s *secSuite) sessionEnv(allow string) map[string]string {
	return map[string]string{
		"AGENT_SANDBOX_UPSTREAM_DNS":   secFakeIP,
		"AGENT_SANDBOX_UPSTREAM_ALLOW": allow,
	}
}

// runShared runs the batched sessions every row reads.
func (s *secSuite) runShared(t *testing.T) {
	s.controlNonces = map[string][]string{}
	s.routerLogs = map[string]string{}
	s.main.session, s.kube.session = "main", "kube"
	s.buildMain(t)
	s.buildOpened(t)
	s.buildControl(t)
	s.buildNested(t)
	s.buildKube(t)
	s.runMain(t)
	s.runOpened(t)
	s.runControl(t)
	s.runNested(t)
	s.runKube(t)
}

// Preflight of each shared session: every command and feature its probes
// use (see preflight).
var (
	pfSessionCmds = []string{"sh", "curl", "dig", "python3", "ip", "unshare", "mount", "nc", "ping", "getent", "find", "ps", "capsh",
		"grep", "sed", "head", "wc", "od", "tr", "date", "mktemp", "cat", "rm", "touch", "sleep", "seq"}
	pfSessionFeatures = []string{pfSecPy, pfCA, pfNcN, pfDigTCP, pfPingPad, pfCurl6, pfUnshareU, pfUnshareUm, pfTun, pfIPTuntap}
	pfControlCmds     = []string{"sh", "dig", "python3", "ip", "ping", "nc", "getent", "grep", "sed", "head", "cut", "wc", "seq", "sleep", "date", "mktemp", "cat"}
	pfNestedCmds      = []string{"sh", "podman", "tar", "ip", "mkdir", "ln", "rm"}
	pfNestedInnerCmds = []string{"sh", "dig", "python3", "ip", "curl", "sed", "head", "grep", "id", "date"}
)

// checkPreflight records a session's failed or missing preflight: every
// row then fails, naming what the sandbox lacks.
func (s *secSuite) checkPreflight(t *testing.T, session, name string, res map[string]probeResult) {
	t.Helper()
	r, ok := res[name]
	switch {
	case !ok:
		s.preflightErrs = append(s.preflightErrs, session+": the preflight did not report")
	case r.RC != 0:
		s.preflightErrs = append(s.preflightErrs, session+": "+strings.TrimSpace(r.Out))
	default:
		return
	}
	t.Errorf("PREFLIGHT FAILED in the %s session: the sandbox lacks what the probes need, so no probe proves anything:\n%s", session, indent(r.Out))
}

func (s *secSuite) runMain(t *testing.T) {
	s.mainMark = s.env.mark()
	dir := launchDir(t)
	writeLaunchFiles(t, dir, s.editedFiles())
	s.main.res = s.parallelSession(t, "main", &s.main, sessionOpts{Dir: dir, Allowlist: s.allowlist(), Env: s.sessionEnv(secAllow), Timeout: 3 * time.Minute},
		preflight("preflight", pfSessionCmds, append(pfSessionFeatures, "./edited.sh (row 9)|test -r ./edited.sh")...))
	// Nothing in the main session opens a path to a canary: every line a
	// canary's listener logged meanwhile is a leak, whatever it carried.
	// The window closes once the markers are in: what reached a listener
	// before them is in its log by then.
	s.settle(t, "after the main session")
	s.mainEnd = s.env.mark()
	s.quietLines = s.env.listenerLinesSince(s.mainMark, s.env.canaryNames()...)
}

func (s *secSuite) runOpened(t *testing.T) {
	dir := launchDir(t)
	writeLaunchFiles(t, dir, map[string]string{})
	wide := secAllow + ",10.99.0.0/24,172.31.99.0/24,192.168.99.0/24"
	p := strconv.Itoa(s.env.hostPort)
	s.opened.res = s.parallelSession(t, "opened-path", &s.opened, sessionOpts{Dir: dir,
		Allowlist: s.allowlist("host.containers.internal passthrough", "host.containers.internal:"+p),
		Env:       s.sessionEnv(wide), Timeout: 2 * time.Minute},
		preflight("preflight", pfSessionCmds, pfSecPy, pfCA, pfNcN, pfDigTCP))
}

func (s *secSuite) runNested(t *testing.T) {
	dir := launchDir(t)
	files := map[string]string{}
	for _, m := range s.nestedModes {
		files["nested-"+m+".sh"] = preflight(m+": preflight", pfNestedInnerCmds, pfSecPy, pfCA) + probeScript(s.nestedInner(t, m)...)
	}
	writeLaunchFiles(t, dir, files)
	// Not probeSession: the nested containers' own probe reports replace
	// their outer probe's, which is only seen when a container cannot start.
	r := runSession(t, sessionOpts{Dir: dir, Allowlist: s.allowlist(), Env: s.sessionEnv(secAllow), Timeout: 4 * time.Minute,
		Cmd: []string{"sh", "-c", preflight("preflight", pfNestedCmds, "./nested-*.sh|test -r ./nested-default.sh") + probeScript(s.nested.list()...)}})
	wantCode(t, r, 0)
	s.took = append(s.took, fmt.Sprintf("nested session %.1fs", r.Elapsed.Seconds()))
	s.nested.res = parseProbes(r.Stdout())
	s.nested.ran = len(s.nested.res) > 0
	s.checkPreflight(t, "nested", "preflight", s.nested.res)
	// A mode that cannot start (a private network namespace) never runs
	// its preflight; the modes that must start must pass it.
	for _, m := range []string{"default", "host"} {
		s.checkPreflight(t, "nested "+m, m+": preflight", s.nested.res)
	}
	// Row 11 reads the nested containers' nonces as absent right away.
	s.settle(t, "after the nested session")
}

// settle waits for the markers after a batch of probes (secEnv.settle);
// if one is missing, every row fails.
func (s *secSuite) settle(t *testing.T, what string) {
	t.Helper()
	if !s.env.settle(t, what) {
		s.settleErrs = append(s.settleErrs, what)
	}
}

// waitDAD waits until no IPv6 address is tentative: a fresh container's
// link-local address cannot send until duplicate detection is done.
const waitDAD = "for i in $(seq 30); do ip -6 addr show dev eth0 | grep -q tentative || break; sleep 0.1; done; "

// parallelSession runs a probe set in one session, several at a time,
// after the preflight pre. Before the session ends, the router's log is
// kept in s.routerLogs[name]: the agent touches probes-done and waits for
// router-logged (see routerLogAtEnd).
func (s *secSuite) parallelSession(t *testing.T, name string, ps *probeSet, o sessionOpts, pre string) map[string]probeResult {
	t.Helper()
	post := "touch probes-done; i=0; while [ ! -e router-logged ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done\n"
	o.Cmd = []string{"sh", "-c", parallelScript(ps.list(), 32, pre, post)}
	ended := make(chan struct{})
	logged := make(chan string, 1)
	go func() { logged <- routerLogAtEnd(o.Dir, ended) }()
	r := runSession(t, o)
	close(ended)
	s.routerLogs[name] = <-logged
	s.took = append(s.took, fmt.Sprintf("%s session %.1fs", name, r.Elapsed.Seconds()))
	wantCode(t, r, 0)
	res := parseProbes(r.Stdout())
	s.checkPreflight(t, name, "preflight", res)
	if res["preflight"].RC == 0 {
		for _, p := range ps.probes {
			if _, ok := res[p.name]; !ok {
				t.Errorf("probe %q did not report", p.name)
			}
		}
	}
	if pf, ok := res["preflight"]; ok && pf.RC == 0 && s.routerLogs[name] == "" {
		t.Errorf("the %s session's router log could not be read before it ended", name)
	}
	ps.ran = len(res) > 1
	return res
}

// routerLogAtEnd waits until the agent has touched probes-done in dir,
// reads the router's log (routerd, dnsmasq and nginx) while the router
// still exists, and lets the agent end by creating router-logged. It
// gives up when ended is closed first.
func routerLogAtEnd(dir string, ended <-chan struct{}) string {
	for {
		if _, err := os.Stat(filepath.Join(dir, "probes-done")); err == nil {
			break
		}
		select {
		case <-ended:
			return ""
		case <-time.After(50 * time.Millisecond):
		}
	}
	defer func() { _ = os.WriteFile(filepath.Join(dir, "router-logged"), nil, 0o644) }()
	return helperLog("router")
}

// refusal is a routerd line a row expects: "refused upstream address
// ADDR for HOST: WHY", in the log of one shared session's router.
type refusal struct {
	row                 int
	session, host, addr string
	why                 string
}

// wantRefusals asserts routerd refused each rebound name of row n, and
// for the reason the row expects: that refusal, not something before it,
// is what stopped the probe.
func (s *secSuite) wantRefusals(t *testing.T, ev *evidence, n int) {
	t.Helper()
	var seen []string
	for _, rf := range s.refusals {
		if rf.row != n {
			continue
		}
		log := s.routerLogs[rf.session]
		if log == "" {
			continue // parallelSession said so
		}
		re := regexp.MustCompile(`(?mi)^routerd: refused upstream address ` + regexp.QuoteMeta(rf.addr) + ` for ` +
			regexp.QuoteMeta(rf.host) + `\.?: (.*)$`)
		m := re.FindStringSubmatch(log)
		switch {
		case m == nil:
			t.Errorf("routerd never refused %s for %s in the %s session: what stopped the probe was not its address filter\nrouter log:\n%s",
				rf.addr, rf.host, rf.session, indent(lastLines(log, 40)))
		case m[1] != rf.why:
			t.Errorf("routerd refused %s for %s as %q, want %q", rf.addr, rf.host, m[1], rf.why)
		default:
			seen = append(seen, rf.addr+" ("+rf.why+")")
		}
	}
	if len(seen) > 0 {
		ev.add("routerd's log shows each rebound name's answer refused: %s", strings.Join(uniq(seen), ", "))
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// refuse records a refusal row n expects; host is the name nginx
// resolves, addr what the fake answers.
func (s *secSuite) refuse(n int, session, host, addr, why string) {
	s.refusals = append(s.refusals, refusal{n, session, host, addr, why})
}

// ipv6Addrs are the machine's own IPv6 addresses (none on some hosts).
func (e *secEnv) ipv6Addrs() []string {
	var out []string
	for _, ip := range e.hostIPs {
		if strings.Contains(ip, ":") {
			out = append(out, ip)
		}
	}
	return out
}

// buildMain is the main session: rows 1-10, 12 and 13's first half.
func (s *secSuite) buildMain(t *testing.T) {
	s.mainRow1(t, &s.main)
	s.mainRow2(t, &s.main)
	s.mainRow3(t, &s.main)
	s.mainRow4(t, &s.main)
	s.mainRow5(t, &s.main)
	s.mainRow6(t, &s.main)
	s.mainRow7(t, &s.main)
	s.mainRow8(t, &s.main)
	s.mainRow9(t, &s.main)
	s.mainRow10(t, &s.main)
	s.mainRow12(t, &s.main)
	s.mainRow13(t, &s.main)
}

// mainRow1: DNS exfiltration.
func (s *secSuite) mainRow1(t *testing.T, ps *probeSet) {
	n := func() string { return newNonce(t) }
	for _, typ := range []string{"A", "AAAA", "TXT", "MX"} {
		for _, tcp := range []string{"", "+tcp"} {
			nn := n()
			ps.add(1, "dns router "+typ+" "+map[string]string{"": "udp", "+tcp": "tcp"}[tcp], blocked, rNXDOMAIN, nn,
				routerVar+dnsProbe("@$R "+tcp+" "+nn+".denied.test "+typ))
		}
	}
	for _, tcp := range []string{"", "+tcp"} {
		nn := n()
		long := nn + strings.Repeat("a", 63-len(nn)) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63)
		ps.add(1, "dns router long labels "+map[string]string{"": "udp", "+tcp": "tcp"}[tcp], blocked, rNXDOMAIN, nn,
			routerVar+dnsProbe("@$R "+tcp+" "+long+".denied.test TXT"))
	}
	for _, typ := range []string{"TXT", "MX", "AAAA", "A"} {
		nn := n()
		name := nn + ".sub.wild.test"
		if typ == "A" {
			// An A query under an allowed wildcard is answered with the
			// forwarder's loopback address, locally: it must not be
			// forwarded either.
			ps.add(1, "dns wildcard "+typ+" answered locally", info, noReason, nn, routerVar+"dig +time=2 +tries=1 @$R "+name+" A")
			continue
		}
		ps.add(1, "dns wildcard "+typ+" not forwarded", blocked, rNoData, nn, routerVar+dnsProbe("@$R +tcp "+name+" "+typ))
	}
	nn := n()
	ps.add(1, "dns sweep of the session subnet", blocked, rSweep, nn, "python3 -S ./sec.py sweep "+nn)
	nn = n()
	ps.add(1, "dns to the fake", blocked, rDigNoRoute, nn, dnsProbe("@"+secFakeIP+" "+nn+".denied.test A"))
}

// mainRow2: direct IP.
func (s *secSuite) mainRow2(t *testing.T, ps *probeSet) {
	n := func() string { return newNonce(t) }
	specs, nonces := directSpecs(t, directTargets()...)
	ps.add(2, "direct tcp and udp to every fake, canary and the gateway", info, noReason, "", "python3 -S ./sec.py direct "+specs)
	ps.directNonces = nonces
	// MSG_DONTROUTE on an unconnected socket: the kernel looks for the
	// destination on a directly attached link, past the routing table. The
	// egress network is no link of the pod's, so there is none; from a
	// container on that network (the control) the same sendto arrives.
	for _, dst := range []string{egressGW, secFakeIP} {
		nn := n()
		ps.add(2, "udp sendto with MSG_DONTROUTE to "+dst, blocked, rSendtoNoRoute, nn, "python3 -S ./sec.py dontroute "+dst+" 443 "+nn)
	}
	ps.add(2, "routes", info, noReason, "", "ip -4 route; echo; ip route get "+secFakeIP+" 2>&1; ip route get "+egressGW+" 2>&1; true")
}

// mainRow3: IPv6.
func (s *secSuite) mainRow3(t *testing.T, ps *probeSet) {
	n := func() string { return newNonce(t) }
	p := strconv.Itoa(s.env.hostPort)
	var nn string
	ps.add(3, "ipv6 routes and addresses", info, noReason, "", "ip -6 route; echo; ip -6 -br addr; true")
	// curl -6 to an IPv6 literal of this machine's own, where a host
	// canary listens: no name to fail on, so only the route can stop it.
	for _, ip6 := range s.env.ipv6Addrs() {
		nn = n()
		ps.add(3, "curl -6 to the machine's IPv6 address "+ip6, blocked, rCurlNoAddr6, nn,
			curlV("-6 -sS --max-time 5 http://["+ip6+"]:"+p+"/"+nn))
	}
	ps.add(3, "aaaa of an allowed name", info, noReason, "", routerVar+"dig +time=2 +tries=1 @$R allowed.test AAAA")
	nn = n()
	ps.add(3, "aaaa under an allowed wildcard", blocked, rNoData, nn, routerVar+dnsProbe("@$R "+nn+".wild.test AAAA"))
	for _, ip6 := range s.env.ipv6Addrs() {
		nn = n()
		ps.add(3, "tcp to the machine's IPv6 address "+ip6, blocked, rNoAddr6, nn, "python3 -S ./sec.py send tcp "+ip6+" "+p+" "+nn)
	}
	nn = n()
	ps.add(3, "udp to every link-local node (ff02::1, ff02::2)", blocked, rLL6NoAddr, nn, waitDAD+"python3 -S ./sec.py ll6 443 "+nn)
}

// mainRow4: UDP, QUIC, ICMP.
func (s *secSuite) mainRow4(t *testing.T, ps *probeSet) {
	n := func() string { return newNonce(t) }
	var nn string
	for _, dst := range []string{"$R", secFakeIP, egressGW} {
		nn = n()
		ps.add(4, "ping "+dst, blocked, rPingEPERM, nn, routerVar+"ping -c1 -W2 -p "+pingPattern(nn)+" "+dst)
	}
	// QUIC to allowed.test's real address (the fake's, where UDP 443
	// echoes), with the nonce in the clear: only a route could carry it.
	nn = n()
	ps.add(4, "QUIC Initial to allowed.test's upstream address", blocked, rSendtoNoRoute, nn, "python3 -S ./sec.py quic "+secFakeIP+" 443 "+nn)
	nn = n()
	ps.add(4, "udp 443 to an allowed name's address", blocked, rRefused, nn, "python3 -S ./sec.py send udp $(getent hosts allowed.test | cut -d' ' -f1) 443 "+nn)
	nn = n()
	ps.add(4, "udp 443 to the fake", blocked, rNoRoute, nn, "python3 -S ./sec.py send udp "+secFakeIP+" 443 "+nn)
}

// mainRow5: SNI tricks, all at the forwarder (127.0.0.1:443).
func (s *secSuite) mainRow5(t *testing.T, ps *probeSet) {
	n := func() string { return newNonce(t) }
	var nn string
	for _, h := range []struct{ name, args string }{
		{"no sni", "--alpn %s"},
		{"denied sni", "--sni %s.denied.test"},
		{"ip-literal sni", "--sni " + secFakeIP + " --alpn %s"},
		{"sni with a port", "--sni allowed.test:2222 --alpn %s"},
		{"sni with a NUL", `--sni 'allowed.test\0.%s.denied.test'`},
		{"oversized hello, denied sni first", "--pad 20000 --sni %s.denied.test"},
		{"oversized hello, allowed sni after 20 kB", "--pad 20000 --sni-last --sni allowed.test --alpn %s"},
	} {
		nn = n()
		ps.add(5, h.name, blocked, rHelloClosed, nn, "python3 -S ./sec.py hello 127.0.0.1 443 "+strings.ReplaceAll(h.args, "%s", nn))
	}
	nn = n()
	ps.add(5, "denied sni with curl", blocked, rTLSClosed, nn, "curl -sS --max-time 10 --cacert ./ca.pem --resolve "+nn+".denied.test:443:127.0.0.1 https://"+nn+".denied.test/"+nn)
	nn = n()
	ps.add(5, "mixed-case sni of an allowed name", arrives, noReason, nn, "python3 -S ./sec.py https 127.0.0.1 443 AlLoWeD.TeSt 'GET /"+nn+" HTTP/1.1' AlLoWeD.TeSt")
	nn = n()
	ps.add(5, "trailing dot of an allowed name (curl)", arrives, noReason, nn, "curl -sS --max-time 10 --cacert ./ca.pem https://allowed.test./"+nn)
	nn = n()
	ps.add(5, "trailing-dot sni (raw hello)", allowedHostOnly, noReason, nn, "python3 -S ./sec.py hello 127.0.0.1 443 --sni allowed.test. --alpn "+nn)
	nn = n()
	ps.add(5, "allowed sni, then CONNECT to another name", allowedHostOnly, noReason, nn, "python3 -S ./sec.py https 127.0.0.1 443 allowed.test 'CONNECT "+nn+".denied.test:443 HTTP/1.1' "+nn+".denied.test:443")
	nn = n()
	ps.add(5, "allowed sni, then Host of another name", allowedHostOnly, noReason, nn, "python3 -S ./sec.py https 127.0.0.1 443 allowed.test 'GET /x HTTP/1.1' "+nn+".denied.test")
}

// mainRow6: HTTPS and SVCB records.
func (s *secSuite) mainRow6(t *testing.T, ps *probeSet) {
	n := func() string { return newNonce(t) }
	var nn string
	ps.add(6, "https record of an allowed name", info, noReason, "", routerVar+"dig +time=2 +tries=1 @$R allowed.test HTTPS")
	ps.add(6, "svcb record of an allowed name", info, noReason, "", routerVar+"dig +time=2 +tries=1 @$R +tcp allowed.test SVCB")
	nn = n()
	ps.add(6, "https record under an allowed wildcard", blocked, rNoData, nn, routerVar+dnsProbe("@$R "+nn+".wild.test TYPE65"))
	nn = n()
	ps.add(6, "svcb record under an allowed wildcard over tcp", blocked, rNoData, nn, routerVar+dnsProbe("@$R +tcp "+nn+".wild.test SVCB"))
}

// mainRow7: rebinding and SSRF through the router. Each rebound name
// must be stopped by routerd's refusal of the fake's answer.
func (s *secSuite) mainRow7(t *testing.T, ps *probeSet) {
	n := func() string { return newNonce(t) }
	var nn string
	why := map[string]string{"127.0.0.1": "loopback", egressGW: "gateway: podman's network namespace and the host",
		"10.99.0.200": "private", "172.31.99.20": "private", "192.168.99.20": "private"}
	for _, tgt := range []string{"127.0.0.1", egressGW, "10.99.0.200", "172.31.99.20", "192.168.99.20"} {
		nn = n()
		name := "ip-" + strings.ReplaceAll(tgt, ".", "-") + "-" + nn + "." + rebindSuffix
		ps.add(7, "https via a name rebound to "+tgt, resolvedOnly, rTLSClosed, nn, curlHTTPS(name, nn))
		s.refuse(7, ps.session, name, tgt, why[tgt])
	}
	for _, tgt := range []struct{ addr, label string }{
		{egressGW, "ip-10-99-0-1-gw"}, {"10.99.0.200", "ip-10-99-0-200-c0"},
		{"172.31.99.20", "ip-172-31-99-20-c1"}, {"192.168.99.20", "ip-192-168-99-20-c2"},
	} {
		nn = n()
		name := tgt.addr
		if tgt.addr == egressGW {
			name = "egress gateway"
		}
		ps.add(7, "tcp port entry rebound to "+name, blocked, rNoEcho, nn, tcpEcho(tgt.label+"."+rebindSuffix, "2222", nn))
		s.refuse(7, ps.session, tgt.label+"."+rebindSuffix, tgt.addr, why[tgt.addr])
	}
	nn = n()
	ps.add(7, "dns over a port entry rebound to the router's loopback resolver", blocked, rDigClosed, nn,
		dnsProbe("+tcp -p 5353 @ip-127-0-0-1-lo."+rebindSuffix+" "+nn+".wild.test A"))
	s.refuse(7, ps.session, "ip-127-0-0-1-lo."+rebindSuffix, "127.0.0.1", "loopback")
	nn = n()
	ps.add(7, "opened path: dns over a port entry to the fake", arrives, noReason, nn,
		dnsProbe("+tcp -p 53 @ip-10-99-0-11-dns."+rebindSuffix+" "+nn+".wild.test A"))
	nn = n()
	ps.add(7, "opened path: https via a name rebound to the fake", arrives, noReason, nn, curlHTTPS("ip-10-99-0-11-"+nn+"."+rebindSuffix, nn))
}

// mainRow8: the host.
func (s *secSuite) mainRow8(t *testing.T, ps *probeSet) {
	n := func() string { return newNonce(t) }
	hostIP := s.env.hostIPs[0]
	hostDash := strings.ReplaceAll(hostIP, ".", "-")
	p := strconv.Itoa(s.env.hostPort)
	var nn string
	ps.add(8, "host.containers.internal does not resolve", info, noReason, "", "python3 -S ./sec.py resolve host.containers.internal")
	nn = n()
	ps.add(8, "http to host.containers.internal", blocked, rCurlNXDOMAIN, nn, "curl -sS --max-time 5 http://host.containers.internal:"+p+"/"+nn)
	for _, ip := range s.env.hostIPs {
		why := rNoRoute
		if strings.Contains(ip, ":") {
			why = rNoAddr6
		}
		for _, proto := range []string{"tcp", "udp"} {
			nn = n()
			ps.add(8, proto+" to the machine's address "+ip, blocked, why, nn, "python3 -S ./sec.py send "+proto+" "+ip+" "+p+" "+nn)
		}
	}
	for _, proto := range []string{"tcp", "udp"} {
		nn = n()
		ps.add(8, proto+" to 127.0.0.1 on the canaries' port", blocked, rRefused, nn, "python3 -S ./sec.py send "+proto+" 127.0.0.1 "+p+" "+nn)
	}
	nn = n()
	ps.add(8, "tcp port entry rebound to the machine's address", blocked, rNoEcho, nn, tcpEcho("ip-"+hostDash+"-host."+rebindSuffix, p, nn))
	s.refuse(8, ps.session, "ip-"+hostDash+"-host."+rebindSuffix, hostIP, "the host")
	nn = n()
	name := "ip-" + hostDash + "-" + nn + "." + rebindSuffix
	ps.add(8, "https via a name rebound to the machine's address", resolvedOnly, rTLSClosed, nn, curlHTTPS(name, nn))
	s.refuse(8, ps.session, name, hostIP, "the host")
	nn = n()
	ps.add(8, "tcp port entry rebound to the router's loopback on the canaries' port", blocked, rNoEcho, nn, tcpEcho("ip-127-0-0-1-hl."+rebindSuffix, p, nn))
	s.refuse(8, ps.session, "ip-127-0-0-1-hl."+rebindSuffix, "127.0.0.1", "loopback")
}

// rEditedUDP: row 9's datagrams to the new nameservers have no route.
var rEditedUDP = because("ENETUNREACH", []int{1}, `(?m)^udp `+regexp.QuoteMeta(secFakeIP)+`:53 ENETUNREACH$`, `(?m)^udp `+regexp.QuoteMeta(egressGW)+`:53 ENETUNREACH$`)

// mainRow9: edited resolv.conf and hosts.
func (s *secSuite) mainRow9(t *testing.T, ps *probeSet) {
	n := func() string { return newNonce(t) }
	var nn string
	ps.add(9, "write /etc/resolv.conf and /etc/hosts", info, noReason, "", "echo 'nameserver "+secFakeIP+"' >> /etc/resolv.conf; r=$?; echo '"+secFakeIP+" allowed.test' >> /etc/hosts; h=$?; [ $r = 0 ] || [ $h = 0 ]")
	s.edited = map[string]string{}
	for _, pr := range []struct {
		name  string
		why   reason
		shell string
	}{
		{"edited: resolve a denied name", rNoResolver, "python3 -S ./sec.py resolve %s.denied.test"},
		{"edited: dig a denied name", rDigNoRoute, dnsProbe("+time=1 %s.denied.test TXT")},
		{"edited: curl allowed.test now mapped to the fake", rCurlNoRoute, curlV("-sS --max-time 5 --cacert ./ca.pem https://allowed.test/%s")},
		{"edited: curl a denied name mapped to the forwarder", rTLSClosed, "curl -sS --max-time 5 --cacert ./ca.pem https://hosts-%s.denied.test/%s"},
		{"edited: udp to the new nameservers", rEditedUDP, "python3 -S ./sec.py send udp " + secFakeIP + " 53 %s; a=$?; python3 -S ./sec.py send udp " + egressGW + " 53 %s-gw; b=$?; [ $a = 0 ] || [ $b = 0 ]"},
	} {
		nn = n()
		if strings.Contains(pr.name, "mapped to the forwarder") {
			s.edited["hostsname"] = "hosts-" + nn + ".denied.test"
		}
		ps.add(9, pr.name, blocked, pr.why, nn, "sh ./edited.sh sh -c "+shellQuote(strings.ReplaceAll(pr.shell, "%s", nn)))
	}
	nn = n()
	ps.add(9, "edited: the allowed path still works (self-check)", arrives, noReason, nn,
		"sh ./edited.sh curl -sS --max-time 10 --cacert ./ca.pem --resolve "+nn+".wild.test:443:127.0.0.1 https://"+nn+".wild.test/"+nn)
}

// mainRow10: capabilities, raw and tun sockets, new user namespaces. A
// user namespace of the agent's own gives it every capability there, but
// the pod's network namespace (the only one with an interface that goes
// anywhere) belongs to the container's user namespace: the probes stay in
// it, so they can only leak if those capabilities reached it.
func (s *secSuite) mainRow10(t *testing.T, ps *probeSet) {
	n := func() string { return newNonce(t) }
	var nn string
	ps.add(10, "capabilities", info, noReason, "", "grep -E '^Cap(Eff|Prm|Bnd|Amb)' /proc/self/status; capsh --print | head -3")
	ps.add(10, "raw sockets in the pod", blocked, rRawEPERM, "", "python3 -S ./sec.py rawsock")
	ps.add(10, "tun device in the pod", blocked, rTunEPERM, "", "python3 -S ./sec.py tun")
	ps.add(10, "unshare -Ur: raw sockets in the pod's network", blocked, rRawEPERM, "", "unshare -Ur python3 -S ./sec.py rawsock")
	ps.add(10, "unshare -Ur: tun in the pod's network", blocked, rTunEPERM, "", "unshare -Ur python3 -S ./sec.py tun")
	ps.add(10, "unshare -Ur: add a route via the pod's interface", blocked, rIPEPERM, "", "unshare -Ur ip route add "+secFakeIP+"/32 dev eth0")
	nn = n()
	ps.add(10, "unshare -Ur: raw packet to the fake from the pod's network", blocked, rRawSendEPERM, nn,
		"unshare -Ur python3 -S ./sec.py rawsend "+secFakeIP+" 443 "+nn)
	nn = n()
	ps.add(10, "unshare -Ur: tun device in the pod's network routed to the fake", blocked, rTuntapEPERM, nn,
		"unshare -Ur sh -c 'ip tuntap add asbtun0 mode tun && ip link set asbtun0 up && ip route add "+secFakeIP+"/32 dev asbtun0 && "+
			"python3 -S ./sec.py send udp "+secFakeIP+" 443 "+nn+"'")
}

// plantedSock is the socket row 12 plants inside the sandbox at run time
// (the launcher refuses a launch dir holding one): the scan must list it.
const plantedSock = "/var/tmp/planted.sock"

// mainRow12: sockets and runtime dirs.
func (s *secSuite) mainRow12(_ *testing.T, ps *probeSet) {
	// find exits 1 when it cannot read a directory: each it names must be
	// one the agent cannot search either, so no socket in it is reachable.
	ps.add(12, "sockets", info, noReason, "", "e=$(mktemp); python3 -S ./sec.py plant "+plantedSock+"; "+
		"find / \\( -path /proc -o -path /sys \\) -prune -o -type s -print 2>$e; echo \"find rc=$?\"; sed 's/^/find stderr: /' $e; "+
		"sed -n \"s/^find: '\\(.*\\)': Permission denied$/\\1/p\" $e | while read -r d; do if [ -x \"$d\" ]; then echo \"searchable: $d\"; else echo \"unsearchable: $d\"; fi; done; "+
		"rm -f $e "+plantedSock)
	ps.add(12, "runtime dirs and env", info, noReason, "",
		"ls -d /run/user/* /run/podman /var/run/docker.sock /run/containers 2>&1; env | grep -E '^(XDG_RUNTIME_DIR|DOCKER_HOST|CONTAINER_HOST|CONTAINER_CONNECTION)=' ; "+
			"grep -cE 'podman\\.sock|agent-sandbox-[0-9]+-[0-9]+-api' /proc/self/mountinfo; true")
}

// mainRow13: what the agent sees of the helpers.
func (s *secSuite) mainRow13(_ *testing.T, ps *probeSet) {
	ps.add(13, "processes", info, noReason, "", "ps -eo pid,user,comm")
}

// editedFiles are row 9's replacement resolver and hosts files, and the
// wrapper that puts them in place the only way the agent can: in a user
// and mount namespace of its own (the real files are not writable).
func (s *secSuite) editedFiles() map[string]string {
	return map[string]string{
		"resolv.edited": "nameserver " + secFakeIP + "\nnameserver " + egressGW + "\noptions timeout:1 attempts:1\n",
		"hosts.edited":  secFakeIP + " allowed.test\n127.0.0.1 " + s.edited["hostsname"] + "\n",
		"edited.sh": `#!/bin/sh
# Runs "$@" with /etc/resolv.conf and /etc/hosts replaced.
exec unshare -Urm sh -c 'mount --bind ./resolv.edited /etc/resolv.conf && mount --bind ./hosts.edited /etc/hosts && exec "$@"' sh "$@"
`,
	}
}

// buildOpened is the session whose UPSTREAM_ALLOW names the canaries'
// ranges: the same rebinding probes must now arrive (the self-check of
// row 7), and the always-refused targets must still be refused.
func (s *secSuite) buildOpened(t *testing.T) {
	ps := &s.opened
	n := func() string { return newNonce(t) }
	p := strconv.Itoa(s.env.hostPort)
	hostIP := s.env.hostIPs[0]
	hostDash := strings.ReplaceAll(hostIP, ".", "-")
	for _, tgt := range []string{"10.99.0.200", "172.31.99.20", "192.168.99.20"} {
		nn := n()
		ps.add(7, "opened: https via a name rebound to "+tgt, arrives, noReason, nn, curlHTTPS("ip-"+strings.ReplaceAll(tgt, ".", "-")+"-"+nn+"."+rebindSuffix, nn))
	}
	for _, label := range []string{"ip-10-99-0-200-c0", "ip-172-31-99-20-c1", "ip-192-168-99-20-c2"} {
		nn := n()
		ps.add(7, "opened: tcp port entry "+label, arrives, noReason, nn, tcpEcho(label+"."+rebindSuffix, "2222", nn))
	}
	nn := n()
	ps.add(7, "still refused with the egress subnet allowed: the gateway", blocked, rNoEcho, nn, tcpEcho("ip-10-99-0-1-gw."+rebindSuffix, "2222", nn))
	s.refuse(7, "opened-path", "ip-10-99-0-1-gw."+rebindSuffix, egressGW, "gateway: podman's network namespace and the host")
	nn = n()
	ps.add(7, "still refused: the router's loopback resolver", blocked, rDigClosed, nn, dnsProbe("+tcp -p 5353 @ip-127-0-0-1-lo."+rebindSuffix+" "+nn+".wild.test A"))
	s.refuse(7, "opened-path", "ip-127-0-0-1-lo."+rebindSuffix, "127.0.0.1", "loopback")
	nn = n()
	ps.add(8, "still refused: the machine's address", blocked, rNoEcho, nn, tcpEcho("ip-"+hostDash+"-host."+rebindSuffix, p, nn))
	s.refuse(8, "opened-path", "ip-"+hostDash+"-host."+rebindSuffix, hostIP, "the host")
	// host.containers.internal allowlisted: dnsmasq answers it with the
	// forwarder, nginx asks routerd, the fake answers with the machine's
	// address (as podman's hosts file would), and routerd must refuse it.
	ps.add(8, "allowlisted host.containers.internal resolves to the forwarder", info, noReason, "", "python3 -S ./sec.py resolve host.containers.internal")
	nn = n()
	ps.add(8, "allowlisted host.containers.internal:port via the router", blocked, rNoEcho, nn, tcpEcho("host.containers.internal", p, nn))
	nn = n()
	ps.add(8, "allowlisted host.containers.internal via the router (TLS)", blocked, rTLSClosed, nn, "curl -sS --max-time 10 -k https://host.containers.internal/"+nn)
	s.refuse(8, "opened-path", "host.containers.internal", hostIP, "the host")
}

// buildControl is the opened path of every direct probe kind: a plain
// container on the egress network (root, with NET_RAW) sends each kind to
// the fakes, the canaries, the gateway and the host, and each must arrive.
func (s *secSuite) buildControl(t *testing.T) {
	ps := &s.control
	n := func() string { return newNonce(t) }
	kinds := s.controlNonces
	add := func(kind, name, shell string, nonces ...string) {
		kinds[kind] = append(kinds[kind], nonces...)
		ps.add(0, name, info, noReason, "", shell)
	}
	for _, typ := range []string{"A", "AAAA", "TXT", "MX"} {
		for _, tcp := range []string{"", "+tcp"} {
			nn := n()
			add("dns", "dns "+typ+tcp, "dig +time=2 +tries=1 @"+secFakeIP+" "+tcp+" "+nn+".denied.test "+typ, nn)
		}
	}
	nn := n()
	long := nn + strings.Repeat("a", 63-len(nn)) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63)
	add("dns", "dns long", "dig +time=2 +tries=1 @"+secFakeIP+" "+long+".denied.test TXT", nn)
	specs, nonces := directSpecs(t, directTargets()...)
	add("direct", "direct", "python3 -S ./sec.py direct "+specs+"; true", nonces...)
	nn = n()
	add("dontroute", "dontroute", "python3 -S ./sec.py dontroute "+secFakeIP+" 443 "+nn, nn)
	nn = n()
	add("ll6", "ll6", waitDAD+"python3 -S ./sec.py ll6 443 "+nn, nn)
	nn = n()
	add("ping", "ping", "ping -c2 -W2 -p "+pingPattern(nn)+" "+secFakeIP, nn)
	nn = n()
	add("udp443", "udp443", "python3 -S ./sec.py send udp "+secFakeIP+" 443 "+nn, nn)
	nn = n()
	add("quic", "quic", "python3 -S ./sec.py quic "+secFakeIP+" 443 "+nn, nn)
	for _, h := range []string{"--alpn %s", "--sni %s.denied.test", "--sni " + secFakeIP + " --alpn %s", "--sni allowed.test:2222 --alpn %s",
		`--sni 'allowed.test\0.%s.denied.test'`, "--pad 20000 --sni %s.denied.test", "--pad 20000 --sni-last --sni allowed.test --alpn %s"} {
		nn = n()
		add("hello", "hello "+h, "python3 -S ./sec.py hello "+secFakeIP+" 443 "+strings.ReplaceAll(h, "%s", nn)+"; true", nn)
	}
	nn = n()
	add("https-record", "https record", "dig +time=2 +tries=1 @"+secFakeIP+" "+nn+".wild.test HTTPS", nn)
	// The egress network has no IPv6: its IPv6 canaries are checked from
	// the host (runControl). The way to the host from a container is the
	// address podman maps to it, host.containers.internal: the machine's
	// own address under slirp4netns (podman 4), pasta's mapped guest
	// address under podman 5, where the machine's address is the rootless
	// network namespace's own and so never reaches the host.
	for _, ip := range s.env.hostIPs {
		if strings.Contains(ip, ":") {
			continue
		}
		to := `"$(getent ahostsv4 host.containers.internal | head -n1 | cut -d' ' -f1 | grep . || echo ` + ip + `)"`
		for _, proto := range []string{"tcp", "udp"} {
			nn = n()
			add("host", "host "+proto+" via host.containers.internal to "+ip, "python3 -S ./sec.py send "+proto+" "+to+" "+strconv.Itoa(s.env.hostPort)+" "+nn, nn)
		}
	}
	for _, dst := range []string{egressGW, "10.99.0.200", "172.31.99.20", "192.168.99.20"} {
		nn = n()
		add("canary", "canary tcp "+dst, tcpEcho(dst, "2222", nn), nn)
	}
	nn = n()
	add("raw", "raw packet", "python3 -S ./sec.py rawsend "+secFakeIP+" 443 "+nn, nn)
}

func (s *secSuite) runControl(t *testing.T) {
	dir := launchDir(t)
	writeLaunchFiles(t, dir, map[string]string{})
	cstart := time.Now()
	out, err := podman("run", "--rm", "--label", harnessLabel+"=control", "--network", egressNet,
		"--dns", secFakeIP, "--user", "0", "--cap-add", "NET_RAW", "-v", dir+":/w", "-w", "/w",
		"--entrypoint", "sh", harness.sandboxImage, "-c",
		parallelScript(s.control.list(), 12, preflight("preflight", pfControlCmds, pfSecPy, pfNcN, pfDigTCP, pfPingPad), ""))
	if err != nil {
		t.Errorf("control container: %v\n%s", err, out)
	}
	s.took = append(s.took, fmt.Sprintf("control container %.1fs", time.Since(cstart).Seconds()))
	s.control.res = parseProbes(out)
	s.checkPreflight(t, "control", "preflight", s.control.res)
	s.control.ran = len(s.control.res) > 1
	// The host canaries on loopback (and IPv6) are only reachable from the host.
	local := append([]string{"127.0.0.1", "::1"}, s.env.ipv6Addrs()...)
	for _, addr := range local {
		nn := newNonce(t)
		s.controlNonces["host-loopback"] = append(s.controlNonces["host-loopback"], nn)
		if strings.Contains(addr, ":") && addr != "::1" {
			s.controlNonces["host-ipv6"] = append(s.controlNonces["host-ipv6"], nn)
		}
		if c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, strconv.Itoa(s.env.hostPort)), 2*time.Second); err == nil {
			_, _ = c.Write([]byte(nn + "\n"))
			buf := make([]byte, 64)
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			_, _ = c.Read(buf)
			c.Close()
		}
	}
	// The rows read the control's arrivals, and the earlier sessions'
	// absences, as final.
	s.settle(t, "after the control container")
	t.Logf("control container:\n%s", indent(out))
}

// buildNested is row 11: rootless podman inside the sandbox, from an image
// made there from scratch (the sandbox's /usr is bind-mounted in), with its
// default network, --network host, and a private network namespace.
func (s *secSuite) buildNested(t *testing.T) {
	s.nestedModes = []string{"default", "host", "slirp4netns"}
	s.nestedNonces = map[string]map[string]string{}
	ps := &s.nested
	ps.add(11, "build a nested image offline", info, noReason, "",
		`set -e; rm -rf /tmp/rootfs; mkdir -p /tmp/rootfs; cd /tmp/rootfs; mkdir -p usr etc tmp proc sys dev run var/tmp
ln -s usr/bin bin; ln -s usr/sbin sbin; ln -s usr/lib lib; ln -s usr/lib64 lib64
tar -cf /tmp/nested.tar .; cd - >/dev/null; podman import -q /tmp/nested.tar localhost/asb-nested:test`)
	ps.add(11, "the agent's own address", info, noReason, "", "ip -4 -o addr show eth0")
	for _, m := range s.nestedModes {
		net := ""
		if m != "default" {
			net = "--network " + m + " "
		}
		ps.add(11, "nested "+m, info, noReason, "", "podman run --rm "+net+`-v /usr:/usr:ro -v "$PWD:$PWD" -w "$PWD" localhost/asb-nested:test sh ./nested-`+m+".sh")
	}
}

// nestedReasons are the failures row 11 expects of each nested probe.
var nestedReasons = map[string]reason{
	"dns A":       rNXDOMAIN,
	"dns TXT tcp": rNXDOMAIN,
	"raw sockets": rRawEPERM,
}

// nestedInner is what runs inside the nested container of one mode.
func (s *secSuite) nestedInner(t *testing.T, mode string) []probe {
	nonces := map[string]string{}
	s.nestedNonces[mode] = nonces
	mk := func(k string) string {
		nn := newNonce(t)
		nonces[k] = nn
		return nn
	}
	pre := mode + ": "
	dnsA, dnsTXT, allowed := mk("dns A"), mk("dns TXT tcp"), mk("allowed")
	var specs []string
	for _, h := range []string{secFakeIP, egressGW, "10.99.0.200"} {
		for _, pp := range []string{"tcp|22", "tcp|443", "udp|53", "udp|443"} {
			proto, port, _ := strings.Cut(pp, "|")
			k := "direct " + proto + " " + h + ":" + port
			specs = append(specs, shellQuote(proto+"|"+h+"|"+port+"|"+mk(k)))
		}
	}
	return []probe{
		{pre + "started", "id -u; ip -4 -o addr show eth0"},
		{pre + "dns A", routerVar + dnsProbe("@$R "+dnsA+".denied.test A")},
		{pre + "dns TXT tcp", routerVar + dnsProbe("@$R +tcp "+dnsTXT+".denied.test TXT")},
		{pre + "direct", "python3 -S ./sec.py direct " + strings.Join(specs, " ")},
		{pre + "raw sockets", "python3 -S ./sec.py rawsock"},
		{pre + "allowed", curlHTTPS(allowed+".wild.test", allowed)},
	}
}

// Regexps the rows read outputs with.
var (
	capLine = regexp.MustCompile(`(?m)^(Cap\w+):\s+([0-9a-f]+)$`)
)

func capBits(out, field string) (uint64, bool) {
	for _, m := range capLine.FindAllStringSubmatch(out, -1) {
		if m[1] == field {
			v, err := strconv.ParseUint(m[2], 16, 64)
			return v, err == nil
		}
	}
	return 0, false
}

// secTable is the report printed after the whole suite.
var secTable struct {
	sync.Mutex
	header string
	rows   []string
	once   sync.Once
}

// secRow is one row of the evidence table that runs sessions of its own.
type secRow struct {
	n     int
	title string
	fn    func(*testing.T, *evidence)
}

// runSecRows runs rows as subtests, each recorded in the table.
func runSecRows(t *testing.T, rows ...secRow) {
	registerSecTable()
	for _, r := range rows {
		row(t, fmt.Sprintf("%02d %s", r.n, r.title), func(t *testing.T) {
			ev := &evidence{}
			start := time.Now()
			t.Cleanup(func() { recordSecRow(r.n, r.title, t, ev, time.Since(start)) })
			r.fn(t, ev)
		})
	}
}

func registerSecTable() {
	secTable.once.Do(func() {
		atTeardown = append(atTeardown, printSecTable)
	})
}

func recordSecRow(n int, title string, t *testing.T, ev *evidence, took time.Duration) {
	result := "PASS"
	switch {
	case t.Skipped():
		result = "SKIP"
	case t.Failed():
		result = "FAIL"
	}
	e := ev.String()
	if t.Failed() {
		e = "see the row's errors above; " + e
	}
	secTable.Lock()
	defer secTable.Unlock()
	secTable.rows = append(secTable.rows, fmt.Sprintf("%2d  %-4s  %5.1fs  %s\n              evidence: %s", n, result, took.Seconds(), title, e))
}

func printSecTable() {
	secTable.Lock()
	defer secTable.Unlock()
	if len(secTable.rows) == 0 {
		return
	}
	var b strings.Builder
	b.WriteString("\n=== security rows (issue 3): row, result, time, check, evidence ===\n")
	if secTable.header != "" {
		b.WriteString(secTable.header + "\n")
	}
	for _, r := range secTable.rows {
		b.WriteString(r + "\n")
	}
	fmt.Print(b.String())
}
