//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func (s *secSuite) row1(t *testing.T, ev *evidence) {
	s.check(t, ev, &s.main, s.main.ofRow(1))
	if p, ok := s.main.get("dns wildcard A answered locally"); ok {
		r := s.main.res[p.name]
		if !strings.Contains(r.Out, "127.0.0.") {
			t.Errorf("an A query under an allowed wildcard was not answered with the forwarder's loopback: %s", r)
		}
		if got := s.env.seen(p.nonce); len(got) > 0 {
			t.Errorf("LEAK: an A query the router answers locally was forwarded:\n%s", strings.Join(got, "\n"))
		} else {
			ev.add("A under an allowed wildcard is answered locally (127.0.0.x) and never forwarded")
		}
	}
	if r, ok := s.main.res["dns sweep of the session subnet"]; ok {
		for _, l := range strings.Split(r.Out, "\n") {
			if strings.HasPrefix(l, "replies:") || strings.HasPrefix(l, "own address") {
				ev.add("sweep: %s", strings.TrimSpace(l))
			}
		}
	}
	if r, ok := s.main.res["routes"]; ok && !strings.Contains(r.Out, " via ") {
		ev.add("the session network has no gateway: the pod's only route is its own /24")
	}
	s.checkControl(t, ev, "DNS queries (A, AAAA, TXT, MX over UDP and TCP, long labels) sent straight to the fake", s.controlNonces["dns"]...)
	s.checkKube(t, ev, 1)
}

func (s *secSuite) row2(t *testing.T, ev *evidence) {
	s.check(t, ev, &s.main, s.main.ofRow(2))
	r, ok := s.main.res["direct tcp and udp to every fake, canary and the gateway"]
	if ok {
		if r.RC == 0 {
			t.Errorf("LEAK: a direct connection got through: %s", r)
		}
		var why []string
		for _, l := range strings.Split(r.Out, "\n") {
			if f := strings.Fields(l); len(f) >= 4 {
				if f[2] != "failed" {
					t.Errorf("LEAK: direct %s", l)
				} else if f[3] != "ENETUNREACH" {
					t.Errorf("direct %s: failed, but not for want of a route (ENETUNREACH)", l)
				}
				why = append(why, f[3])
			}
		}
		if len(why) != len(s.main.directNonces) {
			t.Errorf("the direct probe reported %d sends of %d: it did not run as written: %s", len(why), len(s.main.directNonces), r)
		}
		leaks := 0
		for _, n := range s.main.directNonces {
			if got := s.env.seen(n); len(got) > 0 {
				leaks++
				t.Errorf("LEAK: direct payload %s reached:\n%s", n, strings.Join(got, "\n"))
			}
		}
		if leaks == 0 && r.RC != 0 {
			ev.add("%d direct sends to %d hosts (the fakes, the canaries and the egress gateway on TCP 22/80/443/3128 and UDP 53/443) failed (%s); none of their %d nonces in any log",
				len(why), len(directTargets()), summarise(why), len(s.main.directNonces))
		}
	}
	if r, ok := s.main.res["routes"]; ok {
		routes := lineWith(strings.SplitN(r.Out, "\n\n", 2)[0], "")
		if len(routes) != 1 || strings.Contains(r.Out, "default") {
			t.Errorf("the pod has routes beyond its own subnet:\n%s", r.Out)
		}
		if strings.Count(r.Out, "unreachable") < 2 {
			t.Errorf("ip route get does not say the fake and the gateway are unreachable:\n%s", r.Out)
		} else {
			ev.add("ip route: only %q; route get %s and %s: network unreachable", strings.TrimSpace(routes[0]), secFakeIP, egressGW)
		}
	}
	s.quiet(t, ev, "gateway")
	s.checkControl(t, ev, "direct sends from a container on the egress network", s.controlNonces["direct"]...)
	s.checkControl(t, ev, "MSG_DONTROUTE sendto to the fake from a container on the egress network (on-link there)", s.controlNonces["dontroute"]...)
	s.checkKube(t, ev, 2)
}

