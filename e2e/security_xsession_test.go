//go:build e2e

package e2e

import (
	"fmt"
	"math/bits"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Rows 27 and 28: what one session can reach of another, and the
// sniffer's own reach. Session networks are internal /24s of podman's
// pool (sessionPool) with the router at .2; their bridges have no address
// in podman's rootless network namespace, on podman 4 and 5 alike.

// The ports of row 27. Session A's agent listens on its own address on
// the TCP and UDP ports an agent may bind (1024 and above), echoing and
// logging what it gets: if B reached it, A's agent could relay for B
// through A's allowlist. B also tries common ports below 1024.
var (
	xsListenTCP = []string{"2222", "8080", "8443"}
	xsListenUDP = []string{"5353", "8443"}
	xsPodTCP    = []string{"22", "80", "443", "2222", "8080", "8443"}
	xsPodUDP    = []string{"53", "443", "5353", "8443"}
	// A's router: dnsmasq on 53, nothing on 443 (nginx's TLS server is on
	// a unix socket, by design out of any agent's reach) and A's first
	// host:port entry on 10001, which relays to allowed.test:2222.
	xsRouterTCP = []string{"53", "443", "10001"}
)

// rDigTCPNoRoute: dig over TCP with no route to the server says so in
// words of its own.
var rDigTCPNoRoute = because("no route to the resolver (ENETUNREACH)", []int{1}, `(?m)^dig rc=9$`,
	`(?m)^;; Connection to \S+ for \S+ failed: network unreachable\.$`, `no servers could be reached`)

// xsAllowlistA gives session A one port entry: its router relays 10001 to
// allowed.test:2222, the security fake's echo.
const xsAllowlistA = "# e2e row 27: session A\nallowed.test passthrough\nallowed.test:2222\n"

// xsScriptA is session A's agent: it listens on its own address until the
// test creates a-stop.
var xsScriptA = preflight("preflight", []string{"sh", "python3", "ip", "sed", "sleep"}, "./xs-listen.py|test -r ./xs-listen.py") + `
P=$(ip -4 -o addr show eth0 | sed -n 's/.* inet \([0-9.]*\)\/.*/\1/p')
echo "$P" > a-addr
python3 -S ./xs-listen.py "$P" a-listen.log ` + strings.Join(xsListenTCP, ",") + " " + strings.Join(xsListenUDP, ",") + ` a-ready &
i=0; while [ ! -e a-stop ] && [ $i -lt 4000 ]; do sleep 0.1; i=$((i+1)); done
kill $! 2>/dev/null; wait; exit 0
`

// xsListenPy listens on one address, TCP and UDP, logs every connection's
// data and every datagram with where it came from, and echoes them.
const xsListenPy = `import socket, sys, threading
addr, logpath, tcp, udp, ready = sys.argv[1:6]
log = open(logpath, "a")
lock = threading.Lock()
def say(line):
    with lock:
        log.write(line + "\n")
        log.flush()
def conn(c, frm, to):
    c.settimeout(10)
    try:
        while True:
            data = c.recv(4096)
            if not data:
                break
            say("tcp to=%s:%d from=%s:%d data=%r" % (to[0], to[1], frm[0], frm[1], data))
            c.sendall(data)
    except OSError as e:
        say("tcp to=%s:%d from=%s:%d error=%s" % (to[0], to[1], frm[0], frm[1], e))
    c.close()
def serve_tcp(l):
    while True:
        c, frm = l.accept()
        threading.Thread(target=conn, args=(c, frm, l.getsockname()), daemon=True).start()
def serve_udp(u):
    to = u.getsockname()
    while True:
        data, frm = u.recvfrom(65535)
        say("udp to=%s:%d from=%s:%d data=%r" % (to[0], to[1], frm[0], frm[1], data))
        u.sendto(data, frm)
for p in tcp.split(","):
    l = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((addr, int(p)))
    l.listen(64)
    say("listening tcp %s:%s" % (addr, p))
    threading.Thread(target=serve_tcp, args=(l,), daemon=True).start()
for p in udp.split(","):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind((addr, int(p)))
    say("listening udp %s:%s" % (addr, p))
    threading.Thread(target=serve_udp, args=(u,), daemon=True).start()
open(ready, "w").close()
threading.Event().wait()
`

// xsAddrs are session A's addresses, from podman inspect.
type xsAddrs struct {
	session      string
	router       string // A's router on A's session network: its .2
	routerEgress string // A's router on the egress network
	pod          string // A's pod (agent and forwarder)
	net          netip.Prefix
}

// row27: a second session B probes a running session A's router and pod.
func (s *secSuite) row27(t *testing.T, ev *evidence) {
	aDir := launchDir(t)
	writeLaunchFiles(t, aDir, map[string]string{"xs-listen.py": xsListenPy})
	aAllow := filepath.Join(mkdir(t, "cfg-"), "allowed-hosts")
	if err := os.WriteFile(aAllow, []byte(xsAllowlistA), 0o644); err != nil {
		t.Fatal(err)
	}
	aEnv := s.sessionEnv(secAllow)
	aEnv["AGENT_SANDBOX_ALLOWLIST"] = aAllow
	// startLauncher, not runSession: a session that ends while A runs
	// would count A's objects as its leftovers.
	a := startLauncher(t, sessionOpts{Trace: true, Dir: aDir, Env: aEnv, Timeout: 10 * time.Minute, Cmd: []string{"sh", "-c", xsScriptA}})
	aStopped := false
	stopA := func() {
		if aStopped {
			return
		}
		aStopped = true
		_ = os.WriteFile(filepath.Join(aDir, "a-stop"), nil, 0o644)
		a.wait()
	}
	defer stopA()
	if !a.waitFile("a-ready", 4*time.Minute) {
		stopA()
		t.Fatalf("session A's agent never listened (see its session above); its listener log:\n%s", indent(a.fileIn("a-listen.log")))
	}
	x, err := s.xsInspect(a)
	if err != nil {
		t.Fatalf("session A's addresses: %v", err)
	}
	ev.add("session A (%s): router %s (egress %s), pod %s, from podman inspect; A's agent listens on TCP %s and UDP %s of its address",
		x.net, x.router, x.routerEgress, x.pod, strings.Join(xsListenTCP, "/"), strings.Join(xsListenUDP, "/"))

	// The opened path: a plain container on A's own session network.
	ctl, ctlAddr, ctlNonces := s.xsControl(t, x)

	// Session B's probes, each with the failure it expects.
	b := &probeSet{}
	s.xsProbes(t, b, x)
	bDir := launchDir(t)
	writeLaunchFiles(t, bDir, map[string]string{})
	pre := preflight("preflight", []string{"sh", "python3", "dig", "curl", "ip", "grep", "sed", "date", "mktemp", "cat", "rm"}, pfSecPy, pfDigTCP)
	bl := startLauncher(t, sessionOpts{Trace: true, Dir: bDir, Env: s.sessionEnv(secAllow), Timeout: 5 * time.Minute,
		Cmd: []string{"sh", "-c", parallelScript(b.list(), 16, pre, "")}})
	bl.wait()
	bl.wantCode(0)
	b.res = parseProbes(bl.Stdout())
	b.ran = len(b.res) > 1
	if pf, ok := b.res["preflight"]; !ok || pf.RC != 0 {
		t.Errorf("PREFLIGHT FAILED in session B: %s", pf)
	}

	// A's router's log, while A still runs, once the markers are in every
	// log B's nonces are about to be looked for in; then A ends.
	if a.done() {
		t.Errorf("session A ended before session B's probes were done: they proved nothing about a running session")
	}
	s.xsSettle(t, a, x)
	aRouterLog, rerr := exec.Command("podman", "logs", x.session+"-router").CombinedOutput()
	if rerr != nil {
		t.Errorf("session A's router log: %v\n%s", rerr, aRouterLog)
	}
	s.checkRootlessRoutes(t, ev, x)
	stopA()
	a.wantCode(0)
	assertNoLeftovers(t)
	if pf, ok := parseProbes(a.Stdout())["preflight"]; !ok || pf.RC != 0 {
		t.Errorf("PREFLIGHT FAILED in session A: %s", pf)
	}
	if got := strings.TrimSpace(a.fileIn("a-addr")); got != x.pod {
		t.Errorf("session A's agent has address %q, podman inspect says %s", got, x.pod)
	}

	// A's agent, router and launcher join the logs every nonce of B's
	// must be absent from. The launcher's output needs no marker: it has
	// exited, so its output is whole.
	s.env.addLog("session A's agent", a.fileIn("a-listen.log"))
	s.env.addLog("session A's router", string(aRouterLog))
	s.env.addLog("session A's launcher", a.Stdout()+"\n"+a.Stderr())

	s.check(t, ev, b, b.probes)
	if !t.Failed() {
		ev.add("B's nonces are absent from A's agent's listener, A's router's log and A's launcher's output as well")
	}
	s.xsCheckRoutes(t, ev, b, x)
	s.xsCheckControl(t, ev, ctl, ctlAddr, ctlNonces, x)
}

// xsSettle closes session B's probes with markers (marker_test.go) while
// A runs: from a container on A's own session network, where B's traffic
// would have come in, to each of A's agent's listeners, to A's router's
// DNS (which its log shows) and through A's port entry to the security
// fake; the sniffer must log the sends to A's pod (a router's own pair it
// leaves out). Then the markers for every other log, as after the shared
// sessions.
func (s *secSuite) xsSettle(t *testing.T, a *launcher, x xsAddrs) {
	t.Helper()
	const agent, router = "session A's agent", "session A's router"
	var marks, sniffed []mark
	for _, l := range []struct {
		kind  string
		ports []string
	}{{"tcp", xsListenTCP}, {"udp", xsListenUDP}} {
		for _, p := range l.ports {
			m := mark{log: agent, kind: l.kind, host: x.pod, port: p, nonce: newNonce(t)}
			marks = append(marks, m)
			sniffed = append(sniffed, mark{log: "gateway", kind: "sniff", nonce: m.nonce})
		}
	}
	marks = append(marks,
		mark{log: router, kind: "dns-udp", host: x.router, port: "53", nonce: newNonce(t)},
		mark{log: router, kind: "dns-tcp", host: x.router, port: "53", nonce: newNonce(t)},
		mark{log: "secfake", kind: "tcp", host: x.router, port: "10001", nonce: newNonce(t)})
	sent := sendMarks(t, marks, "", x.session)
	text := func(log string) string {
		switch log {
		case agent:
			return a.fileIn("a-listen.log")
		case router:
			// podman logs keeps the order the router wrote in.
			out, _ := exec.Command("podman", "logs", x.session+"-router").CombinedOutput()
			return string(out)
		}
		return s.env.logText(log)
	}
	waitMarks(t, "after session B, on A's network", append(marks, sniffed...), text, sent)
	s.env.settle(t, "after session B")
}

// xsInspect finds A's router and pod addresses with podman inspect and
// checks they have the shape rows 27 and the sniffer rely on.
func (s *secSuite) xsInspect(a *launcher) (xsAddrs, error) {
	x := xsAddrs{session: a.sessionName()}
	if x.session == "" {
		return x, fmt.Errorf("cannot find the session's name in its stderr:\n%s", a.Stderr())
	}
	router, err := containerNets(x.session + "-router")
	if err != nil {
		return x, err
	}
	// The forwarder holds the sandbox's network namespace.
	pod, err := containerNets(x.session + "-forwarder")
	if err != nil {
		return x, err
	}
	x.router, x.routerEgress, x.pod = router[x.session], router[egressNet], pod[x.session]
	ra, err1 := netip.ParseAddr(x.router)
	pa, err2 := netip.ParseAddr(x.pod)
	ea, err3 := netip.ParseAddr(x.routerEgress)
	if err1 != nil || err2 != nil || err3 != nil {
		return x, fmt.Errorf("router on %v, pod on %v: want an address on %s and %s", router, pod, x.session, egressNet)
	}
	x.net, _ = ra.Prefix(24)
	pool := netip.MustParsePrefix(sessionPool)
	switch {
	case !pool.Contains(ra):
		return x, fmt.Errorf("session network %s is outside %s, the pool the sniffer knows", x.net, sessionPool)
	case ra != x.net.Addr().Next().Next():
		return x, fmt.Errorf("the router is %s, not the .2 of %s", ra, x.net)
	case !x.net.Contains(pa) || pa == ra:
		return x, fmt.Errorf("the pod is %s, not another address of %s", pa, x.net)
	case !netip.MustParsePrefix(egressSubnet).Contains(ea):
		return x, fmt.Errorf("the router's egress address %s is outside %s", ea, egressSubnet)
	}
	return x, nil
}

// containerNets maps each network of a container to its address there.
func containerNets(name string) (map[string]string, error) {
	out, err := podman("inspect", "--format", `{{range $n, $v := .NetworkSettings.Networks}}{{$n}}={{$v.IPAddress}}{{"\n"}}{{end}}`, name)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, l := range lines(out) {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m, nil
}

// xsProbes are session B's: A's router (both addresses) and A's pod, each
// on its own with a fresh nonce. B's pod has a route to its own /24 only:
// every one fails before a packet leaves it.
func (s *secSuite) xsProbes(t *testing.T, b *probeSet, x xsAddrs) {
	n := func() string { return newNonce(t) }
	var nn string
	nn = n()
	b.add(27, "dns over udp to A's router", blocked, rDigNoRoute, nn, dnsProbe("@"+x.router+" "+nn+".denied.test A"))
	nn = n()
	b.add(27, "dns over tcp to A's router", blocked, rDigTCPNoRoute, nn, dnsProbe("@"+x.router+" +tcp "+nn+".denied.test TXT"))
	for _, h := range []struct{ what, addr string }{{"A's router", x.router}, {"A's router's egress address", x.routerEgress}} {
		for _, p := range xsRouterTCP {
			nn = n()
			b.add(27, "tcp to "+h.what+" "+h.addr+":"+p, blocked, rNoRoute, nn, "python3 -S ./sec.py send tcp "+h.addr+" "+p+" "+nn)
		}
		nn = n()
		b.add(27, "udp to "+h.what+" "+h.addr+":53", blocked, rNoRoute, nn, "python3 -S ./sec.py send udp "+h.addr+" 53 "+nn)
	}
	nn = n()
	b.add(27, "MSG_DONTROUTE sendto A's router:53", blocked, rSendtoNoRoute, nn, "python3 -S ./sec.py dontroute "+x.router+" 53 "+nn)
	for _, p := range xsPodTCP {
		nn = n()
		b.add(27, "tcp to A's pod :"+p, blocked, rNoRoute, nn, "python3 -S ./sec.py send tcp "+x.pod+" "+p+" "+nn)
	}
	for _, p := range xsPodUDP {
		nn = n()
		b.add(27, "udp to A's pod :"+p, blocked, rNoRoute, nn, "python3 -S ./sec.py send udp "+x.pod+" "+p+" "+nn)
	}
	nn = n()
	b.add(27, "MSG_DONTROUTE sendto A's pod :5353", blocked, rSendtoNoRoute, nn, "python3 -S ./sec.py dontroute "+x.pod+" 5353 "+nn)
	nn = n()
	b.add(27, "curl http to A's pod :8080", blocked, rCurlNoRoute, nn, curlV("-sS --max-time 5 http://"+x.pod+":8080/"+nn))
	b.add(27, "routes", info, noReason, "", "ip -4 route; echo; for a in "+x.router+" "+x.pod+" "+x.routerEgress+"; do ip route get $a 2>&1; done; true")
}

// xsCheckRoutes: B's only route is its own /24, and none leads to A.
func (s *secSuite) xsCheckRoutes(t *testing.T, ev *evidence, b *probeSet, x xsAddrs) {
	r, ok := b.res["routes"]
	if !ok {
		t.Errorf("session B's routes did not report")
		return
	}
	table, gets, _ := strings.Cut(r.Out, "\n\n")
	routes := lineWith(table, "")
	if len(routes) != 1 || strings.Contains(table, "default") {
		t.Errorf("session B has routes beyond its own subnet:\n%s", r.Out)
		return
	}
	if strings.Count(gets, "Network is unreachable") != 3 {
		t.Errorf("ip route get does not say A's router, pod and router's egress address are unreachable from B:\n%s", r.Out)
		return
	}
	ev.add("B's only route: %q; ip route get %s, %s, %s: network unreachable", strings.TrimSpace(routes[0]), x.router, x.pod, x.routerEgress)
}

// xsControl runs the opened path of row 27's probes: a plain container on
// A's own session network (and the egress network) sends each kind to A's
// router and pod. It returns its results, its address on A's network and
// its nonces by kind.
func (s *secSuite) xsControl(t *testing.T, x xsAddrs) (*probeSet, string, map[string][]string) {
	ps := &probeSet{}
	nonces := map[string][]string{}
	add := func(kind, name, shell, nn string) {
		if nn != "" {
			nonces[kind] = append(nonces[kind], nn)
		}
		ps.add(0, name, info, noReason, nn, shell)
	}
	add("", "address", "ip -4 -o addr", "")
	for _, p := range xsListenTCP {
		nn := newNonce(t)
		add("pod", "tcp to A's pod :"+p, "python3 -S ./sec.py send tcp "+x.pod+" "+p+" "+nn, nn)
	}
	for _, p := range xsListenUDP {
		nn := newNonce(t)
		add("pod", "udp to A's pod :"+p, "python3 -S ./sec.py send udp "+x.pod+" "+p+" "+nn, nn)
	}
	nn := newNonce(t)
	add("pod", "MSG_DONTROUTE sendto A's pod :5353", "python3 -S ./sec.py dontroute "+x.pod+" 5353 "+nn, nn)
	nn = newNonce(t)
	add("dns", "dns over udp to A's router", "dig +time=2 +tries=1 @"+x.router+" "+nn+".denied.test A", nn)
	nn = newNonce(t)
	add("dns", "dns over tcp to A's router", "dig +time=2 +tries=1 @"+x.router+" +tcp "+nn+".denied.test TXT", nn)
	nn = newNonce(t)
	add("entry", "tcp to A's port entry :10001", tcpEcho(x.router, "10001", nn), nn)
	add("", "tcp to A's router :443", "python3 -S ./sec.py send tcp "+x.router+" 443 control-443", "")
	// The container is on the egress network too, where every router has
	// an address: nothing of A's router listens on its.
	for _, p := range xsRouterTCP {
		add("", "tcp to A's router's egress address :"+p, "python3 -S ./sec.py send tcp "+x.routerEgress+" "+p+" control-egress", "")
	}
	add("", "udp to A's router's egress address :53", "python3 -S ./sec.py send udp "+x.routerEgress+" 53 control-egress", "")
	dir := launchDir(t)
	writeLaunchFiles(t, dir, map[string]string{})
	out, err := podman("run", "--rm", "--label", harnessLabel+"=control", "--network", x.session, "--network", egressNet,
		"--user", "0", "-v", dir+":/w", "-w", "/w", "--entrypoint", "sh", harness.sandboxImage, "-c",
		parallelScript(ps.list(), 12, preflight("preflight", pfControlCmds, pfSecPy, pfNcN, pfDigTCP), ""))
	if err != nil {
		t.Errorf("control container on A's session network: %v\n%s", err, out)
	}
	t.Logf("control container on A's session network:\n%s", indent(out))
	ps.res = parseProbes(out)
	ps.ran = len(ps.res) > 1
	if pf, ok := ps.res["preflight"]; !ok || pf.RC != 0 {
		t.Errorf("PREFLIGHT FAILED in the control container on A's session network: %s", pf)
	}
	// Its address on A's network.
	addr := ""
	for _, l := range lines(ps.res["address"].Out) {
		if f := strings.Fields(l); len(f) > 3 && f[2] == "inet" {
			if p, err := netip.ParsePrefix(f[3]); err == nil && x.net.Contains(p.Addr()) {
				addr = p.Addr().String()
			}
		}
	}
	return ps, addr, nonces
}

// xsCheckControl asserts the opened path arrived where B's probes would
// have: A's agent's listener and the sniffer for the pod, A's router's
// log for DNS, the fake for the port entry.
func (s *secSuite) xsCheckControl(t *testing.T, ev *evidence, ps *probeSet, addr string, nonces map[string][]string, x xsAddrs) {
	t.Helper()
	if !ps.ran {
		t.Errorf("self-check: the control container on A's session network did not report")
		return
	}
	ca, err := netip.ParseAddr(addr)
	if err != nil || !x.net.Contains(ca) || addr == x.router || addr == x.pod {
		t.Errorf("self-check: the control container's address %q is not a third address of %s", addr, x.net)
		return
	}
	refused := 0
	for name, r := range ps.res {
		switch {
		case name == "tcp to A's router :443" || strings.Contains(name, "egress address"):
			// Nothing listens on A's router's 443 (nginx's TLS server is on
			// a unix socket) nor on its egress address: refused at connect,
			// where B has no route at all.
			if wantReason(t, "self-check: "+name, r, rRefused) {
				refused++
			}
		case name != "preflight" && name != "address" && !strings.HasPrefix(name, "dns ") && r.RC != 0:
			t.Errorf("self-check: %s from A's own network failed: %s", name, r)
		}
	}
	if refused != 1+len(xsRouterTCP)+1 {
		t.Errorf("self-check: %d of A's router's closed ports reported refused, want %d", refused, 1+len(xsRouterTCP)+1)
	}
	ok := true
	var ifaces []string
	for _, nn := range nonces["pod"] {
		var listener, wire bool
		for _, l := range s.env.seen(nn) {
			listener = listener || strings.HasPrefix(l, "session A's agent: ") && strings.Contains(l, " from="+addr+":")
			if strings.HasPrefix(l, "gateway: ") && strings.Contains(l, " sniff ") && strings.Contains(l, " src="+addr+" dst="+x.pod+" ") {
				wire = true
				ifaces = append(ifaces, between(l, " if=", " "))
			}
		}
		if !listener || !wire {
			ok = false
			t.Errorf("self-check: nonce %s from %s to A's pod was not seen by both A's agent (%t) and the sniffer on the session bridge (%t):\n%s",
				nn, addr, listener, wire, strings.Join(s.env.seen(nn), "\n"))
		}
	}
	for _, nn := range nonces["dns"] {
		var router, wire bool
		for _, l := range s.env.seen(nn) {
			router = router || strings.HasPrefix(l, "session A's router: ")
			wire = wire || strings.Contains(l, " sniff ")
		}
		if !router {
			ok = false
			t.Errorf("self-check: the DNS query %s from A's own network is not in A's router's log: the log check is blind", nn)
		}
		// A frame between a router and another address of its /24 is a
		// session's own traffic, which the sniffer leaves out by design.
		if wire {
			ok = false
			t.Errorf("the sniffer logged %s between %s and A's router: it ignores less than docs/evidence.md says:\n%s", nn, addr, strings.Join(s.env.seen(nn), "\n"))
		}
	}
	for _, nn := range nonces["entry"] {
		var fake, wire bool
		for _, l := range s.env.seen(nn) {
			fake = fake || strings.HasPrefix(l, "secfake: ")
			wire = wire || strings.HasPrefix(l, "gateway: ") && strings.Contains(l, " src="+x.routerEgress+" dst="+secFakeIP+" ")
		}
		if !fake || !wire {
			ok = false
			t.Errorf("self-check: nonce %s to A's port entry did not reach the fake (%t) with the sniffer seeing A's router send it (%t)", nn, fake, wire)
		}
	}
	if ok {
		ev.add("self-check: a plain container on A's session network (%s) reached A's pod (%d sends, TCP, UDP and MSG_DONTROUTE: logged by A's agent and by the sniffer on the session bridge's ports, %s), "+
			"A's router's DNS (in its log; the sniffer leaves that pair out by design) and its port entry (the fake echoed it); A's router refused it on 443, and from the egress network on its egress address (TCP %s, UDP 53: ECONNREFUSED, nothing listens there)",
			addr, len(nonces["pod"]), strings.Join(uniq(ifaces), ", "), strings.Join(xsRouterTCP, "/"))
	}
}

// rootlessRoute is a line of /proc/net/route in podman's rootless network
// namespace.
type rootlessRoute struct {
	iface     string
	dst, mask netip.Addr
	flags     uint64
}

func rootlessRoutes() ([]rootlessRoute, error) {
	out, err := podman("unshare", "--rootless-netns", "cat", "/proc/net/route")
	if err != nil {
		return nil, err
	}
	var routes []rootlessRoute
	for _, l := range lines(out) {
		f := strings.Fields(l)
		if len(f) < 8 || f[0] == "Iface" {
			continue
		}
		r := rootlessRoute{iface: f[0], dst: procAddr(f[1]), mask: procAddr(f[7])}
		r.flags, _ = strconv.ParseUint(f[3], 16, 32)
		routes = append(routes, r)
	}
	return routes, nil
}

// procAddr reads /proc/net/route's little-endian hexadecimal address.
func procAddr(h string) netip.Addr {
	v, err := strconv.ParseUint(h, 16, 32)
	if err != nil {
		return netip.Addr{}
	}
	return netip.AddrFrom4([4]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)})
}

