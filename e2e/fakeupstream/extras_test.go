package main

import (
	"bufio"
	"errors"
	"io"
	"net"
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
		for _, line := range strings.Split(buf.String(), "\n") {
			if containsAll(line, parts) {
				return
			}
		}
	}
	t.Errorf("log never showed a line with %q:\n%s", parts, buf.String())
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

// The sniffer needs CAP_NET_RAW, which `make test` has as root.
func TestSnifferLogsNonceFrames(t *testing.T) {
	s, err := startSniffer(&eventLog{w: io.Discard})
	if errors.Is(err, syscall.EPERM) || (err != nil && strings.Contains(err.Error(), "operation not permitted")) {
		t.Skip("no CAP_NET_RAW here")
	}
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	r, buf := startExtras(t, options{sniff: true, udpAddr: "127.0.0.1:0"})
	c, err := net.Dial("udp", r.udp[0].LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 3 {
		_, _ = c.Write([]byte("payload n0123456789abcdef0 end"))
		time.Sleep(50 * time.Millisecond)
	}
	waitBuf(t, buf, "sniff if=lo", "src=127.0.0.1", "nonces=n0123456789abcde")
}

func TestSnifferIgnoresTrafficWithinIgnoredRanges(t *testing.T) {
	s, err := startSniffer(&eventLog{w: io.Discard})
	if err != nil {
		t.Skip("no CAP_NET_RAW here")
	}
	s.Close()
	r, buf := startExtras(t, options{sniff: true, sniffIgnore: "127.0.0.0/8", udpAddr: "127.0.0.1:0"})
	c, err := net.Dial("udp", r.udp[0].LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte("payload nfedcba9876543210 end"))
	waitBuf(t, buf, "udp datagram", "nfedcba9876543210")
	time.Sleep(200 * time.Millisecond)
	if strings.Contains(buf.String(), "sniff ") {
		t.Errorf("the sniffer logged traffic inside -sniff-ignore:\n%s", buf.String())
	}
}
