//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCredentialsRecipes is issue 14 for the recipes' agents: the real
// Codex and Gemini CLIs in the recipe images (recipes/, built by make
// e2e-images) get their answers through the router, which adds the user's
// key in the header each API takes; the agent holds a placeholder. Each API
// host is a *.test name the fake answers with its fake Responses or Gemini
// API, verified against the test CA, and the session's allowlist names it
// alone: the CLIs reach nothing else. Nothing in the home is set up first:
// the images themselves point the CLIs at the router (recipes/codex/codex
// and recipes/gemini/gemini, the scripts in front of them).
func TestCredentialsRecipes(t *testing.T) {
	runSecRows(t, recipeCredRows...)
}

// recipeAPI is what a recipe's row needs to know of its agent and API.
type recipeAPI struct {
	recipe   string // recipes/<recipe>, the image localhost/agent-sandbox-<recipe>:test
	provider string // in AGENT_SANDBOX_API_HOSTS
	host     string // the *.test API host the fake answers
	port     int    // the credential proxy's port in the pod
	env      string // the user's key in the launcher's environment
	prefix   string // the key's usual start
	// baseVar and base are the agent's base URL; keyVar and placeholder
	// what it holds instead of the key.
	baseVar, base, keyVar, placeholder string
	// header is how the fake logs the header the API takes the key in,
	// %s the key.
	header string
	// others are the fake's log fields of the other credential headers,
	// which must arrive empty (the router empties the API's own).
	others []string
	// ask is the agent's command that prints its answer to "Say hello.";
	// own runs it with the agent's own key, $KEY.
	ask, own string
	answer   string
	// logs are what the fake must have logged: the answer streamed.
	logs []string
	// gated are what the exit report must say the API gate refused.
	gated []string
	// send is cred.py's request to a base URL ($1), with the agent's own
	// key ($KEY) in each credential header.
	send string
	// mayAsk are the hosts the CLI asks for besides its API, which the
	// row's allowlist leaves out: it must answer without them.
	mayAsk []string
	// extra are the row's own probes, with their checks.
	extra func(t *testing.T) ([]probe, func(res map[string]probeResult) string)
}

var recipeCredRows = []secRow{
	{29, "codex exec under --agent codex (its image built from the recipe on first use, its API host allowed by the preset) gets its answer from the OpenAI API through the router, which adds the user's key (Authorization: Bearer); the key is nowhere the agent can look; a key of the agent's own is replaced", func(t *testing.T, ev *evidence) { recipeCredRow(t, ev, codexAPI) }},
	{30, "gemini -p under AGENT_SANDBOX_AGENT=gemini (its image built from the recipe on first use, its API host allowed by the preset) gets its answer streamed from the Gemini API through the router, which adds the user's key (x-goog-api-key); the key is nowhere the agent can look; a key of the agent's own is replaced, one in the query refused", func(t *testing.T, ev *evidence) { recipeCredRow(t, ev, geminiAPI) }},
}

// askTimeout bounds one question to a CLI inside the session.
const askTimeout = "timeout 120 "

var codexAPI = recipeAPI{
	recipe: "codex", provider: "openai", host: "openai-api.allowed.test", port: 82,
	env: "OPENAI_API_KEY", prefix: "sk-proj-",
	baseVar: "OPENAI_BASE_URL", base: "https://openai-api.allowed.test/v1", keyVar: "OPENAI_API_KEY", placeholder: "sk-agent-sandbox-placeholder",
	header: `authorization="Bearer %s"`, others: []string{`x-api-key=""`, `x-goog-api-key=""`},
	// Outside a git repository; stdin is /dev/null (probeScript).
	ask: askTimeout + `codex exec --skip-git-repo-check 'Say hello.'`,
	// codex exec sends CODEX_API_KEY as its key.
	own:    `CODEX_API_KEY="$KEY" ` + askTimeout + `codex exec --skip-git-repo-check 'Say hello.'`,
	answer: "Hello from the fake Responses API.",
	logs:   []string{"api responses streamed events="},
	// Its WebSocket attempt, which the API gate refuses (it cannot read a
	// WebSocket's frames): Codex falls back to HTTPS by itself.
	gated: []string{"openai-api.allowed.test GET /v1/responses: rule openai.endpoint"},
	// Its curated plugins, fetched at each start (recipes/codex/allowed-hosts).
	mayAsk: []string{"github.com", "api.github.com", "chatgpt.com"},
	send:   `python3 -S ./cred.py send "$1/responses" '{"model":"gpt-fake","input":"hi"}' "authorization: Bearer $KEY"`,
	extra: func(t *testing.T) ([]probe, func(map[string]probeResult) string) {
		// What the README tells users for Codex's interactive start,
		// which asks for a sign-in otherwise: log in once with the
		// placeholder the agent holds. codex exec then sends it.
		return []probe{{"login", `printenv OPENAI_API_KEY | codex login --with-api-key && ` + askTimeout + `codex exec --skip-git-repo-check 'Say hello.'`}},
			func(res map[string]probeResult) string {
				wantOK(t, res, "login", "API key saved", "Hello from the fake Responses API.")
				return "logged in with the placeholder (as the README says for its interactive start), codex exec answered again"
			}
	},
}

