package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/testpki"
	"github.com/agent-sandbox/agent-sandbox/router-image/routerd/inspect"
)

// readyWatch is routerd's stdout that, the moment the ready line is
// written, looks at what the launcher would then read.
type readyWatch struct {
	syncBuffer
	once    sync.Once
	atReady func()
	ready   chan struct{}
}

func (r *readyWatch) Write(p []byte) (int, error) {
	n, err := r.syncBuffer.Write(p)
	if bytes.Contains(p, []byte(readyLine)) {
		r.once.Do(func() { r.atReady(); close(r.ready) })
	}
	return n, err
}

// acceptAll stands in for a child's listener that announceReady waits for.
func acceptAll(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	return l.Addr().String()
}

func TestRunWritesTheSessionCABeforeReady(t *testing.T) {
	up := startFakeUpstream(t)
	confDir, caDir := t.TempDir(), t.TempDir()
	sockDir, err := os.MkdirTemp("", "routerd")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	sock := filepath.Join(sockDir, "inspect.sock")
	trusted, err := testpki.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	trustedFile := filepath.Join(confDir, "trusted.pem")
	if err := testpki.WriteFile(trustedFile, trusted.CertPEM); err != nil {
		t.Fatal(err)
	}
	replaceFile(t, filepath.Join(confDir, inspect.ConfigFile), `{"hosts":["allowed.test"],"trusted_ca":"`+trustedFile+`","resolver":"127.0.0.1:9"}`)

	caPort := freePort(t)
	env := map[string]string{"UPSTREAM_DNS": up.addr.String(), "READY_ADDR": "127.0.0.1", "INSPECT_SOCKET": sock, "CA_DIR": caDir, "CA_LISTEN": caPort}
	cfg, err := configFromEnv(func(k string) string { return env[k] }, "testdata/missing", confDir)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.inspectSocket != sock || cfg.caDir != caDir || cfg.inspectFile != filepath.Join(confDir, "inspect.json") {
		t.Fatalf("config %q %q %q", cfg.inspectSocket, cfg.caDir, cfg.inspectFile)
	}
	// Nothing else of the router's: no DNS front on port 53, no config to
	// watch, children that wait; readiness is two loopback listeners.
	cfg.front = netip.AddrPort{}
	cfg.dnsListen = freePort(t)
	cfg.watch = nil
	cfg.children = []child{{"dnsmasq", []string{"sleep", "1000"}}, {"nginx", []string{"sleep", "1000"}}}
	cfg.ready = []readyTarget{{"tcp", acceptAll(t)}, {"tcp", acceptAll(t)}}

	var atReady []string
	out := &readyWatch{ready: make(chan struct{}), atReady: func() {
		for _, f := range []string{inspect.CAFile, inspect.BundleFile} {
			if _, err := os.Stat(filepath.Join(caDir, f)); err != nil {
				atReady = append(atReady, f)
			}
		}
	}}
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, cfg, out, logs) }()
	select {
	case <-out.ready:
	case <-time.After(10 * time.Second):
		t.Fatalf("not ready; log:\n%s", logs)
	}
	if atReady != nil {
		t.Errorf("missing at the ready line: %v", atReady)
	}

	caPEM, err := os.ReadFile(filepath.Join(caDir, inspect.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	bundle, _ := os.ReadFile(filepath.Join(caDir, inspect.BundleFile))
	if !bytes.Equal(bundle, append(append([]byte{}, trusted.CertPEM...), caPEM...)) {
		t.Error("bundle.pem is not the trusted bundle followed by the session CA")
	}
	// The CA port serves the same two files, and nothing else.
	for path, want := range map[string][]byte{"/bundle.pem": bundle, "/ca.pem": caPEM} {
		if got := httpGet(t, "http://"+caPort+path, 200); !bytes.Equal(got, want) {
			t.Errorf("GET %s over the CA port is not the file routerd wrote", path)
		}
	}
	httpGet(t, "http://"+caPort+"/ca.key", 404)
	entries, _ := os.ReadDir(caDir)
	for _, de := range entries {
		b, _ := os.ReadFile(filepath.Join(caDir, de.Name()))
		if bytes.Contains(b, []byte("PRIVATE KEY")) || de.Name() == "ca.key" {
			t.Errorf("%s holds the CA's key", de.Name())
		}
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o666 {
		t.Errorf("inspect socket %v, %v; want mode 0666", fi, err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	c, err := tls.Dial("unix", sock, &tls.Config{ServerName: "allowed.test", RootCAs: pool})
	if err != nil {
		t.Errorf("handshake for an inspected name: %v", err)
	} else {
		_ = c.Close()
	}
	if c, err := tls.Dial("unix", sock, &tls.Config{ServerName: "other.test", RootCAs: pool}); err == nil {
		_ = c.Close()
		t.Error("handshake for a name not inspected")
	}
	waitLog(t, &out.syncBuffer, `inspect refused sni="other.test" reason="not in the allowlist"`)

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("run = %d, want 0; log:\n%s", code, logs)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}

func TestRunRefusesABadInspectConfig(t *testing.T) {
	confDir := t.TempDir()
	replaceFile(t, filepath.Join(confDir, inspect.ConfigFile), `{"hosts":`)
	cfg := config{
		dnsListen:     freePort(t),
		children:      []child{{"sleep", []string{"sleep", "1000"}}},
		inspectSocket: filepath.Join(t.TempDir(), "s"),
		caDir:         t.TempDir(),
		inspectFile:   filepath.Join(confDir, inspect.ConfigFile),
	}
	logs := &syncBuffer{}
	if code := run(context.Background(), cfg, logs, logs); code != 1 {
		t.Errorf("run = %d, want 1", code)
	}
	if !strings.Contains(logs.String(), "routerd: inspect proxy: ") {
		t.Errorf("log %q", logs)
	}
}

func TestConfigFromEnvInspect(t *testing.T) {
	env := map[string]string{"UPSTREAM_DNS": "10.89.1.1", "READY_ADDR": "10.89.7.2"}
	getenv := func(k string) string { return env[k] }
	cfg, err := configFromEnv(getenv, "testdata/missing", "/etc/router")
	if err != nil || cfg.inspectSocket != "" {
		t.Errorf("without INSPECT_SOCKET: %q, %v", cfg.inspectSocket, err)
	}
	env["INSPECT_SOCKET"] = "/tmp/inspect.sock"
	if _, err := configFromEnv(getenv, "testdata/missing", "/etc/router"); err == nil || !strings.Contains(err.Error(), "CA_DIR") {
		t.Errorf("INSPECT_SOCKET without CA_DIR: %v", err)
	}
	env["CA_DIR"] = "/run/agent-sandbox-ca"
	cfg, err = configFromEnv(getenv, "testdata/missing", "/etc/router")
	if err != nil || cfg.inspectSocket != "/tmp/inspect.sock" || cfg.caDir != "/run/agent-sandbox-ca" || cfg.inspectFile != "/etc/router/inspect.json" {
		t.Errorf("config %+v, %v", cfg, err)
	}
}