// checkRootlessRoutes, while A runs: the gateway fake keeps the session
// pool's traffic in podman's namespace (see startGateway). It also says
// whether A's session bridge has an address there.
func (s *secSuite) checkRootlessRoutes(t *testing.T, ev *evidence, x xsAddrs) {
	routes, err := rootlessRoutes()
	if err != nil {
		t.Errorf("podman's network namespace's routes: %v", err)
		return
	}
	bridge := "no address (no route for it)"
	for _, r := range routes {
		if r.dst == x.net.Addr() && r.flags&0x0200 == 0 {
			bridge = "an address: its /24 is routed via " + r.iface
		}
	}
	ev.add("in podman's network namespace, A's session bridge has %s", bridge)
	pool := netip.MustParsePrefix(sessionPool)
	for _, r := range routes {
		m := r.mask.As4()
		ones := bits.OnesCount32(uint32(m[0])<<24 | uint32(m[1])<<16 | uint32(m[2])<<8 | uint32(m[3]))
		if r.dst == pool.Addr() && ones == pool.Bits() && r.flags&0x0200 != 0 { // RTF_REJECT
			ev.add("podman's network namespace has an unreachable route for %s: a packet to a session address no bridge there holds is refused there, never sent out", sessionPool)
			return
		}
	}
	t.Errorf("no unreachable route for %s in podman's network namespace: a packet to another session would leave through the uplink\n%v", sessionPool, routes)
}

