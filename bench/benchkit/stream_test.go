package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDeltaEvent(t *testing.T) {
	for _, size := range []int{1024, 200, 4096} {
		if got := len(deltaEvent(size)); got != size {
			t.Errorf("deltaEvent(%d) is %d bytes", size, got)
		}
	}
	// Smaller than the event's frame: the smallest event, one letter.
	if e := deltaEvent(10); !bytes.Contains(e, []byte(`"text":"a"`)) {
		t.Errorf("deltaEvent(10) = %q", e)
	}
	d, n := streamBody(1<<20, 1024)
	total := int64(len(streamHead)) + n*int64(len(d)) + int64(len(streamTail))
	if total < 1<<20 || total >= 1<<20+1024 {
		t.Errorf("a 1 MiB answer is %d bytes", total)
	}
	if _, n := streamBody(0, 1024); n != 1 {
		t.Errorf("an empty answer has %d deltas, want 1", n)
	}
}

// TestStream serves the streamed answer over TLS on loopback, as the
// upstream does, and reads it as curl would: the head arrives before the
// rest is written, the size is what was asked, and the key is checked.
func TestStream(t *testing.T) {
	dir := t.TempDir()
	if err := runPKI([]string{"-dir", dir, "-names", "blob.test,*.bench.test"}); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key"))
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	check := &streamCheck{apiHost: "api.bench.test", apiKey: "sk-real", log: &log}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := blobServer(pair, check)
	go func() { _ = srv.ServeTLS(hl, "", "") }()
	defer srv.Close()
	caPEM, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", hl.Addr().String())
		},
	}}
	post := func(host string, headers map[string]string, query string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "https://"+host+"/v1/messages?"+query, strings.NewReader(`{"stream":true}`))
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	resp := post("api.bench.test", map[string]string{"X-Api-Key": "sk-real"}, "bytes=3000000&event=1024")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %s, type %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	r := bufio.NewReader(resp.Body)
	first, _ := r.ReadString('\n')
	if first != "event: message_start\n" {
		t.Errorf("first line %q", first)
	}
	rest, err := io.ReadAll(r)
	resp.Body.Close()
	if n := len(first) + len(rest); err != nil || n < 3000000 || n >= 3000000+1024 {
		t.Errorf("read %d bytes (%v), want 3000000 and less than an event more", n, err)
	}
	if !bytes.HasSuffix(rest, streamTail) || bytes.Count(rest, []byte("event: content_block_delta\n")) < 2900 {
		t.Errorf("the answer does not end with message_stop or has too few deltas")
	}

	for _, c := range []struct {
		host    string
		headers map[string]string
		status  int
		logged  string
	}{
		{"blob.test", nil, 200, "host=blob.test key=none"},
		{"api.bench.test", map[string]string{"X-Api-Key": "sk-placeholder"}, 401, "key=wrong"},
		{"api.bench.test", nil, 401, "key=missing"},
		{"api.bench.test", map[string]string{"X-Api-Key": "sk-real", "Authorization": "Bearer sk-placeholder"}, 401, "key=agent-authorization-passed"},
		{"blob.test", map[string]string{"Authorization": "Bearer x"}, 401, "key=unexpected-credential"},
	} {
		resp := post(c.host, c.headers, "bytes=100&event=64")
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s %v: status %d, want %d", c.host, c.headers, resp.StatusCode, c.status)
		}
		if !strings.Contains(log.String(), c.logged) {
			t.Errorf("no %q in the log:\n%s", c.logged, log.String())
		}
	}
	if !strings.Contains(log.String(), "benchkit: stream host=api.bench.test key=ok bytes=3000000 event=1024 conn_req=1 setup_ms=") {
		t.Errorf("the good request is not logged:\n%s", log.String())
	}
	// The client kept its connection: later requests are not its first.
	if !strings.Contains(log.String(), "key=wrong bytes=100 event=64 conn_req=2 resumed=false\n") {
		t.Errorf("a request on a kept-alive connection is not logged as such:\n%s", log.String())
	}
	resp = post("blob.test", nil, "bytes=-1&event=64")
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("a bad size: status %d, want 400", resp.StatusCode)
	}
}

