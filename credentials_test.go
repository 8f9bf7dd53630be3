package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/allowlist"
	"github.com/agent-sandbox/agent-sandbox/internal/routerconf"
	spec "github.com/opencontainers/runtime-spec/specs-go"
)

func testHosts(t *testing.T) map[*apiProvider]string {
	t.Helper()
	h, err := apiHosts("")
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// describe is a credential list as "secret=value@host (source)".
func describe(creds []credential) []string {
	var out []string
	for _, c := range creds {
		out = append(out, c.kind.secret+"="+c.value+"@"+c.host+" ("+c.source+")")
	}
	return out
}

func TestResolveCredentials(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		stored  map[string]string
		passed  []string
		want    []string
		warning string
	}{
		{
			name: "nothing given, nothing injected",
		},
		{
			name: "the environment",
			env:  map[string]string{"ANTHROPIC_API_KEY": "ka", "OPENAI_API_KEY": "ko", "GEMINI_API_KEY": "kg"},
			want: []string{
				"anthropic=ka@api.anthropic.com (ANTHROPIC_API_KEY from your environment)",
				"openai=ko@api.openai.com (OPENAI_API_KEY from your environment)",
				"gemini=kg@generativelanguage.googleapis.com (GEMINI_API_KEY from your environment)",
			},
		},
		{
			name: "an API key before an OAuth token, as Claude Code does",
			env:  map[string]string{"ANTHROPIC_API_KEY": "ka", "CLAUDE_CODE_OAUTH_TOKEN": "tok"},
			want: []string{"anthropic=ka@api.anthropic.com (ANTHROPIC_API_KEY from your environment)"},
		},
		{
			name:   "stored, when the environment has none",
			stored: map[string]string{"anthropic-oauth": "tok"},
			want:   []string{"anthropic-oauth=tok@api.anthropic.com (the stored secret anthropic-oauth)"},
		},
		{
			name:   "the environment before a stored one",
			env:    map[string]string{"CLAUDE_CODE_OAUTH_TOKEN": "envtok"},
			stored: map[string]string{"anthropic": "storedkey", "openai": "so"},
			want: []string{
				"anthropic-oauth=envtok@api.anthropic.com (CLAUDE_CODE_OAUTH_TOKEN from your environment)",
				"openai=so@api.openai.com (the stored secret openai)",
			},
		},
		{
			name:    "--env hands the key to the agent: none injected for that API, with a warning",
			env:     map[string]string{"ANTHROPIC_API_KEY": "ka", "OPENAI_API_KEY": "ko"},
			stored:  map[string]string{"anthropic-oauth": "tok"},
			passed:  []string{"ANTHROPIC_API_KEY"},
			want:    []string{"openai=ko@api.openai.com (OPENAI_API_KEY from your environment)"},
			warning: "ANTHROPIC_API_KEY goes into the sandbox (--env): the agent can read it",
		},
		{
			name:   "--env of the base URL: the user routes that API",
			env:    map[string]string{"ANTHROPIC_API_KEY": "ka", "ANTHROPIC_BASE_URL": "https://gw.example"},
			passed: []string{"ANTHROPIC_BASE_URL"},
		},
		{
			name:   "--env of an auth token: the user authenticates that API",
			env:    map[string]string{"ANTHROPIC_API_KEY": "ka", "ANTHROPIC_AUTH_TOKEN": "gw"},
			passed: []string{"ANTHROPIC_AUTH_TOKEN"},
		},
		{
			name: "an empty variable is no credential",
			env:  map[string]string{"ANTHROPIC_API_KEY": "", "GEMINI_API_KEY": "  kg \n"},
			want: []string{"gemini=kg@generativelanguage.googleapis.com (GEMINI_API_KEY from your environment)"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, v := range tc.stored {
				must(t, writeSecret(dir, name, v))
			}
			passed := map[string]string{}
			for _, k := range tc.passed {
				passed[k] = tc.env[k]
			}
			creds, warnings, err := resolveCredentials(lookupIn(tc.env), passed, dir, testHosts(t))
			if err != nil {
				t.Fatal(err)
			}
			if got := describe(creds); !slices.Equal(got, tc.want) {
				t.Errorf("credentials = %q\nwant %q", got, tc.want)
			}
			joined := strings.Join(warnings, "\n")
			if tc.warning == "" && joined != "" || !strings.Contains(joined, tc.warning) {
				t.Errorf("warnings = %q, want %q", joined, tc.warning)
			}
		})
	}
}

