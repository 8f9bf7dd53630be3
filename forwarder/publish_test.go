package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestScreenRequest(t *testing.T) {
	const as = publishedHost("proj.localhost:18000")
	for _, c := range []struct {
		name, head string
		want       string // "" passes as sent; "strip" passes without Cookie; else part of the refusal
	}{
		{"the session's name, from a browser, same origin", "GET / HTTP/1.1\r\nHost: proj.localhost:18000\r\nOrigin: http://proj.localhost:18000\r\nSec-Fetch-Site: same-origin\r\nCookie: a=b\r\n\r\n", ""},
		{"the session's name, navigated to", "GET / HTTP/1.1\r\nHost: Proj.Localhost:18000\r\nSec-Fetch-Site: none\r\nCookie: a=b\r\n\r\n", ""},
		{"curl on 127.0.0.1", "GET / HTTP/1.1\r\nHost: 127.0.0.1:18000\r\nUser-Agent: curl/8\r\n\r\n", ""},
		{"a script on localhost with cookies", "GET / HTTP/1.1\r\nHost: localhost:18000\r\nCookie: other-app=secret\r\nAccept: */*\r\n\r\n", "strip"},
		{"another site reads it (CORS)", "GET /secret HTTP/1.1\r\nHost: proj.localhost:18000\r\nOrigin: https://evil.example\r\nSec-Fetch-Site: cross-site\r\n\r\n", "a page of another site (https://evil.example)"},
		{"DNS rebinding", "GET / HTTP/1.1\r\nHost: rebind.evil.example:18000\r\n\r\n", `names host "rebind.evil.example:18000"`},
		{"a browser on 127.0.0.1", "GET / HTTP/1.1\r\nHost: 127.0.0.1:18000\r\nSec-Fetch-Mode: navigate\r\nCookie: jupyter=tok\r\n\r\n", "a browser must open this server as http://proj.localhost:18000"},
		{"another port", "GET / HTTP/1.1\r\nHost: localhost:8888\r\n\r\n", `names host "localhost:8888"`},
		{"no host", "GET / HTTP/1.0\r\n\r\n", "one Host"},
		{"an <img> or no-cors fetch of another site's page", "GET /warm HTTP/1.1\r\nHost: proj.localhost:18000\r\nSec-Fetch-Site: cross-site\r\nSec-Fetch-Mode: no-cors\r\n\r\n", "Sec-Fetch-Site: cross-site"},
		{"a sibling .localhost page", "GET / HTTP/1.1\r\nHost: proj.localhost:18000\r\nSec-Fetch-Site: same-site\r\n\r\n", "Sec-Fetch-Site: same-site"},
		{"a service worker", "GET /sw.js HTTP/1.1\r\nHost: proj.localhost:18000\r\nSec-Fetch-Site: same-origin\r\nSec-Fetch-Dest: serviceworker\r\n\r\n", "serviceworker would outlive"},
		{"two origins", "GET / HTTP/1.1\r\nHost: proj.localhost:18000\r\nOrigin: http://proj.localhost:18000\r\nOrigin: https://evil.example\r\n\r\n", "two Origins"},
		{"a header name with a space", "GET / HTTP/1.1\r\nHost: proj.localhost:18000\r\nX Y: z\r\n\r\n", "malformed"},
		{"two hosts", "GET / HTTP/1.1\r\nHost: proj.localhost:18000\r\nHost: evil.example\r\n\r\n", "one Host"},
		{"a malformed line", "GET / HTTP/1.1\r\nHost proj.localhost:18000\r\n\r\n", "malformed"},
	} {
		out, err := screenRequest([]byte(c.head), as)
		why := ""
		if err != nil {
			why = err.Error()
		}
		switch c.want {
		case "":
			if why != "" || string(out) != c.head {
				t.Errorf("%s: refused %q or changed:\n%q", c.name, why, out)
			}
		case "strip":
			if why != "" || strings.Contains(string(out), "Cookie") || !strings.Contains(string(out), "Accept: */*\r\n\r\n") {
				t.Errorf("%s: %q, %q; want it without its Cookie", c.name, out, why)
			}
		default:
			if !strings.Contains(why, c.want) {
				t.Errorf("%s: %q, want a refusal with %q", c.name, why, c.want)
			}
		}
	}
}