var geminiAPI = recipeAPI{
	recipe: "gemini", provider: "gemini", host: "gemini-api.allowed.test", port: 83,
	env: "GEMINI_API_KEY", prefix: "AIza",
	baseVar: "GOOGLE_GEMINI_BASE_URL", base: "https://gemini-api.allowed.test", keyVar: "GEMINI_API_KEY", placeholder: "agent-sandbox-placeholder",
	header: `x-goog-api-key="%s"`, others: []string{`authorization=""`, `x-api-key=""`},
	// --skip-trust: the launch dir is new to it.
	ask:    askTimeout + `gemini --skip-trust -p 'Say hello.'`,
	own:    `GEMINI_API_KEY="$KEY" ` + askTimeout + `gemini --skip-trust -p 'Say hello.'`,
	answer: "Hello from the fake Gemini API.",
	logs:   []string{"api gemini streamed chunks=", "method=streamGenerateContent sse=true"},
	send:   `python3 -S ./cred.py send "$1/v1beta/models/gemini-fake:generateContent" '{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}' "x-goog-api-key: $KEY" "authorization: Bearer $KEY"`,
	extra: func(t *testing.T) ([]probe, func(map[string]probeResult) string) {
		// The API takes a key in the query too: the router refuses that.
		query := newNonce(t)
		return []probe{{"query", `python3 -S ./cred.py send "$GOOGLE_GEMINI_BASE_URL/v1beta/models/gemini-fake:generateContent?key=` + query + `" '{}'`}},
			func(res map[string]probeResult) string {
				wantOK(t, res, "query", "status=403")
				wantNeverArrived(t, query, "a key of the agent's own in the query")
				return "a request with ?key=<nonce> got 403 and never arrived"
			}
	},
}

