package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/allowlist"
	"github.com/agent-sandbox/agent-sandbox/internal/routerconf"
	"github.com/agent-sandbox/agent-sandbox/internal/routerlog"
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

func mustParse(t *testing.T, s string) []allowlist.Entry {
	t.Helper()
	e, err := allowlist.Parse(strings.NewReader(s), "test")
	if err != nil {
		t.Fatal(err)
	}
	return e
}

const mixedAllowlist = "api.example.com\n*.cdn.example.com\ngit.example.net\ngit.example.net:22\ndb.example.org:5432\nssh.example.org:22\npinned.example.org passthrough\n*.pinned.example.net passthrough\n"

// The golden files are what a session writes at its start.
func TestRouterConfigGolden(t *testing.T) {
	for _, tc := range []struct{ name, allowlist string }{
		{"empty", ""},
		{"mixed", mixedAllowlist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := newTestRouterFiles(t, credPlan{})
			files.applyList(t, tc.allowlist)
			files.golden(t, tc.name)
		})
	}
}

// A reload that adds and removes host:port entries: the entries that stay
// keep their loopback addresses and router ports, and new ones take the
// next unused, not those of the removed ones.
func TestRouterConfigReloadGolden(t *testing.T) {
	files := newTestRouterFiles(t, credPlan{})
	files.applyList(t, "api.example.com\ngit.example.net:22\ndb.example.org:5432\nssh.example.org:22\nssh.example.org:2222\n")
	_, _, before := files.read(t)
	// db.example.org goes, ssh.example.org:2222 goes while the host stays;
	// aaa.example.org sorts first, and ssh.example.org gets a new port.
	files.applyList(t, "api.example.com\n*.cdn.example.com\ngit.example.net:22\naaa.example.org:8080\nssh.example.org:22\nssh.example.org:8022\n")
	files.golden(t, "reload")
	_, _, after := files.read(t)
	for _, pair := range []string{"127.0.0.3:22=10.89.3.2:10002", "127.0.0.4:22=10.89.3.2:10003"} {
		if !strings.Contains(before, pair) || !strings.Contains(after, pair) {
			t.Errorf("the pair %s of an entry that stays is not in both forwards:\n%s%s", pair, before, after)
		}
	}
}

