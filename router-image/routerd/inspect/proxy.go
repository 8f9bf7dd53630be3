// Package inspect is routerd's TLS-inspecting proxy. nginx passes it the
// raw TLS connections whose SNI names an inspected host; it answers with a
// certificate from a CA made fresh for the session (which the agent
// trusts), takes every credential the agent put in the request away
// (credentials.go), and sends the request on to the real host over TLS it
// verifies, or to routerd's API gate for the hosts that get the user's key.
// An agent that holds someone's token can then no longer use it on a host
// the user allowed.
package inspect

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/filestamp"
)

const (
	// CAFile is the session CA's certificate in Config.CADir, BundleFile
	// the trusted bundle with it, which the agent gets as its trust store.
	CAFile     = "ca.pem"
	BundleFile = "bundle.pem"

	// The agent's connections: no read or write timeout, since long polls
	// and big uploads take what they take.
	readHeaderTimeout = 30 * time.Second
	idleTimeout       = 3 * time.Minute
	// Upstream connections are kept for the next request.
	maxIdlePerHost  = 16
	upstreamIdle    = 90 * time.Second
	dialTimeout     = 10 * time.Second
	upstreamBufSize = 64 << 10
	copyBufSize     = 32 << 10
)

// Config is what routerd hands the proxy.
type Config struct {
	// Socket is the unix socket nginx passes inspected connections to.
	Socket string
	// File is the config (ConfigFile in the launcher's config dir).
	File string
	// CADir receives CAFile and BundleFile; "" writes neither.
	CADir string
	// Out gets a line per request and per refusal: the router's log,
	// which the launcher reads. Log gets the proxy's own errors.
	Out io.Writer
	Log *log.Logger
	// Poll is how often File and the trusted bundle are looked at.
	Poll time.Duration
	// UpstreamPort is the upstreams' port: 0 means 443 (tests set theirs).
	UpstreamPort int
	// KeepCredentials is hack/mutation-check's inspect-strip-off: requests
	// pass with the agent's credentials.
	KeepCredentials bool
	// AnyHost is hack/mutation-check's inspect-host-check-off: a Host
	// other than the TLS name is passed on (to the TLS name's host).
	AnyHost bool
	// ForgeScopeOff is hack/mutation-check's forge-scope-off: GitHub
	// writes pass for any repository. PublishOpen is
	// registry-publish-open: every registry may be published to.
	ForgeScopeOff, PublishOpen bool
	// LeakCAKey, when set, is handed the CA's key once it is made:
	// hack/mutation-check's ca-key-readable writes it out. Nothing else
	// ever sets it.
	LeakCAKey func(crypto.Signer) error
}

// Proxy is the inspecting proxy of one routerd process.
type Proxy struct {
	cfg    Config
	ca     *authority
	jar    *jar
	signed signedURLs
	policy atomic.Pointer[policy]
	roots  atomic.Pointer[roots]
	conns  connSet
	ln     net.Listener
	srv    *http.Server
	proxy  *httputil.ReverseProxy

	// The follow goroutine's own: what it last read.
	stamp filestamp.Stamp
	tried rootsKey
}

var errNotAdmitted = errors.New("not in the allowlist")

