package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
)

// A published port's server is the agent's, and the user's browser is
// where its pages run: a web page the user has open elsewhere could read
// the agent's server (CORS), reach it under a name of its own (DNS
// rebinding), or hand it the cookies of the user's other local apps,
// which browsers do not keep apart by port. So the first request on each
// connection is screened: a browser must use the session's own name
// (NAME.localhost:PORT, whose cookies and storage are its own) and come
// from that origin; other clients (curl, scripts), which send no
// Sec-Fetch headers, may also use 127.0.0.1 or localhost, without cookies.
// A browser keeps one origin per connection, so the first request stands
// for the rest. Bytes that are not an HTTP request pass as they are: no
// browser sends them.

// maxRequestHead bounds the request head the screen reads.
const maxRequestHead = 32 << 10

// publishedHost is the authority a browser must use: NAME.localhost:PORT.
type publishedHost string

// screenPublished reads the first request head from client and returns
// what was read, to be passed on; ok is false when the request was
// refused (and answered) or the client went away.
func screenPublished(ctx context.Context, l *listener, client *net.TCPConn) (head []byte, ok bool) {
	stop := context.AfterFunc(ctx, func() { _ = client.Close() })
	defer stop()
	var buf []byte
	chunk := make([]byte, 4096)
	for {
		// No deadline: a browser may open a connection ahead of its
		// request, and whatever comes first on it is screened.
		n, err := client.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if !looksHTTP(buf) {
			return buf, true
		}
		if i := bytes.Index(buf, []byte("\r\n\r\n")); i >= 0 {
			out, why := screenRequest(buf[:i+4], l.publishedAs)
			if mutated("publish-screen-off") {
				out, why = buf[:i+4], ""
			}
			if why != "" {
				refuseRequest(client, why)
				return nil, false
			}
			return append(out, buf[i+4:]...), true
		}
		if len(buf) >= maxRequestHead {
			refuseRequest(client, "the request head is too large")
			return nil, false
		}
		if err != nil {
			// Gone before a whole head: nothing to pass on.
			_ = client.Close()
			return nil, false
		}
	}
}

// looksHTTP says whether b can still be the start of an HTTP/1 request:
// a method token and a space.
func looksHTTP(b []byte) bool {
	for i, c := range b {
		if i > 16 {
			return false
		}
		switch {
		case c == ' ':
			return i > 0
		case c >= 'A' && c <= 'Z':
		default:
			return false
		}
	}
	return true
}

// screenRequest checks a request head (ending in an empty line) and
// returns it as it is to be passed on, or why it is refused.
func screenRequest(head []byte, as publishedHost) (out []byte, why string) {
	lines := strings.Split(strings.TrimSuffix(string(head), "\r\n\r\n"), "\r\n")
	var host, origin string
	browser := false
	keep := []string{lines[0]}
	cookies := false
	hosts := 0
	for _, line := range lines[1:] {
		name, value, ok := strings.Cut(line, ":")
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			return nil, "the request has a malformed header line"
		}
		value = strings.TrimSpace(value)
		switch strings.ToLower(name) {
		case "host":
			host = strings.ToLower(value)
			hosts++
		case "origin":
			origin = strings.ToLower(value)
		case "sec-fetch-site", "sec-fetch-mode", "sec-fetch-dest":
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
		return nil, "the request must name one Host"
	case host == own:
		if origin != "" && origin != "http://"+own {
			return nil, "a page of another site (" + origin + ") may not use this server; open http://" + own + " itself"
		}
		return head, ""
	case host == "127.0.0.1:"+port || host == "localhost:"+port:
		if browser || origin != "" {
			return nil, "a browser must open this server as http://" + own + " (its cookies and storage are its own there)"
		}
		if !cookies {
			return head, ""
		}
		return []byte(strings.Join(keep, "\r\n") + "\r\n\r\n"), ""
	}
	return nil, fmt.Sprintf("the request names host %q; this server is http://%s", host, own)
}

// refuseRequest answers 403 with why and closes.
func refuseRequest(c *net.TCPConn, why string) {
	body := "agent-sandbox: refused: " + why + "\n"
	_, _ = fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	_ = c.Close()
}
