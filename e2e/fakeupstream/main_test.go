package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/agent-sandbox/agent-sandbox/internal/testpki"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type fixture struct {
	r   *running
	log *syncBuf
	ca  *testpki.CA
}

// startFake runs every role on loopback ephemeral ports with the suite's
// layout: a static cert for allowed.test plus CA minting for other names.
func startFake(t *testing.T, mods ...func(*options)) *fixture {
	t.Helper()
	dir := t.TempDir()
	ca, err := testpki.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Issue([]string{"allowed.test", "*.wild.test"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"server.pem": cert, "server.key": key, "ca.pem": ca.CertPEM, "ca.key": caKey}
	for name, data := range files {
		if err := testpki.WriteFile(filepath.Join(dir, name), data); err != nil {
			t.Fatal(err)
		}
	}
	buf := &syncBuf{}
	o := options{
		zone:    "allowed.test=10.99.0.10, *.wild.test=10.99.0.11",
		dnsAddr: "127.0.0.1:0",
		tlsAddr: "127.0.0.1:0",
		tcpAddr: "127.0.0.1:0,127.0.0.1:0",
		cert:    filepath.Join(dir, "server.pem"),
		key:     filepath.Join(dir, "server.key"),
		caCert:  filepath.Join(dir, "ca.pem"),
		caKey:   filepath.Join(dir, "ca.key"),
	}
	for _, m := range mods {
		m(&o)
	}
	r, err := start(o, &eventLog{w: buf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.close)
	return &fixture{r: r, log: buf, ca: ca}
}

func (f *fixture) wantLog(t *testing.T, parts ...string) {
	t.Helper()
	for _, line := range strings.Split(f.log.String(), "\n") {
		if containsAll(line, parts) {
			return
		}
	}
	t.Errorf("no log line with %q in:\n%s", parts, f.log.String())
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

func query(t *testing.T, name string, typ dnsmessage.Type) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 4242, RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		t.Fatal(err)
	}
	if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}); err != nil {
		t.Fatal(err)
	}
	msg, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

func parseReply(t *testing.T, raw []byte) (dnsmessage.Header, []dnsmessage.Resource) {
	t.Helper()
	var m dnsmessage.Message
	if err := m.Unpack(raw); err != nil {
		t.Fatalf("unpack reply: %v", err)
	}
	if m.Header.ID != 4242 || !m.Header.Response || m.Header.RecursionAvailable {
		t.Errorf("reply header = %+v, want id 4242, response, no recursion", m.Header)
	}
	return m.Header, m.Answers
}