func (s *secSuite) row3(t *testing.T, ev *evidence) {
	s.check(t, ev, &s.main, s.main.ofRow(3))
	if r, ok := s.main.res["ipv6 routes and addresses"]; ok {
		clean := true
		for _, l := range strings.Split(r.Out, "\n") {
			f := strings.Fields(l)
			if len(f) == 0 {
				continue
			}
			if strings.Contains(l, "UP") || strings.Contains(l, "UNKNOWN") {
				for _, a := range f[2:] {
					if !strings.HasPrefix(a, "fe80:") && a != "::1/128" {
						t.Errorf("the pod has a non-link-local IPv6 address: %s", l)
						clean = false
					}
				}
				continue
			}
			if !strings.HasPrefix(f[0], "fe80::/") && !strings.HasPrefix(f[0], "ff00::/") {
				t.Errorf("the pod has an IPv6 route beyond link-local: %s", l)
				clean = false
			}
		}
		if clean {
			ev.add("ip -6 route: %s", orNone(strings.Join(lineWith(strings.SplitN(r.Out, "\n\n", 2)[0], "/"), ", ")))
		}
	}
	if len(s.env.ipv6Addrs()) == 0 {
		ev.add("this machine has no IPv6 address of its own, so no curl -6 to one was sent; the pod has no IPv6 route or address (above)")
	}
	if r, ok := s.main.res["aaaa of an allowed name"]; ok {
		if !strings.Contains(r.Out, "status: NOERROR") || !strings.Contains(r.Out, "ANSWER: 0,") {
			t.Errorf("AAAA for allowed.test is not an empty NOERROR answer: %s", r)
		} else {
			ev.add("AAAA allowed.test: NOERROR with 0 answers")
		}
	}
	s.checkControl(t, ev, "link-local multicast from a container on the egress bridge to the gateway canary", s.controlNonces["ll6"]...)
	if len(s.env.ipv6Addrs()) > 0 {
		s.checkControl(t, ev, "TCP from the host to the canary on the machine's IPv6 address", s.controlNonces["host-ipv6"]...)
	}
	s.checkKube(t, ev, 3)
}

func (s *secSuite) row4(t *testing.T, ev *evidence) {
	s.check(t, ev, &s.main, s.main.ofRow(4))
	s.checkControl(t, ev, "ping with the nonce as pad (seen by the sniffer) and UDP 443 datagram", append(s.controlNonces["ping"], s.controlNonces["udp443"]...)...)
	// The QUIC Initial's control must be seen twice: by the fake's UDP
	// listener and by the sniffer on the wire, where a QUIC packet that
	// found a way out would be seen.
	for _, nn := range s.controlNonces["quic"] {
		var fake, wire bool
		for _, l := range s.env.seen(nn) {
			fake = fake || strings.HasPrefix(l, "secfake: ") && strings.Contains(l, " udp datagram port=443 ")
			wire = wire || strings.HasPrefix(l, "gateway: ") && strings.Contains(l, " sniff ") && strings.Contains(l, " proto=17 ")
		}
		if !fake || !wire {
			t.Errorf("self-check: the QUIC Initial from the egress network was not seen by both the fake (%t) and the sniffer (%t): %s",
				fake, wire, s.control.res["quic"])
		} else {
			ev.add("self-check: the same QUIC Initial from the egress network reached the fake's UDP 443 and the sniffer saw its nonce on the wire")
		}
	}
	s.checkKube(t, ev, 4)
}

func (s *secSuite) row5(t *testing.T, ev *evidence) {
	s.check(t, ev, &s.main, s.main.ofRow(5))
	// Every SNI the upstream TLS server saw during the main session must be
	// an allowlisted name.
	var snis []string
	hellos := lineWith(s.duringMain("secfake"), "tls hello sni=")
	if len(hellos) == 0 {
		t.Errorf("the TLS server logged no hello during the main session: the SNI scan saw nothing, so it proves nothing")
	}
	for _, l := range hellos {
		sni := between(l, `sni="`, `"`)
		snis = append(snis, sni)
		low := strings.TrimSuffix(strings.ToLower(sni), ".")
		if low != "allowed.test" && !strings.HasSuffix(low, ".wild.test") && !strings.HasSuffix(low, "."+rebindSuffix) {
			t.Errorf("LEAK: the TLS server saw SNI %q, which is not allowlisted", sni)
		}
	}
	ev.add("SNIs of the %d hellos the TLS server saw: %s", len(hellos), strings.Join(shorten(uniq(snis)), ", "))
	s.checkControl(t, ev, "hand-made ClientHellos sent straight to the TLS server", s.controlNonces["hello"]...)
	s.checkKube(t, ev, 5)
}

