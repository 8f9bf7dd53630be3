package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A published port's server is the agent's, and the user's browser is
// where its pages run: a page of another site the user has open could
// read the agent's server (CORS, or a no-cors request that warms a
// connection the page then reuses), load it as a script or a frame, reach
// it under a name of its own (DNS rebinding), register a service worker
// that outlives the session, or have the browser hand it the cookies of
// the user's other local apps, which browsers do not keep apart by port.
// So every request a client sends is screened before the server sees it:
// a browser (which sends Sec-Fetch headers) must use the session's own
// name (NAME.localhost:PORT, whose cookies and storage are its own), from
// that origin or typed in; other clients (curl, scripts) may also use
// 127.0.0.1 or localhost, without cookies. A connection whose first bytes
// are not an HTTP request passes as it is: no browser sends them.

// maxRequestHead bounds a request head.
const maxRequestHead = 32 << 10

// headTimeout bounds how long a request head may take once it began: a
// client may hold a connection idle, not a half-sent head.
const headTimeout = 10 * time.Second

// publishedHost is the authority a browser must use: NAME.localhost:PORT.
type publishedHost string

// errRefused carries why a request was refused.
type errRefused string

func (e errRefused) Error() string { return string(e) }

// relayPublished relays a client of a published pair: the server's side
// is spliced as any pair's; the client's is screened request by request.
func relayPublished(l *listener, client *net.TCPConn) {
	ctx := l.ctx
	stop := context.AfterFunc(ctx, func() { _ = client.Close() })
	defer stop()
	br := bufio.NewReaderSize(client, maxRequestHead)
	isHTTP, err := startsHTTP(br)
	if err != nil && br.Buffered() == 0 {
		_ = client.Close()
		return
	}
	var first []byte
	if isHTTP {
		head, err := readHead(br, client)
		if err == nil {
			first, err = screenRequest(head, l.publishedAs)
		}
		if err != nil {
			var why errRefused
			if errors.As(err, &why) {
				refuseRequest(client, string(why))
			} else {
				_ = client.Close()
			}
			return
		}
	}
	upstream, err := dialPublished(ctx, l)
	if err != nil {
		reset(client)
		return
	}
	closeBoth := func() {
		_ = client.Close()
		_ = upstream.Close()
	}
	defer context.AfterFunc(ctx, closeBoth)()
	var wg sync.WaitGroup
	wg.Go(func() { pipe(client, upstream, closeBoth) })
	wg.Go(func() {
		var err error
		if isHTTP {
			err = passRequests(br, client, upstream, first, l.publishedAs)
		} else {
			err = passRaw(br, client, upstream)
		}
		if err != nil {
			closeBoth()
			return
		}
		_ = upstream.CloseWrite()
	})
	wg.Wait()
	closeBoth()
}

// dialPublished connects to the server inside: on loopback, or on the
// pod's own address if nothing listens on loopback.
func dialPublished(ctx context.Context, l *listener) (relayConn, error) {
	d := net.Dialer{Timeout: dialTimeout, KeepAlive: -1}
	c, err := d.DialContext(ctx, "tcp", l.target.String())
	if err != nil && errors.Is(err, syscall.ECONNREFUSED) {
		c, err = d.DialContext(ctx, "tcp", netip.AddrPortFrom(l.listen.Addr(), l.target.Port()).String())
	}
	if err != nil {
		return nil, err
	}
	return c.(relayConn), nil
}

// passRaw passes what is buffered, then splices the rest.
func passRaw(br *bufio.Reader, client *net.TCPConn, upstream relayConn) error {
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		if _, err := upstream.Write(b); err != nil {
			return err
		}
	}
	return relayCopy(upstream, client)
}

// passRequests passes first, then each request after it, screened, with
// its body; after an upgrade (a WebSocket) the rest passes as it is. A
// request refused after the first closes the connection: a response may
// be on its way, so no answer of ours can be put in.
func passRequests(br *bufio.Reader, client *net.TCPConn, upstream relayConn, first []byte, as publishedHost) error {
	head := first
	for {
		body, upgrade, err := framing(head)
		if err != nil {
			return err
		}
		if _, err := upstream.Write(head); err != nil {
			return err
		}
		if _, err := io.CopyN(upstream, br, body); err != nil {
			return err
		}
		if upgrade {
			return passRaw(br, client, upstream)
		}
		// The next request, when the client sends one.
		if _, err := br.Peek(1); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		raw, err := readHead(br, client)
		if err != nil {
			return err
		}
		if head, err = screenRequest(raw, as); err != nil {
			return err
		}
	}
}

// tchar is RFC 9110's token character: a method's.
func tchar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// startsHTTP reads as far as it takes to tell whether the client's first
// bytes are a request line (a method token and a space). A token with no
// space for 64 bytes counts as HTTP: its head then fails and is refused.
func startsHTTP(br *bufio.Reader) (bool, error) {
	for n := 1; n <= 64; n++ {
		b, err := br.Peek(n)
		if err != nil {
			return false, err
		}
		c := b[n-1]
		if c == ' ' {
			return n > 1, nil
		}
		if !tchar(c) {
			return false, nil
		}
	}
	return true, nil
}

