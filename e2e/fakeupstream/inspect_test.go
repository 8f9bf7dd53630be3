package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// h2Client speaks HTTP/2 only to the fake's TLS port, trusting the test CA.
func h2Client(f *fixture, sni string) *http.Client {
	addr := f.r.tls.Addr().String()
	var protos http.Protocols
	protos.SetHTTP2(true)
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			Protocols:       &protos,
			TLSClientConfig: &tls.Config{RootCAs: f.ca.Pool(), ServerName: sni},
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			},
		},
	}
}

// logLine is the first log line holding all of parts, or "".
func (f *fixture) logLine(parts ...string) string {
	for _, line := range strings.Split(f.log.String(), "\n") {
		if containsAll(line, parts) {
			return line
		}
	}
	return ""
}

// Every request logs all its headers, sorted, values included, with its
// protocol: HTTP/2 by ALPN, HTTP/1.1 as before.
func TestHeadersLineAndHTTP2(t *testing.T) {
	f := startFake(t)
	req, _ := http.NewRequest("GET", "https://allowed.test/h2-path?access_token=qtok-nonce-1", nil)
	req.Header.Set("X-Api-Key", "key-nonce-1")
	req.Header.Set("Authorization", "Bearer auth-nonce-1")
	req.Header.Set("Cookie", "sid=cookie-nonce-1")
	req.Header.Set("Private-Token", "pt-nonce-1")
	resp, err := h2Client(f, "allowed.test").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Proto != "HTTP/2.0" {
		t.Errorf("proto %s, want HTTP/2.0", resp.Proto)
	}
	if want := "hello from allowed.test\npath /h2-path?access_token=qtok-nonce-1\n"; string(body) != want {
		t.Errorf("body %q, want %q", body, want)
	}
	f.wantLog(t, "tls hello", `alpn=["h2"]`)
	f.wantLog(t, "https request method=GET", `host="allowed.test"`, `path="/h2-path?access_token=qtok-nonce-1"`)
	line := f.logLine("https headers method=GET", "proto=HTTP/2.0")
	want := `https headers method=GET host="allowed.test" proto=HTTP/2.0 path="/h2-path?access_token=qtok-nonce-1" headers="Accept-Encoding: gzip\nAuthorization: Bearer auth-nonce-1\nCookie: sid=cookie-nonce-1\nPrivate-Token: pt-nonce-1\nUser-Agent: Go-http-client/2.0\nX-Api-Key: key-nonce-1"`
	if !strings.HasSuffix(line, want) {
		t.Errorf("headers line:\n%s\nwant it to end with:\n%s", line, want)
	}

	// HTTP/1.1 clients keep working, and say so.
	if _, err := httpsGet(t, f, "a.wild.test", "/h1-nonce-2"); err != nil {
		t.Fatal(err)
	}
	f.wantLog(t, "https headers method=GET", `host="a.wild.test"`, "proto=HTTP/1.1", `path="/h1-nonce-2"`, `User-Agent: Go-http-client/1.1`)
}