func (s *secSuite) row6(t *testing.T, ev *evidence) {
	s.check(t, ev, &s.main, s.main.ofRow(6))
	for _, name := range []string{"https record of an allowed name", "svcb record of an allowed name"} {
		r, ok := s.main.res[name]
		if !ok {
			continue
		}
		if !strings.Contains(r.Out, "ANSWER: 0,") || strings.Contains(r.Out, "ech=") {
			t.Errorf("LEAK: %s was answered: %s", name, r)
		}
	}
	if !t.Failed() {
		ev.add("HTTPS and SVCB for allowed.test: 0 answers, no ech")
	}
	if r, ok := s.control.res["https record"]; ok {
		if !strings.Contains(r.Out, "ech=") {
			t.Errorf("self-check: the fake's HTTPS record has no ech, so an empty answer in the sandbox proves nothing: %s", r)
		} else {
			ev.add("self-check: the fake itself answers HTTPS with ech=")
		}
	}
	s.checkControl(t, ev, "HTTPS query sent straight to the fake", s.controlNonces["https-record"]...)
	s.checkKube(t, ev, 6)
}

func (s *secSuite) row7(t *testing.T, ev *evidence) {
	s.check(t, ev, &s.main, s.main.ofRow(7))
	s.check(t, ev, &s.opened, s.opened.ofRow(7))
	var containers []string
	for _, c := range secCanaries {
		containers = append(containers, c.name)
	}
	s.wantRefusals(t, ev, 7)
	s.quiet(t, ev, append(containers, "gateway")...)
	ev.add("opened path: with UPSTREAM_ALLOW naming the canaries' ranges the same probes reached all 3 canaries; the gateway and the router's loopback stayed refused")
	s.checkControl(t, ev, "TCP to the canaries and the gateway from the egress network", s.controlNonces["canary"]...)
	s.checkKube(t, ev, 7)
}

func (s *secSuite) row8(t *testing.T, ev *evidence) {
	s.check(t, ev, &s.main, s.main.ofRow(8))
	s.check(t, ev, &s.opened, s.opened.ofRow(8))
	if r, ok := s.main.res["host.containers.internal does not resolve"]; ok {
		if r.RC == 0 {
			t.Errorf("host.containers.internal resolves in the sandbox: %s", r)
		} else if wantReason(t, "host.containers.internal", r, rNoName) {
			ev.add("host.containers.internal: no such name (EAI_NONAME)")
		}
	}
	if r, ok := s.opened.res["allowlisted host.containers.internal resolves to the forwarder"]; ok {
		if r.RC != 0 || !regexp.MustCompile(`^getaddrinfo host\.containers\.internal: 127\.0\.0\.\d+$`).MatchString(strings.TrimSpace(r.Out)) {
			t.Errorf("allowlisted host.containers.internal does not resolve to the forwarder alone: %s", r)
		}
	}
	if !strings.Contains(s.env.logText("secfake"), `name="host.containers.internal.`) {
		t.Errorf("the router never asked the fake for host.containers.internal: its host filter was not reached")
	}
	s.wantRefusals(t, ev, 8)
	s.quiet(t, ev, "host canaries")
	ev.add("host canaries on %s port %d", strings.Join(append([]string{"127.0.0.1", "::1"}, s.env.hostIPs...), ", "), s.env.hostPort)
	s.checkControl(t, ev, "sends to the machine's address from the egress network (via host.containers.internal) and to loopback from the host",
		append(s.controlNonces["host"], s.controlNonces["host-loopback"]...)...)
	s.checkKube(t, ev, 8)
}

func (s *secSuite) row9(t *testing.T, ev *evidence) {
	if r, ok := s.main.res["write /etc/resolv.conf and /etc/hosts"]; ok {
		if r.RC == 0 {
			t.Errorf("the agent can write /etc/resolv.conf or /etc/hosts: %s", r)
		} else if wantReason(t, "write /etc/resolv.conf and /etc/hosts", r, rWriteEACCES) {
			ev.add("writing /etc/resolv.conf and /etc/hosts: EACCES")
		}
	}
	s.check(t, ev, &s.main, s.main.ofRow(9))
	ev.add("edited copies bind-mounted in the agent's own user+mount namespace named the fake and the egress gateway as resolvers and mapped allowed.test to the fake")
}

