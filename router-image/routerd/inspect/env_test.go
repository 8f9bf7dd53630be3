package inspect

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/agent-sandbox/agent-sandbox/internal/dnsserve"
	"github.com/agent-sandbox/agent-sandbox/internal/testpki"
)

// The names the tests use: the fake resolver answers each with 127.0.0.1
// and the fake upstream has a certificate for each.
var upstreamNames = []string{"allowed.test", "a.wild.test", "api.example.com", "removed.test"}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fakeDNS answers A queries for the upstream names with 127.0.0.1 (and
// refuses the rest) and counts them.
type fakeDNS struct {
	addr    string
	queries atomic.Int64
}

func startDNS(t testing.TB) *fakeDNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	f := &fakeDNS{addr: pc.LocalAddr().String()}
	go dnsserve.UDP(pc, func(msg []byte, _ string, _ net.Addr) []byte {
		f.queries.Add(1)
		return answer(msg, false)
	})
	return f
}

// startTruncatingDNS answers truncated over UDP and in full over TCP, on
// one port.
func startTruncatingDNS(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(); _ = pc.Close() })
	go dnsserve.UDP(pc, func(msg []byte, _ string, _ net.Addr) []byte { return answer(msg, true) })
	go dnsserve.TCP(l, 5*time.Second, func(msg []byte, _ string, _ net.Addr) []byte { return answer(msg, false) }, nil)
	return l.Addr().String()
}

// answer is the fake resolver's reply; truncated sets TC and leaves the
// answers out, as a server does over UDP when they do not fit.
func answer(msg []byte, truncated bool) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	name := strings.TrimSuffix(q.Name.String(), ".")
	known := false
	for _, n := range upstreamNames {
		known = known || n == name
	}
	rh := dnsmessage.Header{ID: h.ID, Response: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true, Truncated: truncated}
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	_ = b.StartQuestions()
	_ = b.Question(q)
	_ = b.StartAnswers()
	if known && !truncated && q.Type == dnsmessage.TypeA {
		_ = b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}, dnsmessage.AResource{A: [4]byte{127, 0, 0, 1}})
	}
	out, _ := b.Finish()
	return out
}

// upstream is a TLS server standing in for every upstream name, with a
// certificate from its own CA; it records what reaches it.
type upstream struct {
	srv      *httptest.Server
	ca       *testpki.CA
	caFile   string
	hits     atomic.Int64
	mu       sync.Mutex
	received []*http.Request
}

func startUpstream(t testing.TB, h http.Handler) *upstream {
	t.Helper()
	ca, err := testpki.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.IssueTLS(upstreamNames, nil)
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{ca: ca, caFile: filepath.Join(t.TempDir(), "upstream-ca.pem")}
	if err := testpki.WriteFile(u.caFile, ca.CertPEM); err != nil {
		t.Fatal(err)
	}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		u.mu.Lock()
		u.received = append(u.received, r.Clone(context.Background()))
		u.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	u.srv.EnableHTTP2 = true
	u.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	u.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) port() int {
	return u.srv.Listener.Addr().(*net.TCPAddr).Port
}

func (u *upstream) last(t *testing.T) *http.Request {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.received) == 0 {
		t.Fatal("nothing reached the upstream")
	}
	return u.received[len(u.received)-1]
}

// env is a running proxy with its config, resolver and logs.
type env struct {
	dir, file, sock string
	dns             *fakeDNS
	out, logs       *syncBuffer
	p               *Proxy
	caPool          *x509.CertPool
	stopped         chan error
}

type envConfig struct {
	hosts, wildcards []string
	gates            map[string]string
	trustedCA        string
	port             int
	keep             bool
	forge            *forgeFile
}

func writeConfig(t testing.TB, path string, c envConfig, resolver string) {
	t.Helper()
	b, err := json.Marshal(file{Hosts: c.hosts, Wildcards: c.wildcards, TrustedCA: c.trustedCA, Resolver: resolver, Gates: c.gates, Forge: c.forge})
	if err != nil {
		t.Fatal(err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func defaultConfig(u *upstream) envConfig {
	return envConfig{
		hosts:     []string{"allowed.test", "api.example.com", "removed.test"},
		wildcards: []string{"wild.test"},
		trustedCA: u.caFile,
		port:      u.port(),
	}
}

func startEnv(t testing.TB, c envConfig) *env {
	t.Helper()
	// Unix socket paths are short: t.TempDir's can be too long.
	sockDir, err := os.MkdirTemp("", "inspect")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	e := &env{dir: t.TempDir(), sock: filepath.Join(sockDir, "s"), dns: startDNS(t), out: &syncBuffer{}, logs: &syncBuffer{}, stopped: make(chan error, 1)}
	e.file = filepath.Join(e.dir, ConfigFile)
	if c.hosts != nil || c.wildcards != nil {
		writeConfig(t, e.file, c, e.dns.addr)
	}
	caDir := filepath.Join(e.dir, "ca")
	if err := os.Mkdir(caDir, 0o755); err != nil {
		t.Fatal(err)
	}
	e.p, err = New(Config{
		Socket: e.sock, File: e.file, CADir: caDir,
		Out: e.out, Log: log.New(e.logs, "routerd: ", 0),
		Poll: 10 * time.Millisecond, UpstreamPort: c.port, KeepCredentials: c.keep,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.caPool = x509.NewCertPool()
	if !e.caPool.AppendCertsFromPEM(e.ca(t)) {
		t.Fatal("ca.pem holds no certificate")
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { e.stopped <- e.p.Serve(ctx) }()
	go e.p.Warm()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-e.stopped:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after cancel")
		}
	})
	return e
}

func (e *env) ca(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dir, "ca", CAFile))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (e *env) dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", e.sock)
}

// client speaks to the proxy as the agent does, trusting the session CA.
func (e *env) client(h2 bool) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return e.dial(ctx) },
		TLSClientConfig:   &tls.Config{RootCAs: e.caPool},
		ForceAttemptHTTP2: h2,
	}}
}

// handshake does TLS with the proxy for name.
func (e *env) handshake(name string, protos ...string) (*tls.Conn, error) {
	raw, err := e.dial(context.Background())
	if err != nil {
		return nil, err
	}
	// Go's client sends no SNI without a name, and checks nothing then.
	c := tls.Client(raw, &tls.Config{ServerName: name, RootCAs: e.caPool, NextProtos: protos, InsecureSkipVerify: name == ""})
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := c.Handshake(); err != nil {
		_ = raw.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

func get(t *testing.T, c *http.Client, url string, header http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// waitFor polls cond for up to five seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitOut waits for want in the request log, which is written once the
// handler returns, a moment after the client has its answer.
func (e *env) waitOut(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(e.out.String(), want) {
		if time.Now().After(deadline) {
			t.Errorf("log lacks %s:\n%s", want, e.out)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func nonce(i int) string { return "NONCE" + strconv.Itoa(1000+i) + "X" }
