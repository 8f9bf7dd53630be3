package main

import (
	"io"
	"net"
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
		{"two hosts", "GET / HTTP/1.1\r\nHost: proj.localhost:18000\r\nHost: evil.example\r\n\r\n", "one Host"},
		{"a malformed line", "GET / HTTP/1.1\r\nHost proj.localhost:18000\r\n\r\n", "malformed"},
	} {
		out, why := screenRequest([]byte(c.head), as)
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

func TestLooksHTTP(t *testing.T) {
	for in, want := range map[string]bool{"": true, "GE": true, "GET ": true, "OPTIONS /": true, "\x16\x03\x01": false, "get /": false, " GET": false, "SSH-2.0": false} {
		if looksHTTP([]byte(in)) != want {
			t.Errorf("looksHTTP(%q) = %v", in, !want)
		}
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
