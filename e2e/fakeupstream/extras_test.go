package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

func startExtras(t *testing.T, o options) (*running, *syncBuf) {
	t.Helper()
	buf := &syncBuf{}
	r, err := start(o, &eventLog{w: buf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.close)
	return r, buf
}

func waitBuf(t *testing.T, buf *syncBuf, parts ...string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if hasLine(buf, parts) {
			return
		}
	}
	t.Errorf("log never showed a line with %q:\n%s", parts, buf.String())
}

func hasLine(buf *syncBuf, parts []string) bool {
	for _, line := range strings.Split(buf.String(), "\n") {
		if containsAll(line, parts) {
			return true
		}
	}
	return false
}

func TestUDPDatagramsAreLoggedAndEchoed(t *testing.T) {
	r, buf := startExtras(t, options{udpAddr: "127.0.0.1:0,127.0.0.1:0"})
	for _, pc := range r.udp {
		c, err := net.Dial("udp", pc.LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("udp-nonce-1")); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 100)
		n, err := c.Read(got)
		c.Close()
		if err != nil || string(got[:n]) != "udp-nonce-1" {
			t.Errorf("echo = %q, %v", got[:n], err)
		}
	}
	waitBuf(t, buf, "udp datagram", "udp-nonce-1")
	if !strings.Contains(buf.String(), " udp=127.0.0.1:") {
		t.Errorf("ready line lacks the udp role:\n%s", buf.String())
	}
}

