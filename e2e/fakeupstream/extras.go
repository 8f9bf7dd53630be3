package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"
)

// The roles the security rows add: a UDP datagram logger (QUIC, UDP 53/443
// without DNS), plaintext HTTP, an HTTP CONNECT proxy and the sniffer.
// Each logs what it receives before it answers, as the other roles do.

func (r *running) startExtras(o options) error {
	for _, addr := range splitAddrs(o.udpAddr) {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return fmt.Errorf("udp: %w", err)
		}
		r.add(pc)
		r.udp = append(r.udp, pc)
		go serveUDP(r.log, pc)
	}
	for _, addr := range splitAddrs(o.httpAddr) {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("http: %w", err)
		}
		r.add(l)
		r.http = append(r.http, l)
		go serveStream(l, func(c net.Conn) { plainHTTP(r.log, c) })
	}
	for _, addr := range splitAddrs(o.proxyAddr) {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("proxy: %w", err)
		}
		r.add(l)
		r.proxy = append(r.proxy, l)
		go serveStream(l, func(c net.Conn) { connectProxy(r.log, c) })
	}
	if o.sniff {
		ignore, err := parsePrefixes(o.sniffIgnore)
		if err != nil {
			return err
		}
		sessions, err := parsePrefixes(o.sniffSessions)
		if err != nil {
			return err
		}
		s, err := startSniffer(r.log, ignore, sessions)
		if err != nil {
			return fmt.Errorf("sniff: %w", err)
		}
		r.add(s)
		r.sniffing = true
	}
	unreachable, err := parsePrefixes(o.unreachable)
	if err != nil {
		return err
	}
	for _, p := range unreachable {
		if err := addUnreachable(p); err != nil {
			return err
		}
		r.add(unreachableRoute(p))
		r.unreachable = append(r.unreachable, p)
	}
	return nil
}

// unreachableRoute removes its route when closed.
type unreachableRoute netip.Prefix

func (u unreachableRoute) Close() error { return delUnreachable(netip.Prefix(u)) }

func (r *running) extrasString() string {
	var b strings.Builder
	if len(r.udp) > 0 {
		var s []string
		for _, pc := range r.udp {
			s = append(s, pc.LocalAddr().String())
		}
		fmt.Fprintf(&b, " udp=%s", strings.Join(s, ","))
	}
	for _, kv := range []struct {
		k  string
		ls []net.Listener
	}{{"http", r.http}, {"proxy", r.proxy}} {
		if len(kv.ls) == 0 {
			continue
		}
		var s []string
		for _, l := range kv.ls {
			s = append(s, l.Addr().String())
		}
		fmt.Fprintf(&b, " %s=%s", kv.k, strings.Join(s, ","))
	}
	if r.sniffing {
		b.WriteString(" sniff=on")
	}
	if len(r.unreachable) > 0 {
		var s []string
		for _, p := range r.unreachable {
			s = append(s, p.String())
		}
		fmt.Fprintf(&b, " unreachable=%s", strings.Join(s, ","))
	}
	return b.String()
}

func parsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range splitAddrs(s) {
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("bad CIDR %q: want one such as 10.89.0.0/16", f)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func splitAddrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// serveUDP logs every datagram with the address it was sent to (a wildcard
// listener serves several) and echoes it, so a client can see it arrived.
func serveUDP(log *eventLog, pc net.PacketConn) {
	port := pc.LocalAddr().(*net.UDPAddr).Port
	buf := make([]byte, 65535)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		log.printf("udp datagram port=%d from=%s bytes=%d data=%q", port, from, n, buf[:min(n, 4096)])
		_, _ = pc.WriteTo(buf[:n], from)
	}
}

func serveStream(l net.Listener, handle func(net.Conn)) {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go handle(c)
	}
}

// plainHTTP logs the first chunk whatever it is (a request, TLS, junk) and
// answers like a web server.
func plainHTTP(log *eventLog, c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	n, _ := c.Read(buf)
	log.printf("http plaintext port=%d from=%s data=%q", localPort(c), c.RemoteAddr(), buf[:n])
	_, _ = io.WriteString(c, "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nhello from plain http\n")
}

// connectProxy logs the request head, then says yes and echoes the tunnel
// like the TCP echo ports: it never connects anywhere, so a test that
// reaches it cannot reach beyond it.
func connectProxy(log *eventLog, c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	var head []string
	for len(head) < 50 {
		line, err := br.ReadString('\n')
		if line != "" {
			head = append(head, strings.TrimRight(line, "\r\n"))
		}
		if err != nil || strings.TrimSpace(line) == "" {
			break
		}
	}
	log.printf("proxy request port=%d from=%s head=%q", localPort(c), c.RemoteAddr(), strings.Join(head, "\n"))
	if len(head) == 0 || !strings.HasPrefix(head[0], "CONNECT ") {
		_, _ = io.WriteString(c, "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
		return
	}
	_, _ = io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	buf := make([]byte, 4096)
	for {
		n, err := br.Read(buf)
		if n > 0 {
			log.printf("proxy tunnel port=%d from=%s data=%q", localPort(c), c.RemoteAddr(), buf[:n])
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func localPort(c net.Conn) int {
	if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}