func (s *secSuite) row10(t *testing.T, ev *evidence) {
	if r, ok := s.main.res["capabilities"]; ok {
		eff, ok1 := capBits(r.Out, "CapEff")
		bnd, ok2 := capBits(r.Out, "CapBnd")
		const netAdmin, netRaw, sysAdmin = 12, 13, 21
		switch {
		case !ok1 || !ok2:
			t.Errorf("cannot read capabilities: %s", r)
		case eff != 0:
			t.Errorf("the agent has effective capabilities %x", eff)
		case bnd&(1<<netAdmin|1<<netRaw|1<<sysAdmin) != 0:
			t.Errorf("NET_ADMIN, NET_RAW or SYS_ADMIN is in the bounding set %x", bnd)
		default:
			ev.add("CapEff=0, CapBnd=%x has no NET_ADMIN, NET_RAW or SYS_ADMIN", bnd)
		}
	}
	s.check(t, ev, &s.main, s.main.ofRow(10))
	s.checkControl(t, ev, "raw IPv4/UDP packet from a container with NET_RAW", s.controlNonces["raw"]...)
}

func (s *secSuite) row11(t *testing.T, ev *evidence) {
	if !s.nested.ran {
		t.Fatalf("the nested-podman session did not run")
	}
	if r, ok := s.nested.res["build a nested image offline"]; !ok || r.RC != 0 {
		t.Fatalf("cannot build the nested image inside the sandbox: %s", r)
	}
	own := strings.Fields(s.nested.res["the agent's own address"].Out)
	ran := 0
	for _, m := range s.nestedModes {
		pre := m + ": "
		started, ok := s.nested.res[pre+"started"]
		if !ok {
			outer := s.nested.res["nested "+m]
			if m == "default" || m == "host" {
				t.Errorf("nested container (%s) did not start: %s", m, outer)
				continue
			}
			why := firstLine(outer.Out)
			if e := lineWith(outer.Out, "Error:"); len(e) > 0 {
				why = firstLine(e[0])
			}
			ev.add("--network %s cannot start (%s): no network of its own", m, why)
			continue
		}
		ran++
		if len(own) > 3 && !strings.Contains(started.Out, own[3]) {
			t.Errorf("nested (%s) is not in the agent's network namespace (agent %s): %s", m, own[3], started)
		}
		nonces := s.nestedNonces[m]
		for _, name := range []string{"dns A", "dns TXT tcp", "direct", "raw sockets"} {
			r, ok := s.nested.res[pre+name]
			if !ok {
				t.Errorf("nested (%s) probe %q did not report", m, name)
				continue
			}
			if r.RC == 0 {
				t.Errorf("LEAK: nested (%s) %s succeeded: %s", m, name, r)
				continue
			}
			if why, ok := nestedReasons[name]; ok {
				wantReason(t, "nested ("+m+") "+name, r, why)
				continue
			}
			// direct: one line per send, each without a route.
			sends := lineWith(r.Out, " failed ")
			if len(sends) != 12 || len(lineWith(r.Out, " failed ENETUNREACH")) != 12 {
				t.Errorf("nested (%s) direct: want 12 sends failed with ENETUNREACH: %s", m, r)
			}
		}
		for k, n := range nonces {
			if k == "allowed" {
				continue
			}
			if got := s.env.seen(n); len(got) > 0 {
				t.Errorf("LEAK: nested (%s) %s: nonce reached:\n%s", m, k, strings.Join(got, "\n"))
			}
		}
		if r := s.nested.res[pre+"allowed"]; r.RC != 0 || len(s.env.seen(nonces["allowed"])) == 0 {
			t.Errorf("nested (%s): the allowlisted request did not arrive: %s", m, r)
		}
	}
	if !t.Failed() {
		ev.add("nested containers (%s) share the agent's address; DNS (A/UDP, TXT/TCP: NXDOMAIN), 12 direct sends (ENETUNREACH) and raw sockets (EPERM) failed with nonces absent; the allowlisted HTTPS request arrived from each",
			strings.Join(s.nestedModes[:ran], ", "))
	}
}

