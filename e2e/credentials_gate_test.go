//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 20: the API the router holds the key for is no way out. The
// router's API gate passes the endpoints the agents use, reads the bodies
// that carry tools, refuses what makes the provider's servers reach out
// where the agent says (the MCP connector, URL fetch tools, content by
// URL, credential minting), trims a web fetch tool to the allowlist, and
// fails closed on a body it cannot read.

var gateRows = []secRow{
	{38, "the API gate: MCP connectors, url_context, endpoints off the list, credential minting, $key queries, gzip and malformed bodies and a batch carrying mcp_servers are refused with the rule and never arrive; web_fetch arrives trimmed; with a rule allowed by name the same request arrives", rowAPIGate},
}

const (
	openaiHost = "openai-api.allowed.test"
	geminiHost = "gemini-api.allowed.test"
)

// gatePy sends one request: gate.py NAME METHOD URL BODY [ENCODING]; the
// nonce rides in the query, where the fake logs it.
const gatePy = `import gzip, http.client, os, sys, urllib.parse
name, method, url, body = sys.argv[1:5]
enc = sys.argv[5] if len(sys.argv) > 5 else ""
u = urllib.parse.urlsplit(url)
c = (http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection)(u.hostname, u.port, timeout=30)
h = {"content-type": "application/json", "anthropic-version": "2023-06-01",
     "x-api-key": os.environ.get("ANTHROPIC_AUTH_TOKEN", ""), "authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", ""),
     "x-goog-api-key": os.environ.get("GEMINI_API_KEY", "")}
data = body.encode()
if enc == "gzip":
    data = gzip.compress(data)
    h["content-encoding"] = "gzip"
c.request(method, u.path + ("?" + u.query if u.query else ""), data if method != "GET" else None, h)
r = c.getresponse()
print("status=%d" % r.status)
print(r.read().decode(errors="replace")[:400])
`

type gateCase struct {
	name, provider, method, path, body, enc string
	// rule refuses it ("" arrives); status is the refusal's.
	rule   string
	status int
}

func gateCases(nonce func() string) []gateCase {
	msg := `{"model":"claude-fake","max_tokens":8,"messages":[{"role":"user","content":"hi"}]`
	resp := `{"model":"gpt-fake","input":"hi"`
	gem := `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]`
	return []gateCase{
		{"plain messages", "anthropic", "POST", "/v1/messages", msg + `}`, "", "", 0},
		{"the MCP connector", "anthropic", "POST", "/v1/messages", msg + `,"mcp_servers":[{"type":"url","url":"https://attacker.test/sse","name":"x"}]}`, "", "anthropic.mcp_servers", 403},
		{"web_fetch to any host", "anthropic", "POST", "/v1/messages", msg + `,"tools":[{"type":"web_fetch_20250910","name":"web_fetch","allowed_domains":["attacker.test","x.wild.test"]}]}`, "", "", 0},
		{"an image by URL", "anthropic", "POST", "/v1/messages", `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://attacker.test/i.png"}}]}]}`, "", "anthropic.url_source", 403},
		{"a batch carrying mcp_servers", "anthropic", "POST", "/v1/messages/batches", `{"requests":[{"custom_id":"a","params":` + msg + `,"mcp_servers":[{"type":"url","url":"https://attacker.test"}]}}]}`, "", "anthropic.mcp_servers", 403},
		{"an endpoint off the list", "anthropic", "POST", "/v1/files", `{}`, "", "anthropic.endpoint", 403},
		{"a gzip-encoded body", "anthropic", "POST", "/v1/messages", msg + `}`, "gzip", "anthropic.encoding", 415},
		{"a malformed body", "anthropic", "POST", "/v1/messages", `{"model":`, "", "anthropic.parse", 400},
		{"plain responses", "openai", "POST", "/v1/responses", resp + `}`, "", "", 0},
		{"an mcp tool", "openai", "POST", "/v1/responses", resp + `,"tools":[{"type":"mcp","server_label":"x","server_url":"https://attacker.test/mcp"}]}`, "", "openai.mcp", 403},
		{"minting a client secret", "openai", "POST", "/v1/realtime/client_secrets", `{}`, "", "openai.endpoint", 403},
		{"plain generateContent", "gemini", "POST", "/v1beta/models/gemini-fake:generateContent", gem + `}`, "", "", 0},
		{"url_context", "gemini", "POST", "/v1beta/models/gemini-fake:generateContent", gem + `,"tools":[{"url_context":{}}]}`, "", "gemini.url_context", 403},
		{"an ephemeral token", "gemini", "POST", "/v1alpha/auth_tokens", `{}`, "", "gemini.endpoint", 403},
		{"$key in the query", "gemini", "POST", "/v1beta/models/gemini-fake:generateContent?$key=AIza-agent", gem + `}`, "", "gemini.query", 403},
	}
}

