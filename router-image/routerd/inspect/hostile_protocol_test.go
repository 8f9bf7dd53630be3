package inspect

// The hostile review's probes of the proxy's protocol handling. Each test
// asserts the behaviour the boundary needs: a FAIL is a finding, a PASS a
// check found sound.

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestHostileLogInjectionThroughAuthority(t *testing.T) {
	u := startUpstream(t, echoHandler())
	e := startEnv(t, defaultConfig(u))
	// ASCII only: a name that is not IA5 gets no leaf, and :authority
	// takes no control byte, so no escape sequence gets this far.
	forged := `x credentials host=api.anthropic.com port=443 sni="exfil.example" upstream="-" .wild.test`
	ans, err := e.rawH2(t, forged, []h2Field{
		{":method", "GET"}, {":scheme", "https"}, {":authority", forged}, {":path", "/"},
	}, "")
	if err != nil {
		t.Logf("the forged name was refused: %v (sound)", err)
	} else {
		t.Logf("forged name: status %s", ans.status)
	}
	time.Sleep(200 * time.Millisecond)
	logs := e.out.String() + e.logs.String()
	// The launcher's own patterns (credentials.go, blocked.go), copied.
	proxyRequest := regexp.MustCompile(`\bcredentials host=(\S+) `)
	nginxDenied := regexp.MustCompile(`\bport=443 sni="([^"]*)" upstream="-"`)
	for _, line := range strings.Split(logs, "\n") {
		if m := proxyRequest.FindStringSubmatch(line); m != nil {
			t.Errorf("a router log line the launcher counts as a request with the user's key on %s: %q", m[1], line)
		}
		if m := nginxDenied.FindStringSubmatch(line); m != nil {
			t.Errorf("a router log line the launcher reads as a refused connection to %s: %q", m[1], line)
		}
	}
}

// Sound: a "host" field beside :authority goes nowhere (Go's transports
// send the request's Host alone), and h2 CONNECT is refused.
func TestHostileH2HostFieldAndConnect(t *testing.T) {
	u := startUpstream(t, echoHandler())
	e := startEnv(t, defaultConfig(u))
	ans, err := e.rawH2(t, "allowed.test", []h2Field{
		{":method", "GET"}, {":scheme", "https"}, {":authority", "allowed.test"}, {":path", "/x"},
		{"host", "evil.example"}, {"x-forwarded-host", "evil.example"}, {"forwarded", "host=evil.example"},
	}, "")
	if err != nil || ans.status != "200" {
		t.Fatalf("%v %+v", err, ans)
	}
	got := u.last(t)
	if got.Host != "allowed.test" || got.Header.Get("Host") != "" || got.Header.Get("X-Forwarded-Host") != "" || got.Header.Get("Forwarded") != "" {
		t.Errorf("upstream saw Host %q, headers %v", got.Host, got.Header)
	}
	// :authority absent, Host field the name: allowed (RFC 9113 8.3.1).
	ans, err = e.rawH2(t, "allowed.test", []h2Field{
		{":method", "GET"}, {":scheme", "https"}, {":path", "/y"}, {"host", "evil.example"},
	}, "")
	if err != nil || ans.status != "421" {
		t.Errorf("no :authority, host evil.example: %v %+v, want 421", err, ans)
	}
	// Credentials dressed as pseudo-headers, in upper case, with an
	// underscore, twice, or as a ":protocol" (extended CONNECT, off).
	for _, extra := range [][]h2Field{
		{{":authorization", "Bearer " + nonce(700)}},
		{{"Authorization", "Bearer " + nonce(701)}},
		{{"x_api_key", nonce(702)}},
		{{"authorization", "Bearer " + nonce(703)}, {"authorization", "Bearer " + nonce(704)}},
		{{":protocol", "websocket"}},
	} {
		before := u.hits.Load()
		fields := append([]h2Field{{":method", "GET"}, {":scheme", "https"}, {":authority", "allowed.test"}, {":path", "/p"}}, extra...)
		ans, err := e.rawH2(t, "allowed.test", fields, "")
		if u.hits.Load() != before {
			got := u.last(t)
			for i := 700; i <= 704; i++ {
				if strings.Contains(fmt.Sprint(got.Header), nonce(i)) {
					t.Errorf("%v: reached the upstream with its token: %v", extra, got.Header)
				}
			}
		}
		t.Logf("%v: %v %+v", extra, err, ans)
	}
	hits := u.hits.Load()
	ans, err = e.rawH2(t, "allowed.test", []h2Field{{":method", "CONNECT"}, {":authority", "allowed.test"}}, "")
	if err == nil && ans.status == "200" {
		t.Errorf("h2 CONNECT answered 200")
	}
	if u.hits.Load() != hits {
		t.Error("h2 CONNECT reached the upstream")
	}
}

// Sound: trailers (declared, undeclared, HTTP/1.1 chunked and HTTP/2) do
// not reach the upstream.
func TestHostileTrailers(t *testing.T) {
	got := make(chan http.Header, 4)
	u := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		got <- r.Trailer.Clone()
	}))
	e := startEnv(t, defaultConfig(u))
	for _, declare := range []string{"Trailer: Authorization, X-Api-Key\r\n", ""} {
		c, err := e.handshake("allowed.test", "http/1.1")
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprint(c, "POST /t HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\n"+declare+"\r\n"+
			"5\r\nhello\r\n0\r\nAuthorization: Bearer "+nonce(600)+"\r\nX-Api-Key: "+nonce(601)+"\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		_ = c.Close()
		select {
		case tr := <-got:
			if s := fmt.Sprint(tr); strings.Contains(s, nonce(600)) || strings.Contains(s, nonce(601)) {
				t.Errorf("declared=%v: trailers reached the upstream: %v", declare != "", tr)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no request upstream")
		}
	}
	// HTTP/2: trailers after the body.
	ans, err := e.rawH2(t, "allowed.test", []h2Field{
		{":method", "POST"}, {":scheme", "https"}, {":authority", "allowed.test"}, {":path", "/t2"}, {"trailer", "authorization"},
	}, "hello")
	_ = ans
	if err != nil {
		t.Fatal(err)
	}
	select {
	case tr := <-got:
		if tr.Get("Authorization") != "" {
			t.Errorf("h2 trailer reached the upstream: %v", tr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no request upstream")
	}
}
