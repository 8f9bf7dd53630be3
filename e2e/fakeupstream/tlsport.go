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
// fails), every HTTPS request, and anything plaintext sent to its port.
type tlsServer struct {
	log    *eventLog
	static *tls.Certificate
	leaf   *x509.Certificate
	ca     *testpki.CA
	git    *gitServer // nil: no git hosts

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
	srv := &http.Server{Handler: http.HandlerFunc(s.handle), ReadHeaderTimeout: 10 * time.Second}
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
	if s.git.serves(host) {
		s.git.ServeHTTP(w, r)
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
