package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/testpki"
)

// tlsServer logs the SNI of every ClientHello (even when the handshake then
// fails), every HTTPS request with all its headers, and anything plaintext
// sent to its port. It speaks HTTP/1.1 and HTTP/2 (ALPN); besides the git,
// forge and model API routes it serves a WebSocket echo (/ws), a cookie setter
// (/set-cookie) and answers writes (PUT, POST, PATCH, DELETE) with
// {"ok":true}; any other request gets "hello from NAME".
type tlsServer struct {
	log    *eventLog
	static *tls.Certificate
	leaf   *x509.Certificate
	ca     *testpki.CA
	git    *gitServer   // nil: no git hosts
	forge  *forgeServer // nil: no forge flags

	// alpn is the handshake's config for a client that offers h2 or
	// http/1.1: both are negotiated; a client that offers neither (or no
	// ALPN) gets none, as before, rather than a no_application_protocol.
	alpn *tls.Config

	mu     sync.Mutex
	minted map[string]*tls.Certificate
	conns  chan net.Conn
	done   chan struct{}
}

func newTLSServer(log *eventLog, static *tls.Certificate, ca *testpki.CA) (*tlsServer, error) {
	if static == nil && ca == nil {
		return nil, errors.New("tls needs -cert/-key or -ca-cert/-ca-key; or turn it off with -tls-addr ''")
	}
	s := &tlsServer{log: log, static: static, ca: ca, minted: map[string]*tls.Certificate{}, conns: make(chan net.Conn), done: make(chan struct{})}
	s.alpn = &tls.Config{GetCertificate: s.certificate, NextProtos: []string{"h2", "http/1.1"}}
	if static != nil {
		leaf, err := x509.ParseCertificate(static.Certificate[0])
		if err != nil {
			return nil, err
		}
		s.leaf = leaf
	}
	return s, nil
}

func (s *tlsServer) serve(l net.Listener) {
	// HTTP/1.1 and HTTP/2 by ALPN: the connections are *tls.Conn, so
	// Serve hands those that negotiated h2 to its HTTP/2 server.
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetHTTP2(true)
	srv := &http.Server{Handler: http.HandlerFunc(s.handle), ReadHeaderTimeout: 10 * time.Second, Protocols: &protos}
	go func() { _ = srv.Serve(chanListener{l, s.conns, s.done}) }()
	defer close(s.done)
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go s.sort(c)
	}
}

// sort tells TLS from plaintext by the first byte: 0x16 starts a handshake record.
func (s *tlsServer) sort(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReaderSize(c, 4096)
	first, err := br.Peek(1)
	if err != nil {
		s.log.printf("tls connect-no-data from=%s", c.RemoteAddr())
		c.Close()
		return
	}
	rc := &recordingConn{Conn: c, r: br}
	if first[0] != 0x16 {
		s.plaintext(rc)
		return
	}
	tc := tls.Server(rc, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			s.log.printf("tls hello sni=%q alpn=%q from=%s", h.ServerName, h.SupportedProtos, c.RemoteAddr())
			for _, p := range h.SupportedProtos {
				if p == "h2" || p == "http/1.1" {
					return s.alpn, nil
				}
			}
			return nil, nil
		},
		GetCertificate: s.certificate,
	})
	if err := tc.Handshake(); err != nil {
		s.log.printf("tls handshake-error sni=%q from=%s err=%q raw=%q", tc.ConnectionState().ServerName, c.RemoteAddr(), err.Error(), rc.recorded())
		tc.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	select {
	case s.conns <- tc:
	case <-s.done:
		tc.Close()
	}
}

func (s *tlsServer) plaintext(c *recordingConn) {
	buf := make([]byte, 4096)
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, _ := c.Read(buf)
	s.log.printf("tls plaintext from=%s data=%q", c.RemoteAddr(), buf[:n])
	c.Close()
}

func (s *tlsServer) handle(w http.ResponseWriter, r *http.Request) {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	sni := ""
	if r.TLS != nil {
		sni = r.TLS.ServerName
	}
	if host == "" {
		host = sni
	}
	s.log.printf("https request method=%s host=%q sni=%q path=%q from=%s", r.Method, r.Host, sni, r.URL.RequestURI(), r.RemoteAddr)
	s.logHeaders(r)
	if s.git.serves(host) {
		s.git.ServeHTTP(w, r)
		return
	}
	if s.forge.serves(host) {
		s.forge.ServeHTTP(w, r)
		return
	}
	s.logCredentials(r)
	switch {
	case isMessagesPath(r.URL.Path):
		s.messages(w, r)
		return
	case isResponsesPath(r.URL.Path):
		s.responses(w, r)
		return
	case isGeminiPath(r.URL.Path):
		s.gemini(w, r)
		return
	case r.URL.Path == wsPath:
		s.websocket(w, r)
		return
	case r.URL.Path == setCookiePath:
		s.setCookie(w, r)
		return
	case isWriteMethod(r.Method):
		s.write(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintf(w, "hello from %s\npath %s\n", host, r.URL.RequestURI())
}

// certificate serves the suite's static cert when it covers the name, and
// otherwise mints one for any *.test name so new rows need no new files.
func (s *tlsServer) certificate(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
	name := canonical(h.ServerName)
	if s.leaf != nil && (name == "" || s.leaf.VerifyHostname(name) == nil) {
		return s.static, nil
	}
	if s.ca == nil || !strings.HasSuffix(name, ".test") {
		if s.static != nil {
			return s.static, nil
		}
		return nil, fmt.Errorf("no certificate for %q", name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.minted[name]; ok {
		return c, nil
	}
	c, err := s.ca.IssueTLS([]string{name}, nil)
	if err != nil {
		return nil, err
	}
	s.minted[name] = &c
	return &c, nil
}

// recordingConn keeps the first bytes a client sent so a failed handshake can
// still be searched for a nonce.
type recordingConn struct {
	net.Conn
	r   *bufio.Reader
	mu  sync.Mutex
	rec []byte
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.mu.Lock()
	if room := 4096 - len(c.rec); room > 0 {
		c.rec = append(c.rec, p[:min(n, room)]...)
	}
	c.mu.Unlock()
	return n, err
}

func (c *recordingConn) recorded() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte(nil), c.rec...)
}

// chanListener hands already-handshaken connections to http.Server.
type chanListener struct {
	net.Listener
	conns chan net.Conn
	done  chan struct{}
}

func (l chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}