// New makes the session CA, reads the config, writes the CA files and
// listens: everything the agent's first connection needs. It mints no
// certificate yet (see Warm).
func New(cfg Config) (*Proxy, error) {
	if cfg.Poll <= 0 {
		cfg.Poll = 100 * time.Millisecond
	}
	if cfg.UpstreamPort == 0 {
		cfg.UpstreamPort = 443
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Log == nil {
		cfg.Log = log.New(io.Discard, "", 0)
	}
	ca, err := newAuthority()
	if err != nil {
		return nil, fmt.Errorf("session CA: %w", err)
	}
	p := &Proxy{cfg: cfg, ca: ca, jar: newJar(), conns: connSet{m: map[*tracked]struct{}{}}}
	if fi, err := os.Stat(cfg.File); err == nil {
		p.stamp = filestamp.Of(fi)
	}
	pol, err := readPolicy(cfg.File)
	if err != nil {
		return nil, err
	}
	p.policy.Store(pol)
	trusted, err := p.loadTrusted(pol.trustedCA)
	if err != nil {
		return nil, err
	}
	if cfg.CADir != "" {
		if err := writeCAFiles(cfg.CADir, ca.certPEM(), trusted); err != nil {
			return nil, err
		}
	}
	if cfg.LeakCAKey != nil {
		if err := cfg.LeakCAKey(ca.key); err != nil {
			return nil, err
		}
	}
	p.build()
	if p.ln, err = listen(cfg.Socket, p.tlsConfig(), &p.conns); err != nil {
		return nil, err
	}
	return p, nil
}

// loadTrusted reads the bundle upstreams are verified with; its pool is
// built when first needed, since parsing a system bundle takes longer
// than the rest of the start.
func (p *Proxy) loadTrusted(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("trusted CA bundle: %w", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("trusted CA bundle: %w", err)
	}
	if !bytes.Contains(data, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, fmt.Errorf("trusted CA bundle %s holds no certificate", path)
	}
	key := rootsKey{path, filestamp.Of(fi)}
	p.roots.Store(newRoots(key, data))
	p.tried = key
	return data, nil
}

func (p *Proxy) tlsConfig() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		NextProtos:         []string{"h2", "http/1.1"},
		GetConfigForClient: p.admit,
		GetCertificate:     p.certificate,
	}
}

// build makes the server and the reverse proxy with its transports.
func (p *Proxy) build() {
	upstream := func(protos []string) *http.Transport {
		return &http.Transport{
			DialTLSContext:      p.dialer(protos),
			MaxIdleConnsPerHost: maxIdlePerHost,
			IdleConnTimeout:     upstreamIdle,
			// The agent's Accept-Encoding goes as sent, the answer
			// comes back as encoded.
			DisableCompression: true,
			ReadBufferSize:     upstreamBufSize,
			WriteBufferSize:    upstreamBufSize,
		}
	}
	h2 := upstream([]string{"h2", "http/1.1"})
	h2.ForceAttemptHTTP2 = true
	// An upgrade (WebSocket) exists in HTTP/1.1 only: an empty, non-nil
	// TLSNextProto keeps this one from speaking HTTP/2.
	h1 := upstream([]string{"http/1.1"})
	h1.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	gate := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: dialTimeout}).DialContext,
		MaxIdleConnsPerHost: maxIdlePerHost,
		IdleConnTimeout:     upstreamIdle,
		DisableCompression:  true,
	}
	p.proxy = &httputil.ReverseProxy{
		Rewrite:   p.rewrite,
		Transport: &upstreams{h1: h1, h2: h2, gate: gate},
		// Server-sent events and other streams pass as they come.
		FlushInterval:  -1,
		BufferPool:     make(bufferPool, 64),
		ModifyResponse: p.remember,
		ErrorHandler:   p.upstreamFailed,
		ErrorLog:       p.cfg.Log,
	}
	p.srv = &http.Server{
		Handler:           http.HandlerFunc(p.serveHTTP),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		// A refused name fails its handshake, which is logged already.
		ErrorLog: log.New(quietWriter{p.cfg.Log}, "", 0),
	}
}

// Serve answers the agent's connections until ctx ends, following the
// config's changes meanwhile. An error means it stopped on its own.
func (p *Proxy) Serve(ctx context.Context) error {
	done := make(chan struct{})
	defer close(done)
	// Closed by the server too, but not when ctx ended before it ran.
	defer func() { _ = p.ln.Close() }()
	go p.follow(ctx, done)
	stop := context.AfterFunc(ctx, func() {
		_ = p.srv.Close()
		p.conns.closeIf(func(string) bool { return true })
	})
	defer stop()
	err := p.srv.Serve(p.ln)
	if ctx.Err() != nil || errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	_ = p.srv.Close()
	return err
}

// Warm makes what the first requests would otherwise wait for: the
// trusted bundle's pool and the exact hosts' certificates. routerd calls
// it once it said it is ready, off the start's critical path.
func (p *Proxy) Warm() {
	if _, err := p.roots.Load().get(); err != nil {
		p.cfg.Log.Printf("inspect: %v", err)
	}
	p.mint(p.policy.Load())
}