// row28: the uplink. The control container's sends to the machine (row 8)
// leave podman's network namespace by its default route, the slirp4netns
// or pasta interface: the sniffer must log each there, and each must reach
// the host canaries.
func (s *secSuite) row28(t *testing.T, ev *evidence) {
	routes, err := rootlessRoutes()
	if err != nil {
		t.Fatalf("podman's network namespace's routes: %v", err)
	}
	uplink := ""
	for _, r := range routes {
		if r.dst.IsUnspecified() && r.mask.IsUnspecified() {
			uplink = r.iface
		}
	}
	if uplink == "" {
		t.Fatalf("podman's network namespace has no default route: %v", routes)
	}
	if !s.control.ran {
		t.Fatalf("the control container did not report")
	}
	nonces := s.controlNonces["host"]
	if len(nonces) == 0 {
		t.Fatalf("the control sent nothing to the machine: the row has nothing to check")
	}
	// Each send's target, as the control printed it ("tcp ADDR:PORT ...").
	targets := map[string]string{}
	for _, p := range s.control.probes {
		for _, nn := range nonces {
			if !strings.Contains(p.shell, nn) {
				continue
			}
			if f := strings.Fields(s.control.res[p.name].Out); len(f) > 1 {
				if host, _, ok := strings.Cut(f[1], ":"); ok {
					targets[nn] = host
				}
			}
		}
	}
	var dsts, protos []string
	for _, nn := range nonces {
		var onUplink, host []string
		dst := targets[nn]
		if dst == "" {
			t.Errorf("the control's send with nonce %s did not say where it went", nn)
		}
		for _, l := range s.env.seen(nn) {
			// Outbound: to the address the control sent to.
			if strings.HasPrefix(l, "gateway: ") && strings.Contains(l, " sniff if="+uplink+" ") && strings.Contains(l, " dst="+dst+" ") {
				onUplink = append(onUplink, l)
			}
			if strings.HasPrefix(l, "host canaries: ") {
				host = append(host, l)
			}
		}
		if len(onUplink) == 0 {
			t.Errorf("the sniffer did not log nonce %s on %s, the uplink, on its way to %s: a leak off the machine could go unseen\nall the logs have of it:\n%s",
				nn, uplink, dst, strings.Join(s.env.seen(nn), "\n"))
		}
		if len(host) == 0 {
			t.Errorf("nonce %s never reached the host canaries", nn)
		}
		for _, l := range onUplink {
			dsts = append(dsts, between(l, " dst=", " "))
			protos = append(protos, map[string]string{"6": "TCP", "17": "UDP"}[between(l, " proto=", " ")])
		}
	}
	version, _ := podman("version", "--format", "{{.Client.Version}}")
	if !t.Failed() {
		ev.add("podman %s: the default route of its network namespace is %s; the %d sends of row 8's control to the machine (%s) were each logged there by the sniffer (to %s) and reached the host canaries",
			strings.TrimSpace(version), uplink, len(nonces), strings.Join(uniq(protos), ", "), strings.Join(uniq(dsts), ", "))
	}
}

// addLog makes text one of the logs every nonce is searched in.
func (e *secEnv) addLog(name, text string) {
	f := filepath.Join(e.dir, strings.NewReplacer(" ", "-", "'", "").Replace(name)+".log")
	_ = os.WriteFile(f, []byte(text), 0o644)
	e.logs[name] = f
}