func TestStreamReport(t *testing.T) {
	s, err := readSamples(strings.NewReader(`
stream_mib 64
stream_event_bytes 1024
stream_warm_kib 64
stream_proxy_ttfb_s 0.0050
stream_direct_ttfb_s 0.0060
stream_direct_ttfb_s 0.0040
stream_proxy_ttfb_s 0.0048
stream_proxy_warm_ttfb_s 0.0030
stream_direct_warm_ttfb_s 0.0010
stream_proxy_warm_ttfb_s 0.0032
stream_direct_warm_ttfb_s 0.0010
stream_proxy_mibps 150
stream_direct_mibps 200
stream_proxy_mibps 160
stream_direct_mibps 200
stream_proxy_dns_s 0
stream_direct_dns_s 0.0004
stream_proxy_wait_s 0.0045
stream_direct_wait_s 0.0010
stream_upstream_api_ok 6
stream_upstream_api_bad 0
stream_upstream_direct_none 6
stream_upstream_direct_bad 0
stream_upstream_api_setup_ms 1.5
stream_upstream_api_setup_ms 2.5
stream_upstream_api_conns 6
stream_upstream_api_resumed 0
stream_upstream_direct_conns 1
stream_upstream_direct_resumed 0
load_stream 1.5
load_stream 2.5
`))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	groups := []string{"Stream"}
	// First byte 4.9 ms against 5.0 ms meets ≤ 1.2 ×; kept alive 3.1 ms
	// against 1.0 ms misses; throughput has no target.
	if missed, n := table(s, groups, &out), countTargets(groups); missed != 1 || n != 2 {
		t.Errorf("missed %d of %d, want 1 of 2\n%s", missed, n, out.String())
	}
	for _, want := range []string{
		"| Stream | first byte of a 64 MiB SSE answer, new connection, through the credential proxy | 4.90 ms (4.80–5.00, n=2) | direct: 5.00 ms (4.00–6.00, n=2) | 0.98 | ≤ 1.2 × direct | yes |",
		"| 3.10 | ≤ 1.2 × direct | **no** |",
		"(64 KiB) on the kept-alive",
		"| throughput of the 64 MiB SSE answer (1024-byte events, each flushed), through the credential proxy | 155.0 MiB/s (150.0–160.0, n=2) | direct: 200.0 MiB/s (200.0–200.0, n=2) | 0.78 |  | no target |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in:\n%s", want, out.String())
		}
	}
	out.Reset()
	streamDetails(s, &out)
	for _, want := range []string{
		"| first byte, new connection | 0.83, 1.20 |",
		"| throughput | 0.75, 0.80 |",
		"| DNS lookup (curl; none for 127.0.0.1) | 0.00 ms | 0.40 ms | -0.40 ms |",
		"| request sent to first byte (the proxy's own upstream TLS handshake is in here) | 4.50 ms | 1.00 ms | +3.50 ms |",
		"through the proxy 6 carried the user's key in x-api-key and no Authorization, 0 did not; direct, 6 carried no credential, 0 did (as it should;",
		"stream rounds: median 2.00 (1.50–2.50, n=2)",
		"Through the proxy, the upstream got 6 requests on 6 connections (0 of them resumed a TLS session); a new connection's first request arrived 2.00 ms (median; 1.50–2.50) after",
		"Direct, the upstream got 6 requests on 1 connection (0 of them resumed a TLS session).",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "TCP connect") {
		t.Errorf("a step without samples is shown:\n%s", out.String())
	}
	// A run without the stream part shows nothing of it.
	out.Reset()
	streamDetails(samples{}, &out)
	if out.Len() != 0 {
		t.Errorf("streamDetails without samples wrote %q", out.String())
	}
}