func TestPlainHTTPLogsAnything(t *testing.T) {
	r, buf := startExtras(t, options{httpAddr: "127.0.0.1:0"})
	c, err := net.Dial("tcp", r.http[0].Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET /http-nonce-2 HTTP/1.0\r\nHost: x.test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	reply, _ := io.ReadAll(c)
	if !strings.Contains(string(reply), "hello from plain http") {
		t.Errorf("reply = %q", reply)
	}
	waitBuf(t, buf, "http plaintext", "http-nonce-2")
}

func TestConnectProxyLogsAndNeverDials(t *testing.T) {
	r, buf := startExtras(t, options{proxyAddr: "127.0.0.1:0"})
	c, err := net.Dial("tcp", r.proxy[0].Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "CONNECT proxy-nonce-3.denied.test:443 HTTP/1.1\r\nHost: proxy-nonce-3.denied.test:443\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	status, _ := br.ReadString('\n')
	if !strings.Contains(status, "200") {
		t.Fatalf("status = %q", status)
	}
	_, _ = br.ReadString('\n')
	if _, err := io.WriteString(c, "tunnel-nonce-4\n"); err != nil {
		t.Fatal(err)
	}
	echo, _ := br.ReadString('\n')
	if echo != "tunnel-nonce-4\n" {
		t.Errorf("tunnel echo = %q", echo)
	}
	waitBuf(t, buf, "proxy request", "CONNECT proxy-nonce-3.denied.test:443")
	waitBuf(t, buf, "proxy tunnel", "tunnel-nonce-4")

	// Anything but CONNECT is logged and refused.
	c2, err := net.Dial("tcp", r.proxy[0].Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_ = c2.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(c2, "GET http://get-nonce-5.test/ HTTP/1.1\r\n\r\n")
	reply, _ := io.ReadAll(c2)
	if !strings.Contains(string(reply), "405") {
		t.Errorf("GET through the proxy = %q, want 405", reply)
	}
	waitBuf(t, buf, "proxy request", "get-nonce-5")
}

func TestIPNames(t *testing.T) {
	r, buf := startExtras(t, options{
		zone:    "allowed.test=10.99.0.10",
		dnsAddr: "127.0.0.1:0",
		ipNames: "rebind.test",
		ipAllow: "127.0.0.1/32,10.99.0.0/24",
	})
	addr := r.dnsUDP.LocalAddr().String()
	cases := []struct {
		name  string
		rcode dnsmessage.RCode
		want  string
	}{
		{"ip-127-0-0-1.rebind.test.", dnsmessage.RCodeSuccess, "127.0.0.1"},
		{"ip-10-99-0-1-n0123.rebind.test.", dnsmessage.RCodeSuccess, "10.99.0.1"},
		{"x.ip-10-99-0-1.rebind.test.", dnsmessage.RCodeNameError, ""},
		{"ip-10-99-1-1-n1.rebind.test.", dnsmessage.RCodeNameError, ""}, // outside -ip-allow
		{"ip-127-0-0-2.rebind.test.", dnsmessage.RCodeNameError, ""},
		{"ip-10-99-0.rebind.test.", dnsmessage.RCodeNameError, ""},
		{"ip-10-99-0-256.rebind.test.", dnsmessage.RCodeNameError, ""},
		{"ip-10-99-0-1.other.test.", dnsmessage.RCodeNameError, ""},
	}
	for _, tc := range cases {
		hdr, answers := parseReply(t, udpExchange(t, addr, query(t, tc.name, dnsmessage.TypeA)))
		got := ""
		for _, a := range answers {
			if ar, ok := a.Body.(*dnsmessage.AResource); ok {
				got = net.IP(ar.A[:]).String()
			}
		}
		if hdr.RCode != tc.rcode || got != tc.want {
			t.Errorf("%s: rcode %v answer %q, want %v %q", tc.name, hdr.RCode, got, tc.rcode, tc.want)
		}
	}
	waitBuf(t, buf, "dns ip-name refused", "ip-10-99-1-1-n1.rebind.test.")
}

func TestIPNamesNeedAnAllowList(t *testing.T) {
	for _, o := range []options{
		{ipNames: "rebind.test"},
		{ipNames: "rebind.test", ipAllow: "10.0.0.1"},
		{ipNames: "rebind.test", ipAllow: "fd00::/8"},
	} {
		if r, err := start(o, &eventLog{w: io.Discard}); err == nil {
			r.close()
			t.Errorf("start(%+v) succeeded, want an error", o)
		}
	}
}

func TestHTTPSRecordsCarryECH(t *testing.T) {
	r, _ := startExtras(t, options{zone: "allowed.test=10.99.0.10", dnsAddr: "127.0.0.1:0"})
	addr := r.dnsUDP.LocalAddr().String()
	for _, typ := range []dnsmessage.Type{dnsmessage.TypeHTTPS, dnsmessage.TypeSVCB} {
		_, answers := parseReply(t, udpExchange(t, addr, query(t, "allowed.test.", typ)))
		if len(answers) != 1 {
			t.Fatalf("%v: %d answers, want 1", typ, len(answers))
		}
		var svcb *dnsmessage.SVCBResource
		switch b := answers[0].Body.(type) {
		case *dnsmessage.HTTPSResource:
			svcb = &b.SVCBResource
		case *dnsmessage.SVCBResource:
			svcb = b
		}
		if svcb == nil {
			t.Fatalf("%v: answer %T", typ, answers[0].Body)
		}
		if ech, ok := svcb.GetParam(dnsmessage.SVCParamECH); !ok || string(ech) != echConfig {
			t.Errorf("%v: ech = %q, %v", typ, ech, ok)
		}
	}
	_, answers := parseReply(t, udpExchange(t, addr, query(t, "nowhere.test.", dnsmessage.TypeHTTPS)))
	if len(answers) != 0 {
		t.Errorf("HTTPS for an unknown name answered %v", answers)
	}
}

// needSniffer skips or fails a test that needs the sniffer's CAP_NET_RAW.
// `make test` has it as root, as in CI (.ci/run runs as root and sets CI);
// only a developer's `go test` without root skips.
func needSniffer(t *testing.T) {
	t.Helper()
	s, err := startSniffer(&eventLog{w: io.Discard}, nil, nil)
	if err == nil {
		_ = s.Close()
		return
	}
	if (errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES)) && os.Getenv("CI") == "" && os.Geteuid() != 0 {
		t.Skipf("no CAP_NET_RAW here; run go test as root to run this test: %v", err)
	}
	t.Fatalf("the sniffer cannot start (make test must run as root, with CAP_NET_RAW): %v", err)
}

// sendUntilLogged sends payload from c to addr until the log shows a line
// with all of parts. Under load a packet socket drops frames, and with
// every test's traffic on lo, one datagram may never reach the sniffer.
func sendUntilLogged(t *testing.T, c net.PacketConn, addr net.Addr, payload string, buf *syncBuf, parts ...string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		_, _ = c.WriteTo([]byte(payload), addr)
		for next := time.Now().Add(100 * time.Millisecond); time.Now().Before(next); time.Sleep(10 * time.Millisecond) {
			if hasLine(buf, parts) {
				return
			}
		}
	}
	t.Errorf("log never showed a line with %q:\n%s", parts, buf.String())
}

func listenUDP(t *testing.T) net.PacketConn {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestSnifferLogsNonceFrames(t *testing.T) {
	needSniffer(t)
	r, buf := startExtras(t, options{sniff: true, udpAddr: "127.0.0.1:0"})
	sendUntilLogged(t, listenUDP(t), r.udp[0].LocalAddr(), "payload n0123456789abcdef0 end", buf,
		"sniff if=lo", "src=127.0.0.1", "nonces=n0123456789abcde")
}

func TestSnifferIgnores(t *testing.T) {
	needSniffer(t)
	t.Run("traffic within ignored ranges", func(t *testing.T) {
		r, buf := startExtras(t, options{sniff: true, sniffIgnore: "127.0.0.1/32", udpAddr: "127.0.0.1:0"})
		c := listenUDP(t)
		if _, err := c.WriteTo([]byte("payload nfedcba9876543210 end"), r.udp[0].LocalAddr()); err != nil {
			t.Fatal(err)
		}
		waitBuf(t, buf, "udp datagram", "nfedcba9876543210")
		// A frame with one end outside the range, sent after the ignored one:
		// once the sniffer has logged it, it has seen the ignored one too.
		sendUntilLogged(t, c, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 9}, "payload n0f1e2d3c4b5a6978 end", buf,
			"sniff if=lo", "dst=127.0.0.2", "nonces=n0f1e2d3c4b5a697")
		if strings.Contains(buf.String(), "nonces=nfedcba987654321") {
			t.Errorf("the sniffer logged traffic inside -sniff-ignore:\n%s", buf.String())
		}
	})
	// With 127.0.0.0/16 as the session pool, 127.0.5.0/24 is a session
	// network whose router is 127.0.5.2: only frames between that address
	// and another of the same /24 go unlogged.
	t.Run("only a session's own traffic", func(t *testing.T) {
		r, buf := startExtras(t, options{sniff: true, sniffSessions: "127.0.0.0/16", udpAddr: "127.0.5.2:0"})
		port := r.udp[0].LocalAddr().(*net.UDPAddr).Port
		own := listenUDPOn(t, "127.0.5.9")
		if _, err := own.WriteTo([]byte("payload n1111111111111111 end"), r.udp[0].LocalAddr()); err != nil {
			t.Fatal(err)
		}
		waitBuf(t, buf, "udp datagram", "n1111111111111111")
		// Frames sent after the ignored one: once each is logged, the
		// sniffer has seen the ignored one too.
		for _, c := range []struct {
			from, to, nonce string
		}{
			{"127.0.5.9", "127.0.6.2", "n2222222222222222"},  // to another session's router
			{"127.0.5.9", "127.0.5.10", "n3333333333333333"}, // two addresses of one session network, neither its router
			{"127.0.6.9", "127.0.5.9", "n4444444444444444"},  // between two session networks
		} {
			sendUntilLogged(t, listenUDPOn(t, c.from), &net.UDPAddr{IP: net.ParseIP(c.to), Port: port}, "payload "+c.nonce+" end", buf,
				"sniff if=lo", "src="+c.from+" ", "dst="+c.to+" ", "nonces="+c.nonce[:16])
		}
		if strings.Contains(buf.String(), "nonces=n111111111111111") {
			t.Errorf("the sniffer logged a session's own traffic (to its router at .2):\n%s", buf.String())
		}
	})
}

func TestSnifferRefusesANarrowSessionPool(t *testing.T) {
	if _, err := startSniffer(&eventLog{w: io.Discard}, nil, []netip.Prefix{netip.MustParsePrefix("10.89.0.0/25")}); err == nil {
		t.Errorf("a session pool narrower than /24 was accepted")
	}
}

func listenUDPOn(t *testing.T, ip string) net.PacketConn {
	t.Helper()
	c, err := net.ListenPacket("udp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestUnreachableRoute adds and removes the route in a network namespace
// of its own: it runs itself again under unshare, as root of a new user
// namespace that owns a new network namespace (no root needed, and the
// host's routes are never touched).
func TestUnreachableRoute(t *testing.T) {
	if os.Getenv("FAKEUPSTREAM_TEST_OWN_NETNS") == "1" {
		unreachableRouteInOwnNetns(t)
		return
	}
	cmd := exec.Command("unshare", "--map-root-user", "--net", os.Args[0], "-test.run=^TestUnreachableRoute$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "FAKEUPSTREAM_TEST_OWN_NETNS=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestUnreachableRoute") {
		t.Fatalf("the test in a network namespace of its own (unshare --map-root-user --net): %v\n%s", err, out)
	}
}

func unreachableRouteInOwnNetns(t *testing.T) {
	p := netip.MustParsePrefix("10.89.0.0/16")
	if err := addUnreachable(p); err != nil {
		t.Fatalf("add: %v", err)
	}
	if got := routeLines(t); !slices.Contains(got, "0000590A 0000FFFF reject") {
		t.Errorf("no unreachable route for %s after adding it: %q", p, got)
	}
	if err := addUnreachable(p); err != nil {
		t.Errorf("adding it again (as after a killed fake): %v", err)
	}
	if got := routeLines(t); len(got) != 1 {
		t.Errorf("want one route after adding it twice: %q", got)
	}
	if err := delUnreachable(p); err != nil {
		t.Errorf("delete: %v", err)
	}
	if got := routeLines(t); len(got) != 0 {
		t.Errorf("routes left after the delete: %q", got)
	}
}

// routeLines are the network namespace's IPv4 routes as
// "destination mask reject|-", in /proc/net/route's hexadecimal.
func routeLines(t *testing.T) []string {
	b, err := os.ReadFile("/proc/self/net/route")
	if err != nil {
		t.Error(err)
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(l)
		if len(f) < 8 {
			continue
		}
		flags, _ := strconv.ParseUint(f[3], 16, 32)
		rej := "-"
		if flags&0x0200 != 0 { // RTF_REJECT
			rej = "reject"
		}
		out = append(out, f[1]+" "+f[7]+" "+rej)
	}
	return out
}