func rowAPIGate(t *testing.T, ev *evidence) {
	keys := map[string]string{"anthropic": "sk-ant-api03-" + newNonce(t), "openai": "sk-proj-" + newNonce(t), "gemini": "AIza" + newNonce(t)}
	env := map[string]string{
		"AGENT_SANDBOX_API_HOSTS":   "anthropic=" + credHost + ",openai=" + openaiHost + ",gemini=" + geminiHost,
		"AGENT_SANDBOX_UPSTREAM_CA": filepath.Join(harness.fakeDir, "ca.pem"),
		"ANTHROPIC_API_KEY":         keys["anthropic"], "OPENAI_API_KEY": keys["openai"], "GEMINI_API_KEY": keys["gemini"],
	}
	allow := "allowed.test passthrough\n*.wild.test passthrough\n" + credHost + "\n" + openaiHost + "\n" + geminiHost + "\n"
	base := map[string]string{"anthropic": "$ANTHROPIC_BASE_URL", "openai": "${OPENAI_BASE_URL%/v1}", "gemini": "$GOOGLE_GEMINI_BASE_URL"}
	hostOf := map[string]string{"anthropic": credHost, "openai": openaiHost, "gemini": geminiHost}
	run := func(extra map[string]string) (map[string]probeResult, *launcher, []gateCase, []string) {
		dir := launchDir(t)
		if err := os.WriteFile(filepath.Join(dir, "gate.py"), []byte(gatePy), 0o644); err != nil {
			t.Fatal(err)
		}
		cases := gateCases(nil)
		var probes []probe
		var nonces []string
		for _, c := range cases {
			n := newNonce(t)
			nonces = append(nonces, n)
			sep := "?"
			if strings.Contains(c.path, "?") {
				sep = "&"
			}
			url := base[c.provider] + strings.ReplaceAll(c.path, "$", `\$`) + sep + "n=" + n
			probes = append(probes, probe{c.name, fmt.Sprintf(`python3 -S ./gate.py x %s "%s" %s %s`, c.method, url, shellQuote(c.body), c.enc)})
		}
		e := map[string]string{}
		for k, v := range env {
			e[k] = v
		}
		for k, v := range extra {
			e[k] = v
		}
		res, r := probeSession(t, sessionOpts{Dir: dir, Allowlist: allow, Env: e}, probes...)
		return res, r, cases, nonces
	}

	mark := markFakeLog()
	res, r, cases, nonces := run(nil)
	settleFakeLog(t, "the API gate's requests")
	log := mark.since()
	refused, arrived := 0, 0
	for i, c := range cases {
		p := res[c.name]
		var lines []string
		for _, l := range strings.Split(log, "\n") {
			if strings.Contains(l, nonces[i]) {
				lines = append(lines, l)
			}
		}
		if c.rule != "" {
			if !strings.Contains(p.Out, fmt.Sprintf("status=%d", c.status)) || !strings.Contains(p.Out, "rule "+c.rule) || !strings.Contains(p.Out, "AGENT_SANDBOX_API_ALLOW="+c.rule) {
				t.Errorf("%s: want %d naming rule %s and how to allow it: %s", c.name, c.status, c.rule, p)
			}
			if len(lines) > 0 {
				t.Errorf("LEAK: %s: a refused request reached the API host:\n%s", c.name, strings.Join(lines, "\n"))
			}
			if want := hostOf[c.provider] + " POST "; !strings.Contains(r.Stderr(), want) || !strings.Contains(r.Stderr(), "rule "+c.rule) {
				t.Errorf("%s: the exit report does not list the refusal (%q, rule %s):\n%s", c.name, want, c.rule, indent(r.Stderr()))
			}
			refused++
			continue
		}
		if !strings.Contains(p.Out, "status=200") {
			t.Errorf("%s: want 200 through the gate: %s", c.name, p)
		}
		var keyed bool
		for _, l := range lines {
			keyed = keyed || strings.Contains(l, keys[c.provider])
		}
		if len(lines) == 0 || !keyed {
			t.Errorf("%s: did not arrive with the user's key:\n%s", c.name, strings.Join(lines, "\n"))
		}
		if c.name == "web_fetch to any host" && !strings.Contains(strings.Join(lines, "\n"), `tools="web_fetch_20250910[x.wild.test]"`) {
			t.Errorf("web_fetch did not arrive trimmed to the allowlist:\n%s", strings.Join(lines, "\n"))
		}
		arrived++
	}
	if !strings.Contains(r.Stderr(), "trimmed a web fetch tool's domains") {
		t.Errorf("the exit report does not say the web fetch tool was trimmed:\n%s", indent(r.Stderr()))
	}

	// Opened path: with every rule that can be turned off turned off by
	// name, the same connector, URL and endpoint requests arrive.
	mark = markFakeLog()
	res2, r2, cases, nonces := run(map[string]string{"AGENT_SANDBOX_API_ALLOW": "anthropic.mcp_servers,anthropic.url_source,anthropic.endpoint,openai.mcp,openai.endpoint,gemini.url_context,gemini.endpoint"})
	settleFakeLog(t, "the opened gate's requests")
	log = mark.since()
	opened := 0
	for i, c := range cases {
		if c.rule == "" || c.status != 403 || c.rule == "gemini.query" {
			continue
		}
		if !strings.Contains(log, nonces[i]) {
			t.Errorf("opened path: %s did not arrive with its rule allowed: %s", c.name, res2[c.name])
		}
		opened++
	}
	if !strings.Contains(r2.Stderr(), "are off (AGENT_SANDBOX_API_ALLOW)") || !strings.Contains(r2.Stderr(), "were off for this session") {
		t.Errorf("opened path: the session did not say at start and at exit that rules were off:\n%s", indent(r2.Stderr()))
	}
	if !t.Failed() {
		ev.add("%d refused (403/415/400 naming the rule and AGENT_SANDBOX_API_ALLOW), none reached the fake, each listed at exit; %d plain requests arrived with the user's key; web_fetch arrived trimmed to x.wild.test; "+
			"with the rules allowed by name, %d of the refused requests arrived (opened path), and start and exit said the rules were off", refused, arrived, opened)
	}
}