func (s *secSuite) row12(t *testing.T, ev *evidence) {
	if r, ok := s.main.res["sockets"]; ok {
		// find may fail only on directories it cannot read, each of which
		// the agent cannot search either (no socket in it can be reached).
		var socks, errs, denied []string
		planted, found, rc := false, false, ""
		deniedRe := regexp.MustCompile(`^find stderr: find: '(.*)': Permission denied$`)
		unsearchable := map[string]bool{}
		for _, l := range strings.Split(r.Out, "\n") {
			switch {
			case l == "planted "+plantedSock:
				planted = true
			case l == plantedSock:
				found = true
			case strings.HasPrefix(l, "find rc="):
				rc = strings.TrimPrefix(l, "find rc=")
			case deniedRe.MatchString(l):
				denied = append(denied, deniedRe.FindStringSubmatch(l)[1])
			case strings.HasPrefix(l, "unsearchable: "):
				unsearchable[strings.TrimPrefix(l, "unsearchable: ")] = true
			case strings.HasPrefix(l, "/"):
				socks = append(socks, l)
			case strings.TrimSpace(l) != "":
				errs = append(errs, l)
			}
		}
		for _, d := range denied {
			if !unsearchable[d] {
				errs = append(errs, "find could not read "+d+", which the agent can search")
			}
		}
		switch {
		case !planted:
			t.Errorf("the socket scan could not plant its own socket at %s: %s", plantedSock, r)
		case len(errs) > 0 || !(rc == "0" || rc == "1" && len(denied) > 0):
			t.Errorf("find failed (rc=%s: %s), so its silence proves nothing: %s", rc, strings.Join(errs, "; "), r)
		case !found:
			t.Errorf("find did not list the socket planted at %s: the scan is blind: %s", plantedSock, r)
		case len(socks) > 0:
			t.Errorf("unix sockets visible inside:\n%s", strings.Join(socks, "\n"))
		default:
			ev.add("find / -type s (outside /proc, /sys) lists the socket planted at %s and no other; the only directories it could not read (%s) the agent cannot search",
				plantedSock, orNone(strings.Join(denied, ", ")))
		}
	}
	if r, ok := s.main.res["runtime dirs and env"]; ok {
		lines := strings.Split(strings.TrimSpace(r.Out), "\n")
		for _, l := range lines {
			switch {
			case strings.Contains(l, "No such file"):
			case strings.TrimSpace(l) == "0":
			default:
				t.Errorf("host runtime state visible inside: %q", l)
			}
		}
		if !t.Failed() {
			ev.add("/run/user/*, /run/podman, /var/run/docker.sock, /run/containers absent; no DOCKER_HOST/CONTAINER_HOST/XDG_RUNTIME_DIR; no API socket in mountinfo")
		}
	}
}

func (s *secSuite) row13(t *testing.T, ev *evidence) {
	if r, ok := s.main.res["processes"]; ok {
		var comms []string
		for _, l := range strings.Split(r.Out, "\n")[1:] {
			if f := strings.Fields(l); len(f) >= 3 {
				comms = append(comms, f[2])
			}
		}
		for _, c := range comms {
			for _, bad := range []string{"nginx", "dnsmasq", "routerd", "forwarder", "conmon", "podman", "catatonit", "pause", "slirp4netns"} {
				if c == bad || (bad == "podman" && c != "podman-init" && strings.HasPrefix(c, "podman")) {
					t.Errorf("the agent sees the %s process: %s", bad, r.Out)
				}
			}
		}
		ev.add("ps -e inside: %s", strings.Join(uniq(comms), ", "))
	}
	for _, helper := range []string{"router", "forwarder"} {
		s.killHelper(t, ev, helper)
	}
}