// recipeCredRow runs the recipe's agent in one session with the user's key
// on the host: it asks its CLI (in a new home), asks it again with a key
// of its own, sends a request with a key of its own to the router's port
// directly, and looks for the user's key; then it looks the same way for
// its own key, which it holds in its environment and a file (opened path).
func recipeCredRow(t *testing.T, ev *evidence, a recipeAPI) {
	key := a.prefix + newNonce(t)
	own, direct, opened := newNonce(t), newNonce(t), newNonce(t)
	router := `http://$(awk '/^nameserver/{print $2; exit}' /etc/resolv.conf):` + strconv.Itoa(a.port) + a.basePath()
	send := func(base, k string) string {
		return `set -- "` + base + `"; KEY=` + k + "; " + a.send
	}
	extra, check := a.extra(t)
	probes := append([]probe{
		{"env", `echo "base=$` + a.baseVar + ` key=$` + a.keyVar + `"`},
		{"ask", a.ask},
		{"own", "KEY=" + own + "; " + a.own},
		{"router", send(router, direct)},
	}, extra...)
	probes = append(probes,
		probe{"look", "python3 -S ./cred.py look " + halves(key)},
		// Opened path: the agent's own key, in its environment and a
		// file of its home, is found by the same look.
		probe{"look-own", `export AGENT_KEY=` + opened + `; printf %s "$AGENT_KEY" > ~/own-key; python3 -S ./cred.py look ` + halves(opened)})
	mark := markFakeLog()
	// The agent by name (issue 24): its image built from its recipe on
	// first use, its API host allowed for the session by its preset, not
	// by the allowlist, which names nothing. Codex by --agent, Gemini by
	// AGENT_SANDBOX_AGENT.
	allowlist := writeAllowlist(t, "# empty: the agent's preset adds its API host\n")
	env := map[string]string{a.env: key, "AGENT_SANDBOX_ALLOWLIST": allowlist}
	var args []string
	if a.recipe == "codex" {
		args = []string{"--agent", a.recipe}
	} else {
		env["AGENT_SANDBOX_AGENT"] = a.recipe
	}
	h := holdSession(t, sessionOpts{
		Trace: true,
		Dir:   credDir(t),
		Args:  args,
		Env:   credEnvFor(a.provider, a.host, env),
		// Up to three CLI runs and a look through a 2 GB image.
		Timeout: 8 * time.Minute,
	}, probes...)

	wantOK(t, h.res, "env", "base="+a.base+" key="+a.placeholder)
	for _, p := range []string{"ask", "own"} {
		wantOK(t, h.res, p, a.answer)
	}
	wantOK(t, h.res, "router", "status=200")
	extraEv := check(h.res)
	want := append([]string{fmt.Sprintf(a.header, key)}, a.others...)
	n := wantOnlyHeaderAt(t, mark, a.host, []string{a.placeholder}, want...)
	for _, l := range a.logs {
		if !strings.Contains(mark.since(), l) {
			t.Errorf("the fake never logged %q:\n%s", l, mark.since())
		}
	}
	for _, g := range a.gated {
		if !strings.Contains(h.stderr, g) {
			t.Errorf("the exit report does not list the API gate's refusal %q:\n%s", g, indent(h.stderr))
		}
	}
	for _, k := range []string{own, direct} {
		wantNeverArrived(t, k, "a key of the agent's own")
	}
	files := h.wantKeyOutOfReach(t, "look", key, a.host)
	if p := h.res["look-own"]; !strings.Contains(p.Out, "env=1") || strings.Contains(p.Out, "proc=0") || !strings.Contains(p.Out, "/home/claude/own-key") {
		t.Errorf("opened path: the look did not find the agent's own key in its environment, /proc and ~/own-key: %s", p)
	}
	if want := "agent " + a.recipe + ": allowed for this session, not written to your allowlist: " + a.host; !strings.Contains(h.stderr, want) {
		t.Errorf("the start does not say the preset added %s:\n%s", a.host, indent(h.stderr))
	}
	if b, _ := os.ReadFile(allowlist); strings.Contains(string(b), a.host) {
		t.Errorf("the preset's host was written to the allowlist:\n%s", b)
	}
	if !strings.Contains(h.specs, `"localhost/agent-sandbox-`+a.recipe+`:dev"`) {
		t.Errorf("the agent does not run the preset's image localhost/agent-sandbox-%s:dev", a.recipe)
	}
	summary := regexp.MustCompile(`(?m)^agent-sandbox:   ` + regexp.QuoteMeta(a.host) + `  ` + a.env + ` from your environment, [1-9][0-9]* requests?$`)
	if !summary.MatchString(h.stderr) {
		t.Errorf("the exit summary does not say the router added %s for %s:\n%s", a.env, a.host, indent(h.stderr))
	}
	// The session allows the API host alone: anything else the CLI
	// asked for is listed when the session ends.
	blocked := blockedHosts(h.stderr)
	for _, b := range blocked {
		if !slices.Contains(a.mayAsk, b) {
			t.Errorf("%s reached for %s, beyond its API:\n%s", a.recipe, b, indent(h.stderr))
		}
	}
	if strings.Contains(h.stderr, "not a host name") || strings.Contains(h.stderr, "not host names") {
		t.Errorf("%s asked for names that are not host names:\n%s", a.recipe, indent(h.stderr))
	}
	others := "no other host asked for"
	if len(blocked) > 0 {
		others = "it answered with " + strings.Join(blocked, ", ") + " blocked"
	}
	if !t.Failed() {
		ev.add("%s printed the fake's streamed answer in a new home, and again with its own key; every request that arrived (%d) had %s, none a placeholder or the agent's keys (sent by the CLI, and to the router's :%d directly); %s; "+
			"the key absent from env, /proc/*/environ and cmdline, %s readable files (home included, after the CLI ran), the router's and forwarder's logs, podman inspect and the launcher's output; the same look found the agent's own key (opened path); summary names %s; %s",
			a.recipe, n, strings.Join(want, " "), a.port, extraEv, files, a.host, others)
	}
}

// blockedHosts are the hosts the launcher's exit summary says the
// allowlist blocked.
func blockedHosts(stderr string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^agent-sandbox:   \S+ .* allow it: agent-sandbox allow (\S+)$`).FindAllStringSubmatch(stderr, -1) {
		out = append(out, m[1])
	}
	return out
}

// basePath is what follows the port in the agent's base URL.
func (a recipeAPI) basePath() string {
	_, path, _ := strings.Cut(strings.TrimPrefix(a.base, "https://"), "/")
	if path == "" {
		return ""
	}
	return "/" + path
}
