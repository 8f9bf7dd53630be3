package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it):\n%s", path, got)
	}
}

func mustParse(t *testing.T, s string) []entry {
	t.Helper()
	e, err := parseAllowlistFrom(strings.NewReader(s), "test")
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestRouterConfigGolden(t *testing.T) {
	for _, tc := range []struct{ name, allowlist string }{
		{"empty", ""},
		{"mixed", "api.example.com\n*.cdn.example.com\ngit.example.net\ngit.example.net:22\ndb.example.org:5432\nssh.example.org:22\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dnsmasq, nginx, forwards, err := routerConfig(mustParse(t, tc.allowlist), "10.89.3.2")
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name+".dnsmasq.conf", dnsmasq)
			golden(t, tc.name+".nginx.conf", nginx)
			golden(t, tc.name+".forwards", forwards+"\n")
		})
	}
}

func TestDnsmasqNeverForwards(t *testing.T) {
	dnsmasq, _, _, err := routerConfig(mustParse(t, "a.example\n*.b.example\nc.example:22\n"), "10.89.3.2")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(dnsmasq, "\n") {
		if strings.HasPrefix(line, "server=") || strings.HasPrefix(line, "resolv-file") {
			t.Errorf("dnsmasq would forward: %q", line)
		}
	}
	for _, must := range []string{"no-resolv", "address=/#/", "log-queries", "listen-address=10.89.3.2"} {
		if !strings.Contains(dnsmasq, must+"\n") {
			t.Errorf("dnsmasq.conf lacks %q", must)
		}
	}
}

func TestTwoHostsShareAPort(t *testing.T) {
	_, nginx, forwards, err := routerConfig(mustParse(t, "a.example:22\nb.example:22\n"), "10.89.3.2")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"127.0.0.2:22=10.89.3.2:10001", "127.0.0.3:22=10.89.3.2:10002"} {
		if !strings.Contains(forwards, want) {
			t.Errorf("FORWARDS %q lacks %q", forwards, want)
		}
	}
	for _, want := range []string{"10001 a.example:22;", "10002 b.example:22;"} {
		if !strings.Contains(nginx, want) {
			t.Errorf("nginx.conf lacks %q", want)
		}
	}
}

func TestManyPortEntriesGetDistinctAddresses(t *testing.T) {
	var b strings.Builder
	for i := range 300 {
		fmt.Fprintf(&b, "h%d.example:22\n", i)
	}
	p, err := planRouter(mustParse(t, b.String()))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for host, a := range p.loopback {
		if seen[a.String()] || !a.IsLoopback() || a.String() == "127.0.0.1" {
			t.Fatalf("host %s got address %s (duplicate, 127.0.0.1, or not loopback)", host, a)
		}
		seen[a.String()] = true
	}
}

// credentialTestPlan: an OAuth token for Claude's API, keys for OpenAI's
// and Gemini's.
func credentialTestPlan(customCA bool) credPlan {
	p := credPlan{customCA: customCA}
	for _, name := range []string{"anthropic-oauth", "openai", "gemini"} {
		k := credKindBySecret(name)
		p.routes = append(p.routes, credRoute{k, k.provider.host})
	}
	return p
}

// renderThroughFiles is the production path: the session's routerFiles
// plans the list and writes the three files; the test reads them back.
func renderThroughFiles(t *testing.T, creds credPlan, entries []entry) (dnsmasq, nginx, forwards string) {
	t.Helper()
	dir := t.TempDir()
	files := newRouterFiles(dir, "10.89.3.2")
	files.creds = creds
	if err := files.apply(entries); err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	return read("dnsmasq.conf"), read("nginx.conf"), read("forwards")
}

// The credential proxy as the session writes it: api.anthropic.com and
// api.openai.com listed exactly, Gemini's host under a wildcard, beside
// plain and port entries.
func TestRouterConfigCredentialsGolden(t *testing.T) {
	allow := "api.anthropic.com\napi.openai.com\n*.googleapis.com\ngithub.com\ngit.example.net:22\n"
	dnsmasq, nginx, forwards := renderThroughFiles(t, credentialTestPlan(false), mustParse(t, allow))
	golden(t, "credentials.dnsmasq.conf", dnsmasq)
	golden(t, "credentials.nginx.conf", nginx)
	golden(t, "credentials.forwards", forwards)
}