func udpExchange(t *testing.T, addr string, msg []byte) []byte {
	t.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

func tcpExchange(t *testing.T, addr string, msg []byte) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(msg))), msg...)); err != nil {
		t.Fatal(err)
	}
	var size [2]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, binary.BigEndian.Uint16(size[:]))
	if _, err := io.ReadFull(c, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDNS(t *testing.T) {
	f := startFake(t)
	addr := f.r.dnsUDP.LocalAddr().String()
	cases := []struct {
		name  string
		typ   dnsmessage.Type
		rcode dnsmessage.RCode
		want  string // "" = no answer
	}{
		{"allowed.test.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, "10.99.0.10"},
		{"ALLOWED.test.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, "10.99.0.10"},
		{"allowed.test.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, ""},
		{"a.wild.test.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, "10.99.0.11"},
		{"b.a.wild.test.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, "10.99.0.11"},
		{"wild.test.", dnsmessage.TypeA, dnsmessage.RCodeNameError, ""},
		{"nonce123.denied.test.", dnsmessage.TypeA, dnsmessage.RCodeNameError, ""},
		{"x.allowed.test.", dnsmessage.TypeA, dnsmessage.RCodeNameError, ""},
	}
	for _, tc := range cases {
		for transport, exchange := range map[string]func(*testing.T, string, []byte) []byte{"udp": udpExchange, "tcp": tcpExchange} {
			t.Run(transport+"/"+tc.name+"/"+typeName(tc.typ), func(t *testing.T) {
				hdr, answers := parseReply(t, exchange(t, addr, query(t, tc.name, tc.typ)))
				if hdr.RCode != tc.rcode {
					t.Errorf("rcode = %v, want %v", hdr.RCode, tc.rcode)
				}
				got := ""
				for _, a := range answers {
					if ar, ok := a.Body.(*dnsmessage.AResource); ok {
						got = net.IP(ar.A[:]).String()
					}
				}
				if got != tc.want {
					t.Errorf("answer = %q, want %q", got, tc.want)
				}
				f.wantLog(t, "dns "+transport+" query", `name="`+tc.name+`"`, "type="+typeName(tc.typ))
			})
		}
	}
}

func TestDNSMalformedIsLogged(t *testing.T) {
	f := startFake(t)
	c, err := net.Dial("udp", f.r.dnsUDP.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("junk-nonce-77")); err != nil {
		t.Fatal(err)
	}
	waitLog(t, f, "junk-nonce-77")
}

func waitLog(t *testing.T, f *fixture, s string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if strings.Contains(f.log.String(), s) {
			return
		}
	}
	t.Errorf("log never showed %q:\n%s", s, f.log.String())
}

func httpsGet(t *testing.T, f *fixture, sni, path string) (string, error) {
	t.Helper()
	addr := f.r.tls.Addr().String()
	client := &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: f.ca.Pool(), ServerName: sni},
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			},
		},
	}
	resp, err := client.Get("https://" + sni + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func TestHTTPS(t *testing.T) {
	f := startFake(t)
	for _, sni := range []string{"allowed.test", "a.wild.test", "minted-on-demand.test"} {
		body, err := httpsGet(t, f, sni, "/nonce-abc?x=1")
		if err != nil {
			t.Fatalf("%s: %v", sni, err)
		}
		if want := "hello from " + sni + "\npath /nonce-abc?x=1\n"; body != want {
			t.Errorf("%s: body = %q, want %q", sni, body, want)
		}
		f.wantLog(t, "tls hello", `sni="`+sni+`"`)
		f.wantLog(t, "https request method=GET", `host="`+sni+`"`, `path="/nonce-abc?x=1"`)
	}
}

func TestTLSFailedHandshakeStillLogsSNI(t *testing.T) {
	f := startFake(t)
	c, err := tls.Dial("tcp", f.r.tls.Addr().String(), &tls.Config{ServerName: "rejected-nonce-42.test"})
	if err == nil {
		c.Close()
		t.Fatal("handshake with the system roots succeeded, want unknown authority")
	}
	waitLog(t, f, `sni="rejected-nonce-42.test"`)
	waitLog(t, f, "tls handshake-error")
}

func TestTLSPortPlaintextIsLogged(t *testing.T) {
	f := startFake(t)
	c, err := net.Dial("tcp", f.r.tls.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET /plain-nonce-9 HTTP/1.0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	waitLog(t, f, "tls plaintext")
	waitLog(t, f, "plain-nonce-9")
}

func TestTCPEcho(t *testing.T) {
	f := startFake(t)
	if len(f.r.tcp) != 2 {
		t.Fatalf("want 2 echo ports, got %d", len(f.r.tcp))
	}
	for _, l := range f.r.tcp {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("tcp-nonce-5\n")); err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).CloseWrite()
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(got) != "tcp-nonce-5\n" {
			t.Errorf("echo = %q, %v; want the payload back", got, err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		waitLog(t, f, "tcp close port="+strconv.Itoa(port))
		f.wantLog(t, "tcp payload", "tcp-nonce-5")
	}
}

func TestLogFileAndReadyLine(t *testing.T) {
	dir := t.TempDir()
	logFile := filepath.Join(dir, "fake.log")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, options{logFile: logFile, zone: "allowed.test=10.99.0.10", dnsAddr: "127.0.0.1:0"}, io.Discard)
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(logFile)
		if strings.Contains(string(b), " ready dns=127.0.0.1:") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ready line in %s: %q", logFile, b)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestBadZone(t *testing.T) {
	for _, spec := range []string{"allowed.test", "allowed.test=nope", "allowed.test=::1"} {
		if _, err := parseZone(spec); err == nil {
			t.Errorf("parseZone(%q) succeeded, want an error", spec)
		}
	}
}