// A client that offers neither h2 nor http/1.1 still completes the
// handshake, with no protocol, and speaks HTTP/1.1.
func TestUnknownALPNStillHandshakes(t *testing.T) {
	f := startFake(t)
	c, err := tls.Dial("tcp", f.r.tls.Addr().String(), &tls.Config{RootCAs: f.ca.Pool(), ServerName: "allowed.test", NextProtos: []string{"alpn-nonce-3"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if p := c.ConnectionState().NegotiatedProtocol; p != "" {
		t.Errorf("negotiated %q, want none", p)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	// An absolute-form target with userinfo: the headers line shows it.
	if _, err := io.WriteString(c, "GET https://user:ui-nonce-3@allowed.test/abs?x=1 HTTP/1.1\r\nHost: allowed.test\r\nX-Odd: a\r\nX-Odd: b\r\n"+
		"Authorization: Basic YWxhZGRpbjpiYXNpYy1ub25jZS0z\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	f.wantLog(t, "tls hello", `alpn=["alpn-nonce-3"]`)
	f.wantLog(t, "https headers method=GET", `host="allowed.test"`, "proto=HTTP/1.1",
		`path="https://user:ui-nonce-3@allowed.test/abs?x=1"`, `userinfo="user:ui-nonce-3" basic="aladdin:basic-nonce-3" headers="Authorization: Basic YWxhZGRpbjpiYXNpYy1ub25jZS0z\nConnection: close\nX-Odd: a\nX-Odd: b"`)
}

func TestHeadersLineIsBounded(t *testing.T) {
	f := startFake(t)
	req, _ := http.NewRequest("GET", "https://allowed.test/big", nil)
	req.Header.Set("A-First", "first-nonce-4")
	req.Header.Set("X-Big", strings.Repeat("b", 20000))
	resp, err := messagesClient(f, "allowed.test").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	line := f.logLine("https headers", `path="/big"`)
	if !strings.Contains(line, "A-First: first-nonce-4") || !strings.Contains(line, " more bytes]") || len(line) > headersLogMax+1024 {
		t.Errorf("headers line of %d bytes, want the first header and a cut: %.300s", len(line), line)
	}
}

func TestSetCookie(t *testing.T) {
	f := startFake(t)
	for _, c := range []*http.Client{messagesClient(f, "shop.test"), h2Client(f, "shop.test")} {
		resp, err := c.Get("https://shop.test/set-cookie?name=sid&value=host-nonce-5")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Values("Set-Cookie"); resp.StatusCode != 200 || len(got) != 1 || got[0] != "sid=host-nonce-5; Path=/; Secure; HttpOnly" {
			t.Errorf("%s: status %d, Set-Cookie %q", resp.Proto, resp.StatusCode, got)
		}
	}
	f.wantLog(t, `cookie set host="shop.test" name="sid"`)
	resp, err := messagesClient(f, "shop.test").Get("https://shop.test/set-cookie?name=b%20d&value=x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("a bad name: status %d, Set-Cookie %q", resp.StatusCode, resp.Header.Get("Set-Cookie"))
	}
}

// Writes on the plain paths read their whole body and answer ok; GET
// keeps its hello; the API paths keep theirs.
func TestWrites(t *testing.T) {
	f := startFake(t)
	for _, tc := range []struct {
		client       *http.Client
		method, path string
		size         int
	}{
		{messagesClient(f, "registry.test"), "PUT", "/pkg/left-pad?rev=1", 100000},
		{h2Client(f, "registry.test"), "PUT", "/pkg/h2", 3 << 20},
		{messagesClient(f, "registry.test"), "POST", "/api/v4/projects/1/issues", 17},
		{h2Client(f, "registry.test"), "PATCH", "/api/thing", 5},
		{messagesClient(f, "registry.test"), "DELETE", "/api/thing/2", 0},
	} {
		req, _ := http.NewRequest(tc.method, "https://registry.test"+tc.path, strings.NewReader(strings.Repeat("x", tc.size)))
		req.Header.Set("Job-Token", "job-nonce-6")
		resp, err := tc.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			OK     bool
			Method string
			Path   string
			Bytes  int
		}
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || !got.OK || got.Method != tc.method || got.Path != tc.path || got.Bytes != tc.size {
			t.Errorf("%s %s: status %d, %+v, %v", tc.method, tc.path, resp.StatusCode, got, err)
		}
		f.wantLog(t, "https write method="+tc.method, `host="registry.test"`, `path="`+tc.path+`"`, " bytes="+itoa(tc.size))
		f.wantLog(t, "https headers method="+tc.method, `path="`+tc.path+`"`, "Job-Token: job-nonce-6")
	}
	body, err := httpsGet(t, f, "registry.test", "/pkg/left-pad")
	if err != nil || body != "hello from registry.test\npath /pkg/left-pad\n" {
		t.Errorf("GET: %q, %v", body, err)
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// wsClient is a hand-written RFC 6455 client over HTTP/1.1.
type wsClient struct {
	c  net.Conn
	br *bufio.Reader
}

func dialWS(t *testing.T, f *fixture, sni, path string) *wsClient {
	t.Helper()
	c, err := tls.Dial("tcp", f.r.tls.Addr().String(), &tls.Config{RootCAs: f.ca.Pool(), ServerName: sni, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	key := "dGhlIHNhbXBsZSBub25jZQ=="
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: "+sni+"\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n"+
		"Sec-WebSocket-Key: "+key+"\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: chat, superchat\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	// RFC 6455 section 1.3's example key and accept.
	if resp.StatusCode != 101 || resp.Header.Get("Sec-WebSocket-Accept") != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" ||
		resp.Header.Get("Sec-WebSocket-Protocol") != "chat" || !strings.EqualFold(resp.Header.Get("Upgrade"), "websocket") {
		t.Fatalf("handshake answer %d %v", resp.StatusCode, resp.Header)
	}
	return &wsClient{c: c, br: br}
}

func (w *wsClient) send(t *testing.T, fin bool, op byte, payload []byte) {
	t.Helper()
	b0 := op
	if fin {
		b0 |= 0x80
	}
	h := []byte{b0}
	switch n := len(payload); {
	case n < 126:
		h = append(h, 0x80|byte(n))
	case n <= 0xffff:
		h = binary.BigEndian.AppendUint16(append(h, 0x80|126), uint16(n))
	default:
		h = binary.BigEndian.AppendUint64(append(h, 0x80|127), uint64(n))
	}
	mask := [4]byte{0x12, 0x34, 0x56, 0x78}
	h = append(h, mask[:]...)
	for i, b := range payload {
		h = append(h, b^mask[i%4])
	}
	if _, err := w.c.Write(h); err != nil {
		t.Fatal(err)
	}
}

func (w *wsClient) recv(t *testing.T) (byte, []byte) {
	t.Helper()
	var h [2]byte
	if _, err := io.ReadFull(w.br, h[:]); err != nil {
		t.Fatal(err)
	}
	if h[0]&0x80 == 0 || h[1]&0x80 != 0 {
		t.Fatalf("server frame header %x: want FIN and no mask", h)
	}
	n := int(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		_, _ = io.ReadFull(w.br, b[:])
		n = int(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		_, _ = io.ReadFull(w.br, b[:])
		n = int(binary.BigEndian.Uint64(b[:]))
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(w.br, p); err != nil {
		t.Fatal(err)
	}
	return h[0] & 0x0f, p
}

func TestWebSocketEcho(t *testing.T) {
	f := startFake(t)
	ws := dialWS(t, f, "chat.test", "/ws?room=q-nonce-7")
	f.wantLog(t, `websocket open host="chat.test" path="/ws?room=q-nonce-7"`)
	f.wantLog(t, "https headers method=GET", `host="chat.test"`, "Sec-Websocket-Key: dGhlIHNhbXBsZSBub25jZQ==")

	ws.send(t, true, wsText, []byte("text-nonce-7"))
	if op, p := ws.recv(t); op != wsText || string(p) != "text-nonce-7" {
		t.Errorf("text echo: op %d %q", op, p)
	}
	f.wantLog(t, `websocket message host="chat.test" data="text-nonce-7"`)
	big := []byte(strings.Repeat("\x00\xff", 40000))
	ws.send(t, true, wsBinary, big)
	if op, p := ws.recv(t); op != wsBinary || string(p) != string(big) {
		t.Errorf("binary echo: op %d, %d bytes", op, len(p))
	}
	// A fragmented message, a ping between its fragments.
	ws.send(t, false, wsText, []byte("frag-"))
	ws.send(t, true, wsPing, []byte("ping-8"))
	if op, p := ws.recv(t); op != wsPong || string(p) != "ping-8" {
		t.Errorf("pong: op %d %q", op, p)
	}
	ws.send(t, true, wsContinuation, []byte("nonce-8"))
	if op, p := ws.recv(t); op != wsText || string(p) != "frag-nonce-8" {
		t.Errorf("fragmented echo: op %d %q", op, p)
	}
	f.wantLog(t, `websocket message host="chat.test" data="frag-nonce-8"`)
	ws.send(t, true, wsClose, []byte{0x03, 0xe8, 'b', 'y', 'e'})
	if op, p := ws.recv(t); op != wsClose || string(p) != "\x03\xe8" {
		t.Errorf("close: op %d %q", op, p)
	}
	if _, err := ws.br.ReadByte(); err != io.EOF {
		t.Errorf("after the close: %v, want EOF", err)
	}
	waitLog(t, f, `websocket close host="chat.test" code=1000`)
}

func TestWebSocketRefusals(t *testing.T) {
	f := startFake(t)
	// An unmasked client frame closes with 1002.
	ws := dialWS(t, f, "chat.test", "/ws")
	if _, err := ws.c.Write([]byte{0x81, 0x02, 'h', 'i'}); err != nil {
		t.Fatal(err)
	}
	if op, p := ws.recv(t); op != wsClose || string(p) != "\x03\xea" {
		t.Errorf("unmasked: op %d %q, want close 1002", op, p)
	}
	waitLog(t, f, `websocket close host="chat.test" code=1002 err="client frame not masked"`)
	// A plain GET, or one over HTTP/2, gets 426.
	for _, c := range []*http.Client{messagesClient(f, "chat.test"), h2Client(f, "chat.test")} {
		resp, err := c.Get("https://chat.test/ws")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUpgradeRequired {
			t.Errorf("%s GET /ws: %d, want 426", resp.Proto, resp.StatusCode)
		}
	}
	f.wantLog(t, `websocket refused host="chat.test" path="/ws" proto=HTTP/2.0`)
}