// warmLeaves bounds the certificates minted ahead of time. A leaf costs
// about 0.15 ms of CPU (a signature, and Go's check of it), made just as
// the agent starts, when two cores have other work: 256 of them put 40 ms
// onto a 5,000-entry session's start, and first use adds only those
// 0.15 ms to one handshake. So only a short list's names are minted ahead;
// past this many, names get theirs on first use.
const warmLeaves = 16

func (p *Proxy) mint(pol *policy) {
	n := 0
	for h := range pol.hosts {
		if n++; n > warmLeaves {
			return
		}
		if _, err := p.ca.leaf(h); err != nil {
			p.cfg.Log.Printf("inspect: %v", err)
		}
	}
}

// follow reloads the config when the launcher rewrites it, as apiGate
// does, and the trusted bundle when it changes.
func (p *Proxy) follow(ctx context.Context, done <-chan struct{}) {
	t := time.NewTicker(p.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case <-t.C:
		}
		p.poll()
	}
}

func (p *Proxy) poll() {
	if fi, err := os.Stat(p.cfg.File); err == nil && filestamp.Of(fi) != p.stamp {
		p.stamp = filestamp.Of(fi)
		if pol, err := readPolicy(p.cfg.File); err != nil {
			p.cfg.Log.Printf("inspect: keeps its config: %v", err)
		} else {
			p.apply(pol)
		}
	}
	p.refreshRoots()
}

// apply makes pol the config: new handshakes are admitted by it at once,
// and the open connections to names it no longer admits are closed, as
// nginx's are when an allowlist entry goes.
func (p *Proxy) apply(pol *policy) {
	p.policy.Store(pol)
	if n := p.conns.closeIf(func(name string) bool { return !pol.admits(name) }); n > 0 {
		p.cfg.Log.Printf("inspect: closed %d connection(s) to names no longer allowed", n)
	}
	p.mint(pol)
}

// refreshRoots reads the trusted bundle again when its path or the file
// changed; a bundle that yields no certificate leaves the old one.
func (p *Proxy) refreshRoots() {
	path := p.policy.Load().trustedCA
	fi, err := os.Stat(path)
	if err != nil {
		return
	}
	key := rootsKey{path, filestamp.Of(fi)}
	if key == p.tried {
		return
	}
	p.tried = key
	data, err := os.ReadFile(path)
	if err != nil {
		p.cfg.Log.Printf("inspect: keeps its trusted CA bundle: %v", err)
		return
	}
	r := newRoots(key, data)
	if _, err := r.get(); err != nil {
		p.cfg.Log.Printf("inspect: keeps its trusted CA bundle: %v", err)
		return
	}
	p.roots.Store(r)
}

// admit is the first look at a handshake: a name the config does not
// admit gets no certificate. It runs for resumed sessions too, which
// skip GetCertificate.
func (p *Proxy) admit(hello *tls.ClientHelloInfo) (*tls.Config, error) {
	name := normalName(hello.ServerName)
	// Named before the check, so that a reload that removes the name
	// either is seen here or sees the name (apply).
	if t, ok := hello.Conn.(*tracked); ok {
		t.name.Store(&name)
	}
	if !p.policy.Load().admits(name) {
		// Only a host name is printed: the launcher reads this log.
		sni := name
		if name != "" && !hostName(name) {
			sni = fmt.Sprintf("(not a host name, %d bytes)", len(hello.ServerName))
		}
		fmt.Fprintf(p.cfg.Out, "inspect refused sni=%q reason=%q\n", sni, errNotAdmitted.Error())
		return nil, errNotAdmitted
	}
	return nil, nil
}

func (p *Proxy) certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	name := normalName(hello.ServerName)
	if !p.policy.Load().admits(name) {
		return nil, errNotAdmitted
	}
	return p.ca.leaf(name)
}