// killHelper kills the router or the forwarder from the host while the
// agent keeps making allowed requests, each with its own nonce.
func (s *secSuite) killHelper(t *testing.T, ev *evidence, helper string) {
	dir := launchDir(t)
	// The agent ignores SIGTERM, as a hostile one would, and keeps trying
	// until the launcher kills it. Eight loops, started 0.1 s apart: a
	// request to a dead router can hang until curl's timeout, and new
	// ones must keep starting after the kill for the row to prove
	// anything.
	script := preflight("preflight", []string{"sh", "curl", "head", "od", "tr", "date", "sleep", "touch"}, pfCA) + `trap '' TERM; touch started
loop() {
  i=0
  while [ $i -lt 200 ]; do
    n=n$(head -c8 /dev/urandom | od -An -tx1 | tr -d ' \n'); t=$(date +%s%N)
    if curl -sS --max-time 1 --cacert ./ca.pem -o /dev/null https://$n.wild.test/$n 2>/dev/null; then r=ok; else r=fail; fi
    echo "$r $n $t" >> egress.log; i=$((i+1)); sleep 0.05
  done
}
for l in 1 2 3 4 5 6 7 8; do loop & sleep 0.1; done
wait`
	var killedAt time.Time
	var name string
	var killErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			b, _ := os.ReadFile(filepath.Join(dir, "egress.log"))
			if strings.Count(string(b), "ok ") >= 3 {
				break
			}
		}
		if name = runningHelper(helper); name == "" {
			killErr = fmt.Errorf("no running %s of this run's sessions", helper)
			return
		}
		// Requests that start once the signal is delivered must fail;
		// one already under way may still finish.
		_, killErr = podman("kill", name)
		killedAt = time.Now()
	}()
	r := runSession(t, sessionOpts{Dir: dir, Cmd: []string{"sh", "-c", script}, Allowlist: s.allowlist(), Env: s.sessionEnv(secAllow), Timeout: 2 * time.Minute})
	<-done
	if killErr != nil {
		t.Errorf("kill the %s: %v", helper, killErr)
		return
	}
	if r.Code == 0 {
		t.Errorf("the session exited 0 after its %s was killed", helper)
	}
	wantCode(t, r, 125)
	if pf, ok := parseProbes(r.Stdout())["preflight"]; ok && pf.RC != 0 {
		t.Errorf("PREFLIGHT FAILED in the %s-kill session:\n%s", helper, indent(pf.Out))
	}
	if !strings.Contains(r.Stderr(), "the "+helper+" ("+name+") stopped") {
		t.Errorf("stderr does not say the %s %s stopped:\n%s", helper, name, indent(r.Stderr()))
	}
	b, _ := os.ReadFile(filepath.Join(dir, "egress.log"))
	var before, after, afterFailed int
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			continue
		}
		ns, _ := strconv.ParseInt(f[2], 10, 64)
		if time.Unix(0, ns).Before(killedAt) {
			if f[0] == "ok" {
				before++
			}
			continue
		}
		after++
		if f[0] == "ok" {
			t.Errorf("LEAK: request %s started after the %s was killed and succeeded", f[1], helper)
		} else {
			afterFailed++
		}
		if got := s.env.seen(f[1]); len(got) > 0 {
			t.Errorf("LEAK: request %s started after the %s was killed and reached:\n%s", f[1], helper, strings.Join(got, "\n"))
		}
	}
	if before < 3 {
		t.Errorf("only %d requests got through before the kill: the row proves nothing", before)
	}
	if after == 0 {
		t.Errorf("no request started after the %s was killed: \"every request afterwards failed\" would prove nothing", helper)
	}
	if !t.Failed() {
		ev.add("%s killed from the host after %d allowed requests got through: exit %d, stderr names it; %d requests started after the kill (at least one required), all failed, nonces absent",
			helper, before, r.Code, afterFailed)
	}
}

// runningHelper finds the router or forwarder of the one session this run
// has going.
func runningHelper(helper string) string {
	out, err := podman("ps", "--format", "{{.Names}}")
	if err != nil {
		return ""
	}
	for _, n := range lines(out) {
		if !strings.HasSuffix(n, "-"+helper) {
			continue
		}
		if m := sessionPID.FindStringSubmatch(n); m != nil {
			pid, _ := strconv.Atoi(m[1])
			if _, ok := launched.Load(pid); ok && syscall.Kill(pid, 0) == nil {
				return n
			}
		}
	}
	return ""
}