// readHead reads a request head up to its empty line. Each line must end
// in CRLF; the whole at most maxRequestHead, and within headTimeout once
// its first byte came.
func readHead(br *bufio.Reader, client *net.TCPConn) ([]byte, error) {
	_ = client.SetReadDeadline(time.Now().Add(headTimeout))
	defer func() { _ = client.SetReadDeadline(time.Time{}) }()
	var head []byte
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) || len(head)+len(line) > maxRequestHead {
			return nil, errRefused("the request head is too large")
		}
		if err != nil {
			return nil, err
		}
		if !bytes.HasSuffix(line, []byte("\r\n")) || bytes.IndexByte(line[:len(line)-2], '\r') >= 0 {
			return nil, errRefused("the request has a line not ended by CRLF")
		}
		head = append(head, line...)
		if len(line) == 2 {
			return head, nil
		}
	}
}

// framing is what follows a screened head: the body's length, and whether
// the rest of the connection is another protocol's.
func framing(head []byte) (body int64, upgrade bool, err error) {
	for _, line := range strings.Split(string(head), "\r\n")[1:] {
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimSpace(value)
		switch strings.ToLower(name) {
		case "content-length":
			n, perr := strconv.ParseInt(value, 10, 64)
			if perr != nil || n < 0 || (body != 0 && body != n) {
				return 0, false, errRefused("the request has a bad Content-Length")
			}
			body = n
		case "transfer-encoding":
			// A browser sends none on HTTP/1.1; a body whose end the
			// screen cannot find is not passed.
			return 0, false, errRefused("the request has a Transfer-Encoding")
		case "upgrade":
			upgrade = true
		}
	}
	return body, upgrade, nil
}

// screenRequest checks a request head (ending in an empty line) and
// returns it as it is to be passed on, or why it is refused.
func screenRequest(head []byte, as publishedHost) ([]byte, error) {
	if mutated("publish-screen-off") {
		return head, nil
	}
	lines := strings.Split(strings.TrimSuffix(string(head), "\r\n\r\n"), "\r\n")
	var host, origin, site, dest string
	browser := false
	keep := []string{lines[0]}
	cookies := false
	hosts := 0
	for _, line := range lines[1:] {
		name, value, ok := strings.Cut(line, ":")
		if !ok || name == "" || strings.IndexFunc(name, func(r rune) bool { return r > 0x7f || !tchar(byte(r)) }) >= 0 {
			return nil, errRefused("the request has a malformed header line")
		}
		value = strings.TrimSpace(value)
		switch strings.ToLower(name) {
		case "host":
			host = strings.ToLower(value)
			hosts++
		case "origin":
			if origin != "" {
				return nil, errRefused("the request has two Origins")
			}
			origin = strings.ToLower(value)
		case "sec-fetch-site":
			browser, site = true, strings.ToLower(value)
		case "sec-fetch-dest":
			browser, dest = true, strings.ToLower(value)
		case "sec-fetch-mode", "sec-fetch-user":
			browser = true
		case "cookie":
			cookies = true
			// Kept only for the session's own name (below).
			continue
		}
		keep = append(keep, line)
	}
	own := strings.ToLower(string(as))
	_, port, _ := strings.Cut(own, ":")
	switch {
	case hosts != 1:
		return nil, errRefused("the request must name one Host")
	case host == own:
		if origin != "" && origin != "http://"+own {
			return nil, errRefused("a page of another site (" + origin + ") may not use this server; open http://" + own + " itself")
		}
		// A request another site's page started (an <img>, a <script>,
		// an <iframe>, a no-cors fetch) carries no Origin, but says so.
		if site != "" && site != "same-origin" && site != "none" {
			return nil, errRefused("a page of another site may not use this server (Sec-Fetch-Site: " + site + "); open http://" + own + " itself")
		}
		if dest == "serviceworker" || dest == "sharedworker" {
			return nil, errRefused("a " + dest + " would outlive the session")
		}
		return head, nil
	case host == "127.0.0.1:"+port || host == "localhost:"+port:
		if browser || origin != "" {
			return nil, errRefused("a browser must open this server as http://" + own + " (its cookies and storage are its own there)")
		}
		if !cookies {
			return head, nil
		}
		return []byte(strings.Join(keep, "\r\n") + "\r\n\r\n"), nil
	}
	return nil, errRefused(fmt.Sprintf("the request names host %q; this server is http://%s", host, own))
}

// refuseRequest answers 403 with why and closes, after reading what the
// client still sends for a moment, so that a reset does not swallow the
// answer.
func refuseRequest(c *net.TCPConn, why string) {
	body := "agent-sandbox: refused: " + why + "\n"
	_, _ = fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	_ = c.CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	_, _ = io.Copy(io.Discard, io.LimitReader(c, 1<<20))
	_ = c.Close()
}