// serveHTTP takes the credentials out of one request and passes it on.
func (p *Proxy) serveHTTP(w http.ResponseWriter, r *http.Request) {
	host := serverName(r)
	// The request goes to the name the handshake was admitted for, so
	// a Host naming another (domain fronting) is refused, not followed.
	if host == "" || !sameName(r.Host, host) && !p.cfg.AnyHost {
		fmt.Fprintf(p.cfg.Out, "inspect refused host=%q sni=%q reason=%q\n", r.Host, host, "host differs from the TLS name")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusMisdirectedRequest)
		_, _ = io.WriteString(w, "routerd: misdirected request: the Host header differs from the TLS server name\n")
		return
	}
	rec := &recorder{ResponseWriter: w}
	var removed []string
	defer func() { p.logRequest(host, r, rec.status, removed) }()
	if why := unreadable(r); why != "" {
		http.Error(rec, "routerd: the inspecting proxy passes no "+why, http.StatusBadRequest)
		return
	}
	if !p.cfg.KeepCredentials {
		removed = strip(r, host, p.jar, p.signed.has(host, r.URL.EscapedPath(), r.URL.RawQuery))
	}
	if !p.checkForge(rec, r, host) {
		return
	}
	if r.ProtoMajor == 1 {
		// An upstream may answer before the upload ends; by default the
		// server would read the rest of the body first.
		_ = http.NewResponseController(w).EnableFullDuplex()
	}
	p.proxy.ServeHTTP(rec, r)
}

// unreadable says why a request would carry more than the proxy reads,
// "" when it does not. CONNECT would make the host a proxy, and an opaque
// target could name another host in the request line. After an upgrade
// the bytes pass unread: a WebSocket's messages are the application's,
// but an h2c (or any other) upgrade would carry requests, credentials and
// all, past the strip.
func unreadable(r *http.Request) string {
	switch {
	case r.Method == http.MethodConnect:
		return "CONNECT"
	case r.URL.Opaque != "":
		return "opaque request target"
	case r.Header.Get("Upgrade") != "" && !strings.EqualFold(r.Header.Get("Upgrade"), "websocket"):
		return "upgrade but to WebSocket"
	}
	return ""
}

// logRequest writes the request's line: names only, never a value.
func (p *Proxy) logRequest(host string, r *http.Request, status int, removed []string) {
	rm := "-"
	if len(removed) > 0 {
		rm = strings.Join(removed, ",")
	}
	fmt.Fprintf(p.cfg.Out, "inspect host=%s method=%s path=%q proto=%s status=%d removed=%q\n",
		host, token(r.Method), r.URL.EscapedPath(), token(r.Proto), status, rm)
}

// rewrite sends the request to the name the handshake was for: to its
// API gate in plain HTTP when it has one, else to the host itself.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	host := serverName(pr.In)
	pr.Out.Host = host
	if gate, ok := p.policy.Load().gates[host]; ok {
		pr.Out.URL.Scheme, pr.Out.URL.Host = "http", gate
		return
	}
	pr.Out.URL.Scheme, pr.Out.URL.Host = "https", host
}

// remember lets the cookies a host sets come back to it: only those it
// sets in answer to a request that sends nothing (GET or HEAD without a
// body). A cookie set in answer to a POST is what a login with a password
// the agent brings would give it: a session in someone else's name.
func (p *Proxy) remember(resp *http.Response) error {
	p.signed.rememberRedirect(resp)
	sc := resp.Header["Set-Cookie"]
	if len(sc) == 0 {
		return nil
	}
	if req := resp.Request; (req.Method == http.MethodGet || req.Method == http.MethodHead) && req.ContentLength == 0 {
		p.jar.remember(req.Host, sc)
	}
	return nil
}

func (p *Proxy) upstreamFailed(w http.ResponseWriter, r *http.Request, err error) {
	host := serverName(r)
	if !errors.Is(err, context.Canceled) {
		p.cfg.Log.Printf("inspect %s: upstream: %v", host, err)
	}
	http.Error(w, "routerd: no answer from "+host+": "+err.Error(), http.StatusBadGateway)
}

