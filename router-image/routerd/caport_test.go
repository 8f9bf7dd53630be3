package main

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func httpGet(t *testing.T, url string, want int) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Errorf("GET %s = %d, want %d", url, resp.StatusCode, want)
	}
	return b
}

// The CA port serves the certificate and the bundle by name, and nothing
// else of CA_DIR or beyond: no key, no other file, no traversal.
func TestCAPortServesTheCertificatesAlone(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ca")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const key = "-----BEGIN PRIVATE KEY-----\nnot-to-be-served\n"
	files := map[string]string{
		filepath.Join(dir, "bundle.pem"):  "-----BEGIN CERTIFICATE-----\nbundle\n",
		filepath.Join(dir, "ca.pem"):      "-----BEGIN CERTIFICATE-----\nca\n",
		filepath.Join(dir, "ca.key"):      key,
		filepath.Join(dir, "other.pem"):   key,
		filepath.Join(root, "secret.pem"): key,
	}
	for p, body := range files {
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(caHandler(dir))
	defer srv.Close()
	if got := httpGet(t, srv.URL+"/bundle.pem", 200); string(got) != files[filepath.Join(dir, "bundle.pem")] {
		t.Errorf("bundle.pem = %q", got)
	}
	if got := httpGet(t, srv.URL+"/ca.pem", 200); string(got) != files[filepath.Join(dir, "ca.pem")] {
		t.Errorf("ca.pem = %q", got)
	}
	for _, path := range []string{"/ca.key", "/other.pem", "/", "/bundle.pem/", "//bundle.pem", "/../secret.pem",
		"/%2e%2e/secret.pem", "/ca/../secret.pem", "/bundle.pem?x=1", "/BUNDLE.PEM", "/bundle.pem%00"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			continue // the client refused to send it
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 404 && resp.StatusCode != 400 {
			t.Errorf("GET %s = %d, want 404", path, resp.StatusCode)
		}
		if bytes.Contains(b, []byte("not-to-be-served")) {
			t.Errorf("GET %s served a key", path)
		}
	}
	for _, m := range []string{"POST", "PUT", "DELETE", "OPTIONS"} {
		req, _ := http.NewRequest(m, srv.URL+"/ca.pem", strings.NewReader("x"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 405 {
			t.Errorf("%s /ca.pem = %d, want 405", m, resp.StatusCode)
		}
	}
	req, _ := http.NewRequest("HEAD", srv.URL+"/ca.pem", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 || resp.ContentLength != int64(len(files[filepath.Join(dir, "ca.pem")])) {
		t.Errorf("HEAD /ca.pem: %v %v", resp, err)
	}
	// Before routerd wrote them: unavailable, not empty.
	empty := httptest.NewServer(caHandler(t.TempDir()))
	defer empty.Close()
	httpGet(t, empty.URL+"/bundle.pem", 503)
}

func TestCAListenConfig(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{"UPSTREAM_DNS": "10.89.1.1", "READY_ADDR": "10.89.7.2"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	cfg, err := configFromEnv(env("INSPECT_SOCKET", "/run/i.sock", "CA_DIR", "/run/ca", "CA_LISTEN", "0.0.0.0:8079"), "testdata/missing", "/etc/router")
	if err != nil || cfg.caListen.String() != "0.0.0.0:8079" {
		t.Fatalf("CA_LISTEN: %v %v", cfg.caListen, err)
	}
	targets := cfg.readyTargets()
	if last := targets[len(targets)-1]; last != (readyTarget{"tcp", "127.0.0.1:8079"}) {
		t.Errorf("readiness waits for %v, want the CA port on loopback last", targets)
	}
	if cfg, err := configFromEnv(env(), "testdata/missing", "/etc/router"); err != nil || cfg.caListen.IsValid() || len(cfg.readyTargets()) != 2 {
		t.Errorf("without CA_LISTEN: %v %v", cfg.caListen, err)
	}
	for _, tc := range []struct {
		env  func(string) string
		want string
	}{
		{env("CA_LISTEN", "0.0.0.0:8079"), "CA_LISTEN is set but INSPECT_SOCKET or CA_DIR is not"},
		{env("CA_LISTEN", "0.0.0.0:8079", "CA_DIR", "/run/ca"), "CA_LISTEN is set but INSPECT_SOCKET or CA_DIR is not"},
		{env("CA_LISTEN", "8079", "INSPECT_SOCKET", "/s", "CA_DIR", "/c"), `bad CA_LISTEN "8079": want IP:PORT`},
		{env("CA_LISTEN", "router:8079", "INSPECT_SOCKET", "/s", "CA_DIR", "/c"), `bad CA_LISTEN`},
		{env("CA_LISTEN", "0.0.0.0:0", "INSPECT_SOCKET", "/s", "CA_DIR", "/c"), `bad CA_LISTEN`},
	} {
		if _, err := configFromEnv(tc.env, "testdata/missing", "/etc/router"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want %q, got %v", tc.want, err)
		}
	}
}

// On 0.0.0.0 the CA port answers on the pod's IPv4 addresses alone, not on
// its IPv6 ones (a dual-stack socket would).
func TestCAPortListensOnIPv4Alone(t *testing.T) {
	s, err := listenCA(netip.MustParseAddrPort("0.0.0.0:0"), t.TempDir(), log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.ln.Close()
	port := s.ln.Addr().(*net.TCPAddr).Port
	if c, err := net.DialTimeout("tcp4", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err != nil {
		t.Fatalf("IPv4: %v", err)
	} else {
		c.Close()
	}
	if c, err := net.DialTimeout("tcp6", fmt.Sprintf("[::1]:%d", port), time.Second); err == nil {
		c.Close()
		t.Errorf("the CA port on 0.0.0.0 answered on [::1]")
	}
}