func TestResolveCredentialsRefusals(t *testing.T) {
	dir := t.TempDir()
	_, _, err := resolveCredentials(lookupIn(map[string]string{"OPENAI_API_KEY": `sk-"; evil`}), nil, dir, testHosts(t))
	if err == nil || !strings.Contains(err.Error(), "OPENAI_API_KEY in your environment is not an API key or token") || strings.Contains(err.Error(), "evil") {
		t.Errorf("a value nginx could misread: %v", err)
	}
	must(t, writeSecret(dir, "gemini", "kg"))
	path := filepath.Join(dir, "gemini")
	must(t, os.Chmod(path, 0o644))
	_, _, err = resolveCredentials(lookupIn(nil), nil, dir, testHosts(t))
	if err == nil || err.Error() != path+" is open to other users (mode 0644); fix: chmod 600 "+path {
		t.Errorf("a 0644 secret: %v", err)
	}
}

func TestAPIHosts(t *testing.T) {
	h, err := apiHosts("anthropic=API.Anthropic.TEST., gemini=gen.test")
	if err != nil {
		t.Fatal(err)
	}
	if h[anthropicAPI] != "api.anthropic.test" || h[geminiAPI] != "gen.test" || h[openaiAPI] != "api.openai.com" {
		t.Errorf("hosts = %v", h)
	}
	for _, bad := range []string{"claude=x.test", "anthropic", "anthropic=*.x.test", "anthropic=x.test:8443", "anthropic=10.0.0.1"} {
		if _, err := apiHosts(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestWriteCredentialDir(t *testing.T) {
	runtimeDir := t.TempDir()
	s := sessionCredentials{
		creds: []credential{
			{kind: credKindBySecret("anthropic-oauth"), host: "api.anthropic.com", value: "sk-ant-oat01-tok"},
			{kind: credKindBySecret("gemini"), host: "generativelanguage.googleapis.com", value: "AIzaKEY"},
		},
		upstreamCA: []byte("-----BEGIN CERTIFICATE-----\n"),
	}
	dir, err := writeCredentialDir(runtimeDir, testSession, s)
	if err != nil {
		t.Fatal(err)
	}
	if !sessionDir.MatchString(filepath.Base(dir)) {
		t.Errorf("%s is not a session dir gc would collect", dir)
	}
	if m := mode(t, dir); m != 0o700 {
		t.Errorf("dir mode %04o", m)
	}
	for name, want := range map[string]string{
		"anthropic.conf": "proxy_set_header Authorization \"Bearer sk-ant-oat01-tok\";\n",
		"gemini.conf":    "proxy_set_header x-goog-api-key \"AIzaKEY\";\n",
	} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", name, b, err, want)
		}
		if m := mode(t, filepath.Join(dir, name)); m != 0o600 {
			t.Errorf("%s mode %04o", name, m)
		}
	}
	// The test CA is a certificate: the session's config dir holds it.
	if _, err := os.Stat(filepath.Join(dir, upstreamCAFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the credential dir holds %s: %v", upstreamCAFile, err)
	}
	if d, err := writeCredentialDir(runtimeDir, testSession, sessionCredentials{}); d != "" || err != nil {
		t.Errorf("no credentials made %q, %v", d, err)
	}
}

// launcherCredentials does what launch does with the launcher's
// environment and arguments: --env names go in, the rest is injected.
func launcherCredentials(t *testing.T, cfg *sessionFixture, args []string, env map[string]string) {
	t.Helper()
	la, err := parseLaunchArgs(args, lookupIn(env))
	if err != nil {
		t.Fatal(err)
	}
	cfg.env = la.env
	creds, _, err := resolveCredentials(lookupIn(env), la.env, t.TempDir(), testHosts(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.cred.creds, cfg.cred.handed = creds, handedHosts(la.env, testHosts(t))
	if cfg.cred.dir, err = writeCredentialDir(t.TempDir(), cfg.name, cfg.cred); err != nil {
		t.Fatal(err)
	}
}

// specsJSON is every spec the engine was given, as JSON: the key must be
// in none of them (environment, labels, annotations, command, mounts).
func specsJSON(t *testing.T, eng *fakeEngine) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, s := range eng.containers {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = string(b)
	}
	for name, p := range eng.pods {
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		out["pod "+name] = string(b)
	}
	return out
}

func TestSessionInjectsCredentials(t *testing.T) {
	const key = "sk-ant-api03-NONCE-d41d8cd98f00"
	eng := newFakeEngine()
	eng.logs = map[string]string{testSession + "-router": strings.Join([]string{
		`credentials host=api.anthropic.com method=POST path="/v1/messages" status=200 sent=900 received=4000 upstream="10.99.0.10:443" time=0.210`,
		`credentials host=api.anthropic.com method=POST path="/v1/messages" status=200 sent=900 received=4000 upstream="10.99.0.10:443" time=0.190`,
		`10.89.7.3 port=443 sni="api.anthropic.com" upstream="-" status=200 sent=0 received=0`,
	}, "\n")}
	cfg := testConfig(t)
	cfg.entries = append(cfg.entries, allowlist.Entry{Host: "api.anthropic.com", Port: 443})
	launcherCredentials(t, &cfg, []string{"--exec", "true"}, map[string]string{"ANTHROPIC_API_KEY": key})
	code, stderr := runSession(context.Background(), eng, cfg)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	summary := stderr()

	for name, js := range specsJSON(t, eng) {
		if strings.Contains(js, key) {
			t.Errorf("LEAK: the key is in the spec of %s", name)
		}
	}
	router := eng.containers[testSession+"-router"]
	var credMounts []string
	for name, s := range eng.containers {
		for _, m := range s.Mounts {
			if m.Source == cfg.cred.dir || strings.HasPrefix(m.Source, cfg.cred.dir+"/") || m.Destination == routerCredentialDir {
				credMounts = append(credMounts, name+" "+m.Destination+" "+strings.Join(m.Options, ","))
			}
		}
	}
	if want := []string{testSession + "-router " + routerCredentialDir + " ro,Z"}; !slices.Equal(credMounts, want) {
		t.Errorf("credential dir mounts = %q, want the router's alone, read-only: %q", credMounts, want)
	}
	if strings.HasPrefix(cfg.cred.dir, cfg.tmp) || strings.HasPrefix(cfg.tmp, cfg.cred.dir) {
		t.Errorf("the credential dir %s and the shared config dir %s overlap", cfg.cred.dir, cfg.tmp)
	}
	// The config dir, nginx's TLS socket dir, the CA dir and the
	// credential dir.
	if len(router.Mounts) != 4 {
		t.Errorf("router mounts = %+v", router.Mounts)
	}
	agent := eng.containers[testSession+"-claude"]
	for k, want := range map[string]string{
		"ANTHROPIC_BASE_URL":                       "https://api.anthropic.com",
		"ANTHROPIC_AUTH_TOKEN":                     "sk-ant-api03-agent-sandbox-placeholder",
		"ANTHROPIC_API_KEY":                        "",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
	} {
		if agent.Env[k] != want {
			t.Errorf("agent %s = %q, want %q", k, agent.Env[k], want)
		}
	}
	// The files the forwarder also mounts hold no key, but do route it.
	des, _ := os.ReadDir(cfg.tmp)
	for _, de := range des {
		b, _ := os.ReadFile(filepath.Join(cfg.tmp, de.Name()))
		if strings.Contains(string(b), key) {
			t.Errorf("LEAK: the key is in the shared %s", de.Name())
		}
	}
	// The agent reaches the API by its name, inspected: no loopback
	// port of its own.
	if b, _ := os.ReadFile(filepath.Join(cfg.tmp, "forwards")); strings.Contains(string(b), ":81=") {
		t.Errorf("forwards = %q, want no pair to the gate", b)
	}
	if b, _ := os.ReadFile(filepath.Join(cfg.tmp, routerconf.InspectFile)); !strings.Contains(string(b), `"api.anthropic.com": "10.89.7.2:81"`) {
		t.Errorf("inspect.json does not send api.anthropic.com to the gate:\n%s", b)
	}
	if b, _ := os.ReadFile(filepath.Join(cfg.cred.dir, "anthropic.conf")); string(b) != "proxy_set_header x-api-key \""+key+"\";\n" {
		t.Errorf("include file = %q", b)
	}
	if strings.Contains(summary, key) {
		t.Error("LEAK: the key is on stderr")
	}
	want := "agent-sandbox: the router added your credentials (the agent held placeholders):\n" +
		"agent-sandbox:   api.anthropic.com  ANTHROPIC_API_KEY from your environment, 2 requests; 1 TLS connection straight to it closed (use the base URL)\n"
	if !strings.Contains(summary, want) {
		t.Errorf("stderr lacks the summary %q:\n%s", want, summary)
	}
}

func TestSessionEnvPassesCredentialIn(t *testing.T) {
	const key = "sk-ant-api03-PASSED"
	eng := newFakeEngine()
	cfg := testConfig(t)
	cfg.entries = append(cfg.entries, allowlist.Entry{Host: "api.anthropic.com", Port: 443})
	launcherCredentials(t, &cfg, []string{"--env", "ANTHROPIC_API_KEY", "--exec", "true"}, map[string]string{"ANTHROPIC_API_KEY": key})
	if len(cfg.cred.creds) != 0 || cfg.cred.dir != "" {
		t.Fatalf("injected although passed with --env: %v", describe(cfg.cred.creds))
	}
	runSession(context.Background(), eng, cfg)
	agent := eng.containers[testSession+"-claude"]
	if agent.Env["ANTHROPIC_API_KEY"] != key || agent.Env["ANTHROPIC_BASE_URL"] != "" {
		t.Errorf("agent env = %v, want the key as passed and no base URL", agent.Env)
	}
	if r := eng.containers[testSession+"-router"]; len(r.Mounts) != 3 || slices.ContainsFunc(r.Mounts, func(m spec.Mount) bool { return m.Destination == routerCredentialDir }) {
		t.Errorf("router mounts = %+v, want the config, TLS socket and CA dirs alone", r.Mounts)
	}
	// Passed unread, by SNI, as before inspection: removing the agent's
	// key there would remove the one the user handed it.
	if b, _ := os.ReadFile(filepath.Join(cfg.tmp, "nginx.conf")); strings.Contains(string(b), "http {") ||
		!strings.Contains(string(b), "api.anthropic.com $ssl_preread_server_name:443;") {
		t.Errorf("nginx.conf does not pass api.anthropic.com by SNI as before:\n%s", b)
	}
	if b, _ := os.ReadFile(filepath.Join(cfg.tmp, routerconf.InspectFile)); strings.Contains(string(b), "api.anthropic.com") {
		t.Errorf("the inspecting proxy still admits api.anthropic.com:\n%s", b)
	}
}

func TestCredentialSummaryQuiet(t *testing.T) {
	creds := []credential{{kind: credKindBySecret("openai"), host: "api.openai.com", source: "OPENAI_API_KEY from your environment"}}
	if s := credentialSummary("", nil, nil); s != "" {
		t.Errorf("no credentials: %q", s)
	}
	// A credential for a host the allowlist does not name was never used.
	if s := credentialSummary("", creds, []allowlist.Entry{{Host: "github.com", Port: 443}}); s != "" {
		t.Errorf("unused credential: %q", s)
	}
	if s := credentialSummary("", creds, []allowlist.Entry{{Host: "api.openai.com", Port: 443}}); !strings.Contains(s, "api.openai.com  OPENAI_API_KEY from your environment, 0 requests\n") {
		t.Errorf("allowed, unused: %q", s)
	}
}

func TestAPIAllowNamesOnlyRulesThatCanBeTurnedOff(t *testing.T) {
	got, err := parseAPIAllow(" openai.mcp,anthropic.mcp_servers,openai.mcp ")
	if err != nil || strings.Join(got, ",") != "anthropic.mcp_servers,openai.mcp" {
		t.Errorf("parseAPIAllow = %q, %v", got, err)
	}
	for _, bad := range []string{"anthropic.parse", "anthropic.query", "mcp"} {
		if _, err := parseAPIAllow(bad); err == nil || !strings.Contains(err.Error(), "AGENT_SANDBOX_API_ALLOW") || !strings.Contains(err.Error(), "openai.mcp") {
			t.Errorf("parseAPIAllow(%q) = %v, want a refusal that lists the rules", bad, err)
		}
	}
}

func TestAPIGateSummaryListsRefusalsWithTheirRule(t *testing.T) {
	log := strings.Join([]string{
		`api-refused host=api.anthropic.com method="POST" path="/v1/messages" rule=anthropic.mcp_servers status=403`,
		`api-refused host=api.anthropic.com method="POST" path="/v1/messages" rule=anthropic.mcp_servers status=403`,
		`api-refused host=api.openai.com method="POST" path="/v1/\x1b[2Jx" rule=openai.endpoint status=403`,
		`api-refused host=api.openai.com method="post" path="/v1beta/files\"" rule=openai.endpoint status=403`,
		`api-changed host=api.anthropic.com path="/v1/messages" note="web_fetch allowed_domains trimmed to [\"x\"]"`,
		`credentials host=api.anthropic.com method=POST path="/v1/messages" status=200`,
	}, "\n")
	got := apiGateSummary(log, []string{"gemini.url_context"})
	for _, want := range []string{
		"the API rules gemini.url_context were off",
		"api.anthropic.com POST /v1/messages: rule anthropic.mcp_servers, 2 times; to allow it: AGENT_SANDBOX_API_ALLOW=anthropic.mcp_servers",
		"api.openai.com (a request that cannot be printed): rule openai.endpoint, 2 times",
		"trimmed a web fetch tool's domains to the allowlist in 1 request to api.anthropic.com",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "\x1b") {
		t.Error("an escape byte from a path reached the summary")
	}
	if apiGateSummary("", nil) != "" {
		t.Error("a summary for nothing")
	}
}

func TestLoginWarning(t *testing.T) {
	api := []allowlist.Entry{{Host: "api.anthropic.com", Port: 443}}
	key := []credential{{kind: credKindBySecret("anthropic-oauth"), host: "api.anthropic.com"}}
	for _, tc := range []struct {
		name    string
		s       sessionCredentials
		entries []allowlist.Entry
		cmd     []string
		warn    bool
	}{
		{"claude, inspected, no credential", sessionCredentials{}, api, []string{"claude"}, true},
		{"under a wildcard", sessionCredentials{}, []allowlist.Entry{{Host: "anthropic.com", Wildcard: true, Port: 443}}, []string{"claude", "-p", "x"}, true},
		{"the user's token", sessionCredentials{creds: key}, api, []string{"claude"}, false},
		{"passthrough", sessionCredentials{}, []allowlist.Entry{{Host: "api.anthropic.com", Port: 443, Passthrough: true}}, []string{"claude"}, false},
		{"handed in with --env", sessionCredentials{handed: []string{"api.anthropic.com"}}, api, []string{"claude"}, false},
		{"not allowed", sessionCredentials{}, nil, []string{"claude"}, false},
		{"--exec", sessionCredentials{}, api, []string{"bash"}, false},
	} {
		if got := loginWarning(tc.s, tc.entries, tc.cmd); (got != "") != tc.warn || tc.warn && !strings.Contains(got, "agent-sandbox secret set anthropic-oauth") {
			t.Errorf("%s: warning %q, want one: %v", tc.name, got, tc.warn)
		}
	}
}

func TestUnreadHosts(t *testing.T) {
	entries := []allowlist.Entry{{Host: "a.example", Port: 443}, {Host: "b.example", Port: 443, Passthrough: true}, {Host: "api.anthropic.com", Port: 443}}
	if got := unreadHosts(sessionCredentials{handed: []string{"api.anthropic.com", "api.openai.com"}}, entries); got != "passed unread, where a key the agent brings works: b.example (passthrough), api.anthropic.com (its key is passed in with --env)" {
		t.Errorf("unreadHosts = %q", got)
	}
	if got := unreadHosts(sessionCredentials{}, entries[:1]); got != "" {
		t.Errorf("nothing unread: %q", got)
	}
}

func TestRemovedSummary(t *testing.T) {
	log := strings.Join([]string{
		`inspect host=github.com method=POST path="/o/r.git/git-receive-pack" proto=HTTP/2.0 status=200 removed="authorization"`,
		`inspect host=github.com method=GET path="/x" proto=HTTP/1.1 status=200 removed="cookie,query:access_token"`,
		`inspect host=github.com method=GET path="/y" proto=HTTP/1.1 status=200 removed="-"`,
		`inspect host=api.anthropic.com method=POST path="/v1/messages" proto=HTTP/1.1 status=200 removed="x-api-key"`,
		`inspect host=evil\x1b[2J method=GET path="/" proto=HTTP/1.1 status=200 removed="authorization"`,
		`inspect refused sni="a credentials host=x" reason="not in the allowlist"`,
	}, "\n")
	creds := []credential{{kind: credKindBySecret("anthropic"), host: "api.anthropic.com"}}
	want := "agent-sandbox: the agent sent credentials of its own, which the router removed (it acts on allowed hosts anonymously or as you):\n" +
		"agent-sandbox:   github.com  2 requests (authorization, cookie, query:access_token): removed\n"
	if got := removedSummary(log, creds); got != want {
		t.Errorf("removedSummary =\n%s\nwant\n%s", got, want)
	}
	if got := removedSummary(`inspect host=a.example method=GET path="/" proto=HTTP/1.1 status=200 removed="-"`, nil); got != "" {
		t.Errorf("nothing removed: %q", got)
	}
}