// dialer connects to an upstream: its name resolved through routerd's
// filter only, its certificate verified against the trusted bundle.
func (p *Proxy) dialer(protos []string) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, _, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		pol := p.policy.Load()
		if !pol.admits(host) {
			return nil, fmt.Errorf("%s is %v", host, errNotAdmitted)
		}
		pool, err := p.roots.Load().get()
		if err != nil {
			return nil, err
		}
		raw, err := p.dialHost(ctx, pol.resolver, host)
		if err != nil {
			return nil, err
		}
		c := tls.Client(raw, &tls.Config{
			ServerName:         host,
			RootCAs:            pool,
			NextProtos:         protos,
			MinVersion:         tls.VersionTLS12,
			ClientSessionCache: sessionCache,
		})
		if err := c.HandshakeContext(ctx); err != nil {
			_ = raw.Close()
			return nil, err
		}
		return c, nil
	}
}

// sessionCache resumes upstream TLS sessions across connections.
var sessionCache = tls.NewLRUClientSessionCache(256)

func (p *Proxy) dialHost(ctx context.Context, resolver, host string) (net.Conn, error) {
	addrs, err := lookupA(ctx, resolver, host)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: dialTimeout}
	for _, a := range addrs {
		var c net.Conn
		c, err = d.DialContext(ctx, "tcp4", net.JoinHostPort(a.String(), strconv.Itoa(p.cfg.UpstreamPort)))
		if err == nil {
			return c, nil
		}
	}
	return nil, err
}

// upstreams picks the transport of a rewritten request.
type upstreams struct{ h1, h2, gate *http.Transport }

func (u *upstreams) RoundTrip(r *http.Request) (*http.Response, error) {
	switch {
	case r.URL.Scheme == "http":
		return u.gate.RoundTrip(r)
	// ReverseProxy keeps Upgrade only on a request whose Connection
	// asks for the upgrade.
	case r.Header.Get("Upgrade") != "":
		return u.h1.RoundTrip(r)
	// The agent's own protocol: HTTP/1.1 moved a download at about 1.35
	// times HTTP/2's speed through the proxy (no framing, no flow control,
	// no hand-off between the transport's reader and the copy), and an
	// agent that chose HTTP/2 may need it (gRPC).
	case r.ProtoMajor == 2:
		return u.h2.RoundTrip(r)
	default:
		return u.h1.RoundTrip(r)
	}
}

// serverName is the request's TLS name, as admitted.
func serverName(r *http.Request) string {
	if r.TLS == nil {
		return ""
	}
	return normalName(r.TLS.ServerName)
}

// sameName reports whether a Host header names the TLS name, the port
// being 443 if any.
func sameName(hostHeader, name string) bool {
	h := strings.TrimSuffix(hostHeader, ":443")
	return strings.EqualFold(strings.TrimSuffix(h, "."), name)
}

// token is s, or s quoted if it holds a space, a quote or a control
// byte, so that a log line stays one line of space-separated fields.
func token(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '"' {
			return strconv.Quote(s)
		}
	}
	return s
}

// recorder notes the status of the answer for the log line.
type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 && code >= 200 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Hijack is how ReverseProxy switches protocols: the 101 goes out on the
// hijacked connection, past WriteHeader.
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(r.ResponseWriter).Hijack()
	if err == nil {
		r.status = http.StatusSwitchingProtocols
	}
	return c, rw, err
}

// Unwrap lets http.ResponseController reach the server's writer (Flush).
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// bufferPool holds the buffers responses are copied through.
type bufferPool chan []byte

func (b bufferPool) Get() []byte {
	select {
	case buf := <-b:
		return buf
	default:
		return make([]byte, copyBufSize)
	}
}

func (b bufferPool) Put(buf []byte) {
	select {
	case b <- buf:
	default:
	}
}

// quietWriter passes the server's log on, but for failed handshakes: a
// refused name is logged when refused, and a probe that only connects is
// no news.
type quietWriter struct{ log *log.Logger }

func (q quietWriter) Write(b []byte) (int, error) {
	if !bytes.Contains(b, []byte("TLS handshake error")) {
		q.log.Print(string(b))
	}
	return len(b), nil
}