func TestStartsHTTP(t *testing.T) {
	for in, want := range map[string]bool{"GET /": true, "patch /": true, "VERSION-CONTROL /": true, "OPTIONS /": true, "\x16\x03\x01": false, " GET": false,
		strings.Repeat("A", 70): true} {
		got, err := startsHTTP(bufio.NewReader(strings.NewReader(in)))
		if got != want || (err != nil && want) {
			t.Errorf("startsHTTP(%q) = %v, %v", in, got, err)
		}
	}
}

func TestFraming(t *testing.T) {
	for head, want := range map[string]string{
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n\r\n":                         "12 false",
		"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n": "0 true",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n":                 "refused",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n":     "refused",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n":                         "refused",
	} {
		n, up, err := framing([]byte(head))
		got := fmt.Sprintf("%d %v", n, up)
		if err != nil {
			got = "refused"
		}
		if got != want {
			t.Errorf("framing(%q) = %s, want %s", head, got, want)
		}
	}
}

func TestEveryRequestOnAConnectionIsScreened(t *testing.T) {
	seen := make(chan string, 8)
	srv := startUpstream(t, func(c *net.TCPConn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			body, _ := io.ReadAll(req.Body)
			seen <- req.Method + " " + req.URL.Path + " " + string(body)
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	ls, err := listenAll([]forward{{listen: ap("127.0.0.1:0"), target: addrOf(srv), published: true, publishedAs: "proj.localhost:18000"}})
	if err != nil {
		t.Fatal(err)
	}
	serveInBackground(t, ls, nil, io.Discard)
	c := dial(t, ls[0].ln.Addr().String())
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	// The page's own requests, kept alive on one connection: a POST with
	// a body, then a GET.
	_, _ = c.Write([]byte("POST /a HTTP/1.1\r\nHost: proj.localhost:18000\r\nSec-Fetch-Site: same-origin\r\nContent-Length: 5\r\n\r\nhello"))
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first: %v %v", resp, err)
	} else {
		io.Copy(io.Discard, resp.Body)
	}
	_, _ = c.Write([]byte("GET /b HTTP/1.1\r\nHost: proj.localhost:18000\r\nSec-Fetch-Site: same-origin\r\n\r\n"))
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("second: %v %v", resp, err)
	} else {
		io.Copy(io.Discard, resp.Body)
	}
	// Another page's CORS read on the same connection: never arrives; the
	// connection is closed.
	_, _ = c.Write([]byte("GET /secret HTTP/1.1\r\nHost: proj.localhost:18000\r\nOrigin: http://evil.localhost:9\r\nSec-Fetch-Site: cross-site\r\n\r\n"))
	if rest, _ := io.ReadAll(br); len(rest) != 0 {
		t.Errorf("a refused later request got %q", rest)
	}
	for _, want := range []string{"POST /a hello", "GET /b "} {
		if got := <-seen; got != want {
			t.Errorf("server saw %q, want %q", got, want)
		}
	}
	select {
	case s := <-seen:
		t.Errorf("the refused request reached the server: %q", s)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestAPublishedPortRefusesAForeignPageAndPassesOtherBytes(t *testing.T) {
	seen := make(chan string, 4)
	srv := startUpstream(t, func(c *net.TCPConn) {
		b := make([]byte, 200)
		n, _ := c.Read(b)
		seen <- string(b[:n])
		_, _ = c.Write([]byte("served"))
	})
	ls, err := listenAll([]forward{{listen: ap("127.0.0.1:0"), target: addrOf(srv), published: true, publishedAs: "proj.localhost:18000"}})
	if err != nil {
		t.Fatal(err)
	}
	serveInBackground(t, ls, nil, io.Discard)
	ask := func(send string) string {
		c := dial(t, ls[0].ln.Addr().String())
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = c.Write([]byte(send))
		got, _ := io.ReadAll(c)
		return string(got)
	}
	if got := ask("GET /secret HTTP/1.1\r\nHost: proj.localhost:18000\r\nOrigin: https://evil.example\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 403 Forbidden") || !strings.Contains(got, "evil.example") {
		t.Errorf("a foreign page: %q", got)
	}
	select {
	case s := <-seen:
		t.Errorf("the refused request reached the server: %q", s)
	case <-time.After(100 * time.Millisecond):
	}
	// A client that speaks something else (a database's protocol) is no
	// browser: its bytes pass.
	if got := ask("\x00\x00\x00\x08\x04\xd2\x16\x2f"); got != "served" || <-seen != "\x00\x00\x00\x08\x04\xd2\x16\x2f" {
		t.Errorf("non-HTTP bytes: %q", got)
	}
}