// Inspected names go to routerd's proxy and are the only names it makes
// certificates for; passthrough names go to the host itself, unread.
func TestRouterInspectsAllButPassthrough(t *testing.T) {
	files := newTestRouterFiles(t, credPlan{})
	files.applyList(t, "a.example\n*.b.example\nc.example passthrough\n*.d.example passthrough\ne.example:22\n")
	_, nginx, _ := files.read(t)
	for _, want := range []string{
		"a.example unix:/tmp/inspect.sock;", "*.b.example unix:/tmp/inspect.sock;",
		"c.example $ssl_preread_server_name:443;", "*.d.example $ssl_preread_server_name:443;",
	} {
		if !strings.Contains(nginx, want) {
			t.Errorf("nginx.conf lacks %q:\n%s", want, nginx)
		}
	}
	b, err := os.ReadFile(filepath.Join(files.dir, routerconf.InspectFile))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Hosts, Wildcards []string
		TrustedCA        string `json:"trusted_ca"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(doc.Hosts, []string{"a.example"}) || !slices.Equal(doc.Wildcards, []string{"b.example"}) || doc.TrustedCA != systemCABundle {
		t.Errorf("inspect.json = %s, want a.example and *.b.example alone, verified with the system bundle", b)
	}
}

func TestDnsmasqNeverForwards(t *testing.T) {
	dnsmasq, _, _ := renderThroughFiles(t, credPlan{}, mustParse(t, "a.example\n*.b.example\nc.example:22\n"))
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
	_, nginx, forwards := renderThroughFiles(t, credPlan{}, mustParse(t, "a.example:22\nb.example:22\n"))
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

// credentialTestPlan: an OAuth token for Claude's API, keys for OpenAI's
// and Gemini's, and a GitHub token scoped to one repository.
func credentialTestPlan(customCA bool) credPlan {
	p := credPlan{customCA: customCA}
	for _, name := range []string{"anthropic-oauth", "openai", "gemini"} {
		k := credKindBySecret(name)
		p.routes = append(p.routes, credRoute{k, k.provider.host})
	}
	hosts, _ := apiHosts("")
	gh := []credential{{kind: credKindBySecret("github"), host: "github.com", source: "GH_TOKEN from your environment"}}
	p.forge, _ = forgeSetupFor(settings{parsed: parsedSettings{publish: []string{"crates.io"}}}, hosts, gh, nil)
	p.forge.repos = []string{"me/proj"}
	return p
}

// testRouterFiles is the production path: the session's routerFiles
// plans each list after the last and writes the files into a temp dir, from
// which the test reads them back.
type testRouterFiles struct {
	*routerFiles
	dir string
}

func newTestRouterFiles(t *testing.T, creds credPlan) testRouterFiles {
	t.Helper()
	dir := t.TempDir()
	files, err := newRouterFiles(dir, "10.89.3.2", creds)
	if err != nil {
		t.Fatal(err)
	}
	return testRouterFiles{files, dir}
}

func (f testRouterFiles) applyList(t *testing.T, allowlist string) {
	t.Helper()
	if err := f.apply(mustParse(t, allowlist)); err != nil {
		t.Fatal(err)
	}
}

func (f testRouterFiles) read(t *testing.T) (dnsmasq, nginx, forwards string) {
	t.Helper()
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(f.dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	return read("dnsmasq.conf"), read("nginx.conf"), read("forwards")
}

// golden checks the three files against testdata/name.*.
func (f testRouterFiles) golden(t *testing.T, name string) {
	t.Helper()
	dnsmasq, nginx, forwards := f.read(t)
	golden(t, name+".dnsmasq.conf", dnsmasq)
	golden(t, name+".nginx.conf", nginx)
	golden(t, name+".forwards", forwards)
	policy, err := os.ReadFile(filepath.Join(f.dir, "api-policy.json"))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, name+".api-policy.json", string(policy))
	inspect, err := os.ReadFile(filepath.Join(f.dir, routerconf.InspectFile))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, name+".inspect.json", string(inspect))
}

// renderThroughFiles is the files a session starts with for entries.
func renderThroughFiles(t *testing.T, creds credPlan, entries []allowlist.Entry) (dnsmasq, nginx, forwards string) {
	t.Helper()
	files := newTestRouterFiles(t, creds)
	if err := files.apply(entries); err != nil {
		t.Fatal(err)
	}
	return files.read(t)
}

// The credential proxy as the session writes it: api.anthropic.com and
// api.openai.com listed exactly, Gemini's host under a wildcard, beside
// plain and port entries.
func TestRouterConfigCredentialsGolden(t *testing.T) {
	files := newTestRouterFiles(t, credentialTestPlan(false))
	files.applyList(t, "api.anthropic.com\napi.openai.com\n*.googleapis.com\ngithub.com\ngit.example.net:22\n")
	files.golden(t, "credentials")
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
		"listen unix:/tmp/api-openai-proxy.sock;", "set $api_host api.openai.com;", "include /etc/router-credentials/openai.conf;",
		"proxy_ssl_trusted_certificate /etc/router/upstream-ca.pem;",
		"        api.openai.com unix:/tmp/inspect.sock;\n",
	} {
		if !strings.Contains(nginx, want) {
			t.Errorf("nginx.conf lacks %q:\n%s", want, nginx)
		}
	}
	if strings.Contains(nginx, "api.openai.com $ssl_preread_server_name") {
		t.Error("a credentialed host is still passed by SNI")
	}
	if strings.Contains(nginx, "api-anthropic-proxy") || strings.Contains(nginx, "api-gemini-proxy") {
		t.Errorf("proxies for hosts the allowlist does not name:\n%s", nginx)
	}
	if forwards != "127.0.0.1:443=unix:"+routerconf.TLSSocket+"/tls\n" {
		t.Errorf("forwards = %q", forwards)
	}
}

// The proxy reaches each API host through an upstream group that keeps
// its connections open (issue 14), and the group's one server is a relay
// on a unix socket in the router alone, which resolves the host at
// connect time through routerd: no group names a host or an address that
// nginx would resolve once, through another resolver, when it loads.
func TestCredentialProxyKeepsUpstreamConnections(t *testing.T) {
	creds := credentialTestPlan(false)
	_, nginx, forwards := renderThroughFiles(t, creds, mustParse(t, "api.anthropic.com\napi.openai.com\ngenerativelanguage.googleapis.com\n"))
	stream, http, ok := strings.Cut(nginx, "\nhttp {\n")
	if !ok {
		t.Fatalf("no http block:\n%s", nginx)
	}
	for _, r := range routes(creds.routes) {
		sock := routerconf.APIRelaySocket(r)
		if !strings.HasPrefix(sock, routerconf.APIRelayDir+"/") || strings.HasPrefix(sock, routerconf.TLSSocketDir) || strings.Contains(forwards, sock) {
			t.Errorf("relay socket %s: not in the router's own %s, or reachable by the forwarder (%s)", sock, routerconf.APIRelayDir, forwards)
		}
		group := fmt.Sprintf("\n    upstream %s {\n        server unix:%s;\n        keepalive %d;\n    }\n", routerconf.APIUpstream(r), sock, routerconf.APIKeepalive)
		relay := fmt.Sprintf("\n    server {\n        listen unix:%s;\n        access_log /dev/stderr api_relay;\n        set $api_upstream %s:443;\n        proxy_pass $api_upstream;\n    }\n", sock, r.Host)
		if !strings.Contains(http, group) {
			t.Errorf("the http block lacks%s", group)
		}
		if !strings.Contains(stream, relay) {
			t.Errorf("the stream block lacks%s", relay)
		}
		// The host's name, not the group's, as SNI, in the certificate
		// check and as Host.
		loc := fmt.Sprintf("set $api_host %s;\n", r.Host)
		i := strings.Index(http, loc)
		if i < 0 {
			t.Fatalf("no server for %s", r.Host)
		}
		want := fmt.Sprintf("            proxy_pass https://%s;\n            proxy_ssl_name $api_host;\n            proxy_set_header Host $api_host;\n            proxy_set_header Connection \"\";\n", routerconf.APIUpstream(r))
		if !strings.Contains(http[i:], want) {
			t.Errorf("the location of %s lacks\n%s", r.Host, want)
		}
	}
	for _, want := range []string{"    resolver " + routerconf.UpstreamResolver + " ipv6=off valid=10s;\n", "    proxy_http_version 1.1;\n", "    proxy_ssl_verify on;\n", "    proxy_ssl_server_name on;\n"} {
		block := http
		if strings.HasPrefix(want, "    resolver") {
			block = stream
		}
		if !strings.Contains(block, want) {
			t.Errorf("nginx.conf lacks %q where it belongs", want)
		}
	}
	for _, line := range strings.Split(http, "\n") {
		l := strings.TrimSpace(line)
		if strings.HasPrefix(l, "proxy_pass ") && strings.Contains(l, "$") {
			t.Errorf("a proxy_pass to a variable, which keeps no connections: %s", l)
		}
		if strings.HasPrefix(l, "server ") && l != "server {" && !strings.HasPrefix(l, "server unix:"+routerconf.APIRelayDir+"/") {
			t.Errorf("an upstream server that is not a relay socket: %s", l)
		}
		if strings.HasPrefix(l, "resolver ") {
			t.Errorf("the http block resolves names itself: %s", l)
		}
	}
}

// A relay's log line, a success or a host routerd refused, is neither a
// connection the allowlist closed (blocked.go) nor a request through the
// proxy (credentialSummary).
func TestAPIRelayLogIsNoDenialNorRequest(t *testing.T) {
	_, nginx, _ := renderThroughFiles(t, credentialTestPlan(false), mustParse(t, "api.anthropic.com\n"))
	_, rest, ok := strings.Cut(nginx, "log_format api_relay '")
	if !ok {
		t.Fatalf("no api_relay log format:\n%s", nginx)
	}
	format, _, _ := strings.Cut(rest, "'")
	for _, upstream := range []string{"160.79.104.10:443", "-"} {
		line := strings.NewReplacer("$api_upstream", "api.anthropic.com:443", "$upstream_addr", upstream, "$status", "502",
			"$bytes_sent", "0", "$bytes_received", "0", "$session_time", "0.001").Replace(format)
		if strings.Contains(line, "$") {
			t.Fatalf("a variable the test does not fill in: %s", line)
		}
		if d, ok := routerlog.ParseDenial(line); ok {
			t.Errorf("%s reads as a denial of %q", line, d.Host)
		}
		if _, ok := routerlog.CredentialRequest(line); ok {
			t.Errorf("%s reads as a request through the proxy", line)
		}
		creds := []credential{{host: "api.anthropic.com", source: "ANTHROPIC_API_KEY"}}
		if got := credentialSummary(line+"\n", creds, mustParse(t, "api.anthropic.com\n")); !strings.Contains(got, " 0 requests") || strings.Contains(got, "closed") {
			t.Errorf("credentialSummary counts the relay's line: %s", got)
		}
	}
}

// Allowing an API host only adds lines to nginx.conf, and denying it drops
// some (its relay, group and server), so that routerd ends the old
// workers and the connections they keep to it.
func TestCredentialProxyLinesFollowTheAllowlist(t *testing.T) {
	files := newTestRouterFiles(t, credentialTestPlan(false))
	var prev map[string]bool
	for _, list := range []string{"github.com\n", "github.com\napi.openai.com\n", "github.com\napi.openai.com\napi.anthropic.com\n"} {
		files.applyList(t, list)
		_, nginx, _ := files.read(t)
		have := nginxLines(nginx)
		for l := range prev {
			if !have[l] {
				t.Errorf("allowing hosts to get\n%sdropped the line %q", list, l)
			}
		}
		prev = have
	}
	files.applyList(t, "github.com\napi.anthropic.com\n")
	_, nginx, _ := files.read(t)
	have := nginxLines(nginx)
	for _, l := range []string{"listen unix:" + routerconf.APIRelayDir + "/api-openai.sock;", "upstream api_openai {", "set $api_upstream api.openai.com:443;"} {
		if !prev[l] || have[l] {
			t.Errorf("denying api.openai.com: %q was there %v, is there %v", l, prev[l], have[l])
		}
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

// nginxLines is the set of nginx.conf's lines as routerd compares them.
func nginxLines(conf string) map[string]bool {
	m := map[string]bool{}
	for _, l := range strings.Split(conf, "\n") {
		m[strings.TrimSpace(l)] = true
	}
	return m
}