func (s *secSuite) row14(t *testing.T, ev *evidence) {
	for _, bad := range []struct{ kind, wrapper, want string }{
		{"nginx", badNginx, "asb_e2e_not_a_directive"},
		{"dnsmasq", badDnsmasq, "bad-dnsmasq.conf"},
	} {
		img := "localhost/asb-e2e-badrouter-" + bad.kind + ":test"
		ctx := mkdir(t, "badrouter-")
		cf := "FROM " + harness.routerImage + "\n# e2e row 14: " + bad.kind + " is given a config that cannot load.\nCOPY wrapper /usr/local/sbin/" + bad.kind + "\n"
		if err := os.WriteFile(filepath.Join(ctx, "Containerfile"), []byte(cf), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ctx, "wrapper"), []byte(bad.wrapper), 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := podman("build", "--pull=never", "-q", "-t", img, ctx); err != nil {
			t.Fatalf("build %s: %v\n%s", img, err, out)
		}
		t.Cleanup(func() { _, _ = podman("rmi", "-f", img) })
		dir := launchDir(t)
		env := s.sessionEnv(secAllow)
		env["AGENT_SANDBOX_ROUTER_IMAGE"] = img
		r := runSession(t, sessionOpts{Dir: dir, Cmd: []string{"sh", "-c", "touch agent-ran"}, Env: env})
		if r.Code == 0 {
			t.Errorf("a router with a broken %s config still launched the agent (exit 0)", bad.kind)
		}
		if _, err := os.Stat(filepath.Join(dir, "agent-ran")); err == nil {
			t.Errorf("the agent ran although the router's %s config failed to load", bad.kind)
		}
		if !strings.Contains(r.Stderr(), "router") || !strings.Contains(r.Stderr(), bad.want) {
			t.Errorf("stderr does not name the router and the %s error (%q):\n%s", bad.kind, bad.want, indent(r.Stderr()))
		}
		if !t.Failed() {
			ev.add("%s config that fails to load: exit %d after %s, the agent never started, stderr shows %s's error", bad.kind, r.Code, r.Elapsed.Round(100*time.Millisecond), bad.kind)
		}
	}
}

// badNginx appends an unknown directive to whatever config nginx is given.
const badNginx = `#!/bin/sh
conf= prev=
for a do
  [ "$prev" = -c ] && conf=$a
  prev=$a
done
if [ -n "$conf" ]; then
  { cat "$conf"; echo 'asb_e2e_not_a_directive on;'; } > /tmp/bad-nginx.conf
  exec /usr/sbin/nginx -c /tmp/bad-nginx.conf
fi
exec /usr/sbin/nginx "$@"
`

// badDnsmasq appends an unknown option to dnsmasq's config file.
const badDnsmasq = `#!/bin/sh
for a do
  shift
  case $a in
  --conf-file=*)
    { cat "${a#--conf-file=}"; echo 'asb-e2e-not-an-option'; } > /tmp/bad-dnsmasq.conf
    a=--conf-file=/tmp/bad-dnsmasq.conf ;;
  esac
  set -- "$@" "$a"
done
exec /usr/sbin/dnsmasq "$@"
`

// quiet asserts the named canaries' listeners logged nothing during the
// main session, whose every probe of them must be blocked.
func (s *secSuite) quiet(t *testing.T, ev *evidence, names ...string) {
	t.Helper()
	// A line carrying a probe's nonce is that probe's row's failure; here
	// go the lines no probe explains.
	var known []string
	for _, p := range s.main.probes {
		if p.nonce != "" {
			known = append(known, needle(p.nonce))
		}
	}
	known = append(known, s.main.directNonces...)
	var got []string
	for _, l := range s.quietLines {
		explained := false
		for _, k := range known {
			explained = explained || strings.Contains(strings.ToLower(l), needle(k))
		}
		for _, n := range names {
			if strings.HasPrefix(l, n+": ") && !explained {
				got = append(got, l)
			}
		}
	}
	if len(got) > 0 {
		t.Errorf("LEAK: canaries heard something during the main session:\n%s", strings.Join(got, "\n"))
		return
	}
	ev.add("%s logged nothing during the main session", strings.Join(names, ", "))
}

// duringMain is what a log gained during the main session, up to the
// markers that closed it, without their lines.
func (s *secSuite) duringMain(name string) string {
	txt := s.env.logText(name)
	from, to := s.mainMark[name], min(s.mainEnd[name], len(txt))
	if from < to {
		return s.env.markers.without(txt[from:to])
	}
	return ""
}

func between(s, from, to string) string {
	_, after, ok := strings.Cut(s, from)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(after, to)
	return v
}

// shorten keeps the table readable: nonces become "<n>".
func shorten(ss []string) []string {
	var out []string
	for _, s := range ss {
		out = append(out, nonceRe.ReplaceAllString(s, "<n>"))
	}
	return uniq(out)
}

func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			if len(l) > 140 {
				l = l[:140] + "..."
			}
			return l
		}
	}
	return "no output"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

var nonceRe = regexp.MustCompile(`n[0-9a-f]{16}`)

// rWriteEACCES: the agent may not write the resolver or hosts file.
var rWriteEACCES = because("EACCES", []int{1}, `(?m)cannot create /etc/resolv\.conf: Permission denied$`, `(?m)cannot create /etc/hosts: Permission denied$`)