// Without credentials the session's files are exactly what they were.
func TestRouterConfigWithoutCredentialsUnchanged(t *testing.T) {
	allow := "api.example.com\n*.cdn.example.com\ngit.example.net\ngit.example.net:22\ndb.example.org:5432\nssh.example.org:22\n"
	dnsmasq, nginx, forwards := renderThroughFiles(t, credPlan{}, mustParse(t, allow))
	golden(t, "mixed.dnsmasq.conf", dnsmasq)
	golden(t, "mixed.nginx.conf", nginx)
	golden(t, "mixed.forwards", forwards)
}

func TestCredentialProxyFollowsTheAllowlist(t *testing.T) {
	creds := credentialTestPlan(true)
	// Nothing of the APIs allowed: no proxy, no pair, the bundle unused.
	_, nginx, forwards := renderThroughFiles(t, creds, mustParse(t, "github.com\n"))
	if strings.Contains(nginx, "http {") || strings.Contains(forwards, ":81=") {
		t.Errorf("a proxy for hosts the allowlist does not name:\n%s\n%s", nginx, forwards)
	}
	// Only the allowed one, with the test CA when one is given.
	_, nginx, forwards = renderThroughFiles(t, creds, mustParse(t, "api.openai.com\n"))
	for _, want := range []string{
		"listen 10.89.3.2:82;", "set $api_host api.openai.com;", "include /etc/router-credentials/openai.conf;",
		"proxy_ssl_trusted_certificate /etc/router-credentials/upstream-ca.pem;",
		"        api.openai.com \"\";\n",
	} {
		if !strings.Contains(nginx, want) {
			t.Errorf("nginx.conf lacks %q:\n%s", want, nginx)
		}
	}
	if strings.Contains(nginx, "api.openai.com $ssl_preread_server_name") {
		t.Error("a credentialed host is still passed by SNI")
	}
	if strings.Contains(nginx, ":81;") || strings.Contains(nginx, ":83;") {
		t.Errorf("proxies for hosts the allowlist does not name:\n%s", nginx)
	}
	if forwards != "127.0.0.1:443=unix:"+tlsSocket+"/tls 127.0.0.1:82=10.89.3.2:82\n" {
		t.Errorf("forwards = %q", forwards)
	}
}

// Each server removes every credential header of its API but the one its
// include file sets, which replaces the agent's.
func TestCredentialProxyHeaders(t *testing.T) {
	for _, tc := range []struct {
		secret, set string
		cleared     []string
	}{
		{"anthropic", "x-api-key", []string{"Authorization"}},
		{"anthropic-oauth", "Authorization", []string{"x-api-key"}},
		{"openai", "Authorization", nil},
		{"gemini", "x-goog-api-key", []string{"Authorization"}},
	} {
		t.Run(tc.secret, func(t *testing.T) {
			k := credKindBySecret(tc.secret)
			p := credPlan{routes: []credRoute{{k, k.provider.host}}}
			_, nginx, _ := renderThroughFiles(t, p, mustParse(t, k.provider.host+"\n"))
			var cleared []string
			for _, line := range strings.Split(nginx, "\n") {
				if h, ok := strings.CutPrefix(strings.TrimSpace(line), "proxy_set_header "); ok && strings.HasSuffix(h, ` "";`) {
					cleared = append(cleared, strings.TrimSuffix(h, ` "";`))
				}
			}
			if !slices.Equal(cleared, append([]string{"Connection"}, tc.cleared...)) {
				t.Errorf("cleared headers %v, want Connection and %v", cleared, tc.cleared)
			}
			if !strings.Contains(nginx, "include /etc/router-credentials/"+k.provider.id+".conf;") {
				t.Errorf("no include for %s", k.provider.id)
			}
			if (k.provider == geminiAPI) != strings.Contains(nginx, "return 403;") {
				t.Errorf("query arguments refused for %s: %v", k.provider.id, strings.Contains(nginx, "return 403;"))
			}
		})
	}
}
