//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/agent-sandbox/agent-sandbox/internal/testpty"
)

// TestCredentials is issue 14: the user's API key never enters the
// sandbox. The router adds it to the agent's requests to the API host, the
// agent holds a placeholder. The API host is a *.test name (through
// AGENT_SANDBOX_API_HOSTS) that the harness's fake answers with its fake
// Messages API, verified against the test CA (AGENT_SANDBOX_UPSTREAM_CA).
// Every key is a nonce; rows follow the evidence rule: where it must not
// be, it is looked for, and beside it an opened path shows the look finds
// it.
func TestCredentials(t *testing.T) {
	runSecRows(t, append(credRows, gateRows...)...)
}

var credRows = []secRow{
	{21, "claude -p gets its answer streamed through the router, which adds the user's API key (x-api-key) or OAuth token (Authorization: Bearer); the agent holds placeholders", rowClaudeThroughProxy},
	{22, "the injected key is nowhere the agent can look: its environment, /proc/*/environ and cmdline, any file it can read, the router's and forwarder's logs, the container specs", rowKeyOutOfReach},
	{23, "a request the agent sends with its own key arrives with the user's instead, to the API host by name and to the router directly; SSE passes unbuffered", rowAgentKeyReplaced},
	{24, "a request straight to the API host by name, with the agent's own key, is inspected and arrives through the API gate with the user's key instead; without a credential a passthrough host passes it unread", rowDirectTLSClosed},
	{25, "a key stored with `agent-sandbox secret set` is injected; a stored file mode 0644 refuses the session with chmod 600", rowStoredSecret},
	{26, "interactive claude in a terminal starts with no login screen and no question about the key, and answers a typed prompt through the router", rowInteractiveClaude},
}

// credHost is the API host the rows inject for: the fake answers it.
const credHost = "anthropic-api.allowed.test"

const (
	placeholderKey   = "sk-ant-api03-agent-sandbox-placeholder"
	placeholderToken = "sk-ant-oat01-agent-sandbox-placeholder"
)

// credAllowlist allows the API host and a plain control host.
// credAllowlist passes credHost by SNI when it gets no credential (the
// opened path of row 22), as before the inspecting proxy.
const credAllowlist = "allowed.test passthrough\n" + credHost + " passthrough\n"

// credEnv is the launcher environment of a credential row: the API host
// and the CA its certificate is verified with, plus extra.
func credEnv(extra map[string]string) map[string]string {
	return credEnvFor("anthropic", credHost, extra)
}

// credEnvFor is credEnv for the provider's API at host.
func credEnvFor(provider, host string, extra map[string]string) map[string]string {
	env := map[string]string{
		"AGENT_SANDBOX_API_HOSTS":   provider + "=" + host,
		"AGENT_SANDBOX_UPSTREAM_CA": filepath.Join(harness.fakeDir, "ca.pem"),
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// credPy is the rows' helper inside the sandbox. Nonces are passed in two
// halves, so that no process's command line holds one.
const credPy = `import json, os, sys, time, http.client, urllib.parse

def look(a, b):
    n = (a + b).encode()
    print("env=%d" % sum(n in (k + "=" + v).encode() for k, v in os.environ.items()))
    hits = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        for f in ("environ", "cmdline"):
            try:
                with open("/proc/%s/%s" % (pid, f), "rb") as fh:
                    hits += n in fh.read()
            except OSError:
                pass
    print("proc=%d" % hits)
    files, scanned = [], 0
    for root, dirs, names in os.walk("/"):
        if root == "/":
            dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
        for name in names:
            p = os.path.join(root, name)
            try:
                if os.path.islink(p) or not os.path.isfile(p):
                    continue
                with open(p, "rb") as fh:
                    tail = b""
                    while True:
                        chunk = fh.read(1 << 20)
                        if not chunk:
                            break
                        if n in tail + chunk:
                            files.append(p)
                            break
                        tail = chunk[-len(n):]
                scanned += 1
            except OSError:
                pass
    print("files=%s scanned=%d" % (",".join(files) or "none", scanned))

def post(url, *headers):
    u = urllib.parse.urlsplit(url)
    c = (http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection)(u.hostname, u.port, timeout=30)
    h = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
    for kv in headers:
        k, v = kv.split(":", 1)
        h[k.strip()] = v.strip()
    c.request("POST", u.path.rstrip("/") + "/v1/messages", json.dumps({"model": "claude-fake", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}), h)
    r = c.getresponse()
    print("status=%d" % r.status)
    print(r.read().decode(errors="replace"))

def stream(url):
    u = urllib.parse.urlsplit(url)
    c = (http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection)(u.hostname, u.port, timeout=30)
    t0 = time.time()
    c.request("POST", u.path.rstrip("/") + "/v1/messages", json.dumps({"model": "claude-fake", "stream": True, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}),
              {"content-type": "application/json", "x-fake-pause-ms": "2000", "x-api-key": "placeholder"})
    r = c.getresponse()
    first = last = None
    for line in r:
        if line.startswith(b"event: content_block_delta") and first is None:
            first = time.time() - t0
        if line.startswith(b"event: message_stop"):
            last = time.time() - t0
    print("status=%d type=%s first_delta=%.2f message_stop=%.2f" % (r.status, r.getheader("content-type"), first or -1, last or -1))

def send(url, body, *headers):
    u = urllib.parse.urlsplit(url)
    c = (http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection)(u.hostname, u.port, timeout=30)
    h = {"content-type": "application/json"}
    for kv in headers:
        k, v = kv.split(":", 1)
        h[k.strip()] = v.strip()
    c.request("POST", u.path + ("?" + u.query if u.query else ""), body, h)
    r = c.getresponse()
    print("status=%d" % r.status)
    print(r.read().decode(errors="replace"))

{"look": look, "post": post, "send": send, "stream": stream}[sys.argv[1]](*sys.argv[2:])
`

// credDir is a launch dir holding the test CA and cred.py.
func credDir(t *testing.T) string {
	t.Helper()
	dir := launchDir(t)
	if err := os.WriteFile(filepath.Join(dir, "cred.py"), []byte(credPy), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// halves splits a nonce for cred.py.
func halves(n string) string {
	return n[:len(n)/2] + " " + n[len(n)/2:]
}

// apiLines are the fake's "api request" lines for the API host since m.
func apiLines(m logMark, host string) []string {
	var out []string
	for _, l := range strings.Split(m.since(), "\n") {
		if strings.Contains(l, " api request ") && strings.Contains(l, `host="`+host+`"`) {
			out = append(out, l)
		}
	}
	return out
}

// wantOnlyHeader asserts every request to the Anthropic API host since m
// arrived with want and none with the placeholders; it returns how many
// did.
func wantOnlyHeader(t *testing.T, m logMark, want ...string) int {
	t.Helper()
	return wantOnlyHeaderAt(t, m, credHost, []string{placeholderKey, placeholderToken}, want...)
}

// wantOnlyHeaderAt is wantOnlyHeader for the API at host, whose
// placeholders are given.
func wantOnlyHeaderAt(t *testing.T, m logMark, host string, placeholders []string, want ...string) int {
	t.Helper()
	got := apiLines(m, host)
	if len(got) == 0 {
		t.Errorf("no request reached the fake's API host %s: the path is broken or the harness is blind", host)
	}
	for _, l := range got {
		for _, w := range want {
			if !strings.Contains(l, w) {
				t.Errorf("an API request arrived without %s:\n%s", w, l)
			}
		}
		for _, p := range placeholders {
			if strings.Contains(l, p) {
				t.Errorf("LEAK: the agent's placeholder reached the API host:\n%s", l)
			}
		}
	}
	return len(got)
}

func rowClaudeThroughProxy(t *testing.T, ev *evidence) {
	for _, v := range []struct {
		name, env, value string
		want             []string
	}{
		{"API key", "ANTHROPIC_API_KEY", "sk-ant-api03-" + newNonce(t), nil},
		{"OAuth token", "CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-" + newNonce(t), nil},
	} {
		if v.env == "ANTHROPIC_API_KEY" {
			v.want = []string{`x-api-key="` + v.value + `"`, `authorization=""`}
		} else {
			// Claude Code sends the oauth beta itself; the router only
			// swaps the token.
			v.want = []string{`authorization="Bearer ` + v.value + `"`, `x-api-key=""`, `oauth-2025-04-20`}
		}
		mark := markFakeLog()
		r := runSession(t, sessionOpts{
			Dir:       credDir(t),
			Allowlist: credAllowlist,
			Env:       credEnv(map[string]string{v.env: v.value}),
			Cmd: []string{"sh", "-c", `echo "base=$ANTHROPIC_BASE_URL key=$ANTHROPIC_API_KEY auth=$ANTHROPIC_AUTH_TOKEN token=$CLAUDE_CODE_OAUTH_TOKEN nonessential=$CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"
timeout 120 claude -p 'Say hello.'`},
			Timeout: 3 * time.Minute,
		})
		wantCode(t, r, 0)
		if !strings.Contains(r.Stdout(), "Hello from the fake Messages API.") {
			t.Errorf("%s: claude -p did not print the fake's answer:\n%s", v.name, indent(r.Stdout()))
		}
		// An API key's placeholder is an auth token (credentials.go says
		// why); an OAuth token's is one.
		placeholder := "key= auth= token=" + placeholderToken
		if v.env == "ANTHROPIC_API_KEY" {
			placeholder = "key= auth=" + placeholderKey + " token="
		}
		if want := "base=https://" + credHost + " " + placeholder + " nonessential=1"; !strings.Contains(r.Stdout(), want) {
			t.Errorf("%s: the agent's environment is not %q:\n%s", v.name, want, indent(r.Stdout()))
		}
		n := wantOnlyHeader(t, mark, v.want...)
		if !strings.Contains(mark.since(), "api messages streamed") {
			t.Errorf("%s: the fake never streamed an answer:\n%s", v.name, mark.since())
		}
		summary := regexp.MustCompile(`(?m)^agent-sandbox:   ` + regexp.QuoteMeta(credHost) + `  ` + v.env + ` from your environment, [1-9][0-9]* requests?$`)
		if !summary.MatchString(r.Stderr()) {
			t.Errorf("%s: the exit summary does not say the router added %s for %s:\n%s", v.name, v.env, credHost, indent(r.Stderr()))
		}
		// Nothing else was asked for: no telemetry or error-report host.
		if strings.Contains(r.Stderr(), "blocked these hosts") {
			t.Errorf("%s: claude reached for hosts beyond its API:\n%s", v.name, indent(r.Stderr()))
		}
		if strings.Contains(r.Stdout()+r.Stderr(), v.value) {
			t.Errorf("LEAK: %s: the launcher printed the credential", v.name)
		}
		if !t.Failed() {
			ev.add("%s: claude -p printed the fake's streamed answer; every request that arrived (%d) had %s, none a placeholder; summary names %s", v.name, n, strings.Join(v.want, " "), credHost)
		}
	}
}

// heldSession is a session whose agent ran probes, then waited while the
// router's and forwarder's logs and the containers' specs were read.
type heldSession struct {
	res               map[string]probeResult
	stdout, stderr    string // the launcher's
	helperLogs, specs string
}

// holdSession runs probes in a session that stays up after them until the
// router's and forwarder's logs and podman inspect of its three containers
// have been read; o.Timeout must leave a minute for the end.
func holdSession(t *testing.T, o sessionOpts, probes ...probe) heldSession {
	t.Helper()
	hold := probe{"hold", `touch ./ready
i=0; while [ ! -e ./go ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done`}
	script := []string{"sh", "-c", probeScript(append(probes, hold)...)}
	if o.Args != nil {
		// The launcher's own options, then --exec.
		o.Args = append(append(slices.Clone(o.Args), "--exec"), script...)
	} else {
		o.Cmd = script
	}
	l := startLauncher(t, o)
	var h heldSession
	if l.waitFile("ready", o.Timeout-time.Minute) {
		name := l.sessionName()
		for _, c := range []string{name + "-router", name + "-forwarder"} {
			// Both streams: nginx and dnsmasq log to stderr.
			out, err := exec.Command("podman", "logs", c).CombinedOutput()
			if err != nil {
				t.Errorf("cannot read the %s log: %v", c, err)
			}
			h.helperLogs += string(out)
		}
		h.specs, _ = podman("inspect", name+"-router", name+"-forwarder", name+"-claude")
	} else {
		t.Error("the agent never got to the end of its probes")
	}
	if err := os.WriteFile(filepath.Join(l.Dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	l.wait()
	l.wantCode(0)
	h.stdout, h.stderr = l.Stdout(), l.Stderr()
	h.res = parseProbes(h.stdout)
	for _, p := range probes {
		if _, ok := h.res[p.Name]; !ok {
			t.Errorf("probe %q did not report", p.Name)
		}
	}
	return h
}

// wantKeyOutOfReach asserts that the probe look (cred.py look) found key
// nowhere the agent can look, and that the key is in none of the router's
// or forwarder's logs, the containers' specs or the launcher's output. The
// logs must show a request to host inspected and proxied with the key,
// or the look at them proves nothing. It returns how many files the
// look read.
func (h heldSession) wantKeyOutOfReach(t *testing.T, look, key, host string) string {
	t.Helper()
	out := h.res[look].Out
	for _, want := range []string{"env=0", "proc=0", "files=none"} {
		if !strings.Contains(out, want) {
			t.Errorf("LEAK: the agent found the key (want %s):\n%s", want, indent(out))
		}
	}
	if !strings.Contains(h.helperLogs, "credentials host="+host) || !strings.Contains(h.helperLogs, "inspect host="+host+" ") {
		t.Errorf("the router's or forwarder's log shows no proxied request or relay: the look at them proves nothing:\n%s", indent(h.helperLogs))
	}
	for what, s := range map[string]string{"router's or forwarder's log": h.helperLogs, "container specs (podman inspect)": h.specs, "launcher's output": h.stdout + h.stderr} {
		if strings.Contains(s, key) {
			t.Errorf("LEAK: the key is in the %s", what)
		}
	}
	if len(h.specs) < 1000 {
		t.Errorf("podman inspect said little (%d bytes): the look at the specs proves nothing", len(h.specs))
	}
	if m := regexp.MustCompile(`scanned=(\d+)`).FindStringSubmatch(out); m != nil {
		return m[1]
	}
	return "?"
}

func rowKeyOutOfReach(t *testing.T, ev *evidence) {
	key := "sk-ant-api03-" + newNonce(t)
	look := "python3 -S ./cred.py look " + halves(key)
	mark := markFakeLog()
	h := holdSession(t, sessionOpts{
		Trace:   true,
		Dir:     credDir(t),
		Env:     credEnv(map[string]string{"ANTHROPIC_API_KEY": key, "AGENT_SANDBOX_ALLOWLIST": writeAllowlist(t, credAllowlist)}),
		Timeout: 4 * time.Minute,
	},
		probe{"post", `python3 -S ./cred.py post "$ANTHROPIC_BASE_URL" "authorization: Bearer $ANTHROPIC_AUTH_TOKEN" | head -1`},
		probe{"look", look})
	wantOK(t, h.res, "post", "status=200")
	wantOnlyHeader(t, mark, `x-api-key="`+key+`"`)
	files := h.wantKeyOutOfReach(t, "look", key, credHost)

	// Opened path: passed with --env, the same looks find it, and the
	// launcher says the agent can read it.
	seen := "echo \"$ANTHROPIC_API_KEY\" > /var/tmp/seen; " + look
	r := runSession(t, sessionOpts{Dir: credDir(t), Allowlist: credAllowlist, Env: credEnv(map[string]string{"ANTHROPIC_API_KEY": key}),
		Args: []string{"--env", "ANTHROPIC_API_KEY", "--exec", "sh", "-c", seen}, Timeout: 4 * time.Minute})
	wantCode(t, r, 0)
	for _, want := range []string{"env=1", "files=/var/tmp/seen"} {
		if !strings.Contains(r.Stdout(), want) {
			t.Errorf("opened path: the look did not find a key passed with --env (want %s):\n%s", want, indent(r.Stdout()))
		}
	}
	if strings.Contains(r.Stdout(), "proc=0") {
		t.Errorf("opened path: no /proc/*/environ held the passed key:\n%s", indent(r.Stdout()))
	}
	if !strings.Contains(r.Stderr(), "ANTHROPIC_API_KEY goes into the sandbox (--env): the agent can read it") {
		t.Errorf("--env of a key gave no warning:\n%s", indent(r.Stderr()))
	}
	if !t.Failed() {
		ev.add("key absent from env, /proc/*/environ and cmdline, %s readable files under / (home volume and launch dir included), the router's and forwarder's logs (which show the proxied request), podman inspect of the three containers and the launcher's output; passed with --env, env, proc and files find it (opened path) and the launcher warns", files)
	}
}

func rowAgentKeyReplaced(t *testing.T, ev *evidence) {
	key := "sk-ant-api03-" + newNonce(t)
	att1, att2, att3, att4 := newNonce(t), newNonce(t), newNonce(t), newNonce(t)
	router := `http://$(awk '/^nameserver/{print $2; exit}' /etc/resolv.conf):81`
	mark := markFakeLog()
	res, r := probeSession(t, sessionOpts{Dir: credDir(t), Allowlist: credAllowlist, Env: credEnv(map[string]string{"ANTHROPIC_API_KEY": key})},
		probe{"loopback", `python3 -S ./cred.py post "$ANTHROPIC_BASE_URL" "x-api-key: sk-ant-api03-` + att1 + `" "authorization: Bearer ` + att2 + `"`},
		// Straight to the gate, past the inspecting proxy: nginx alone
		// takes the agent's credential headers out there.
		probe{"router", `python3 -S ./cred.py post "` + router + `" "x-api-key: sk-ant-api03-` + att3 + `" "authorization: Bearer ` + att4 + `"`},
		probe{"stream", `python3 -S ./cred.py stream "$ANTHROPIC_BASE_URL"`},
	)
	wantOK(t, res, "loopback", "status=200", "Hello from the fake Messages API.")
	wantOK(t, res, "router", "status=200")
	wantOK(t, res, "stream", "status=200", "type=text/event-stream")
	n := wantOnlyHeader(t, mark, `x-api-key="`+key+`"`, `authorization=""`)
	if n < 3 {
		t.Errorf("%d requests reached the fake, want 3", n)
	}
	for _, a := range []string{att1, att2, att3, att4} {
		wantNeverArrived(t, a, "the agent's own key")
	}
	var first, last float64
	if m := regexp.MustCompile(`first_delta=([0-9.]+) message_stop=([0-9.]+)`).FindStringSubmatch(res["stream"].Out); m != nil {
		fmt.Sscan(m[1], &first)
		fmt.Sscan(m[2], &last)
	}
	// The fake pauses 2s after the first delta: streamed, it came first.
	if last-first < 1.5 {
		t.Errorf("the first event came %.2fs before the last, want the fake's 2s pause between them: buffered", last-first)
	}
	if strings.Contains(r.Stdout()+r.Stderr(), key) {
		t.Error("LEAK: the launcher printed the key")
	}
	if !t.Failed() {
		ev.add("x-api-key and Authorization nonces sent to the API host by name (inspected) and to the router's :81: never arrived, the fake saw the user's key in all %d requests; SSE first delta %.2fs, last event %.2fs (the fake paused 2s between: unbuffered)", n, first, last)
	}
}

func rowDirectTLSClosed(t *testing.T, ev *evidence) {
	n1, n2, n3 := newNonce(t), newNonce(t), newNonce(t)
	key, agentKey := "sk-ant-api03-"+newNonce(t), "sk-ant-api03-"+newNonce(t)
	// Straight to the API host by name, with a key of the agent's own and
	// the sandbox's trust (no --cacert: the session CA is in the bundle).
	direct := func(n string) string {
		return `curl -sS --max-time 15 -X POST -H "x-api-key: ` + agentKey + `" -H "anthropic-version: 2023-06-01" -H "content-type: application/json" ` +
			`-d '{"model":"claude-fake","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}' "https://` + credHost + `/v1/messages?n=` + n + `"`
	}
	probes := []probe{
		{"by-name", direct(n1)},
		{"to-router", `curl -sS --max-time 15 --cacert ./ca.pem --resolve ` + credHost + `:443:$(awk '/^nameserver/{print $2; exit}' /etc/resolv.conf) https://` + credHost + `/` + n2},
		{"control", curlHTTPS("allowed.test", n3)},
	}
	mark := markFakeLog()
	res, r := probeSession(t, sessionOpts{Dir: credDir(t), Allowlist: credAllowlist, Env: credEnv(map[string]string{"ANTHROPIC_API_KEY": key})}, probes...)
	wantOK(t, res, "by-name", `"type":"message"`)
	// nginx's TLS server is not on the router's address at all.
	if p := res["to-router"]; p.RC != 7 || !strings.Contains(p.Out, "Could not connect") {
		t.Errorf("TLS to the router's address: want curl's exit 7 (refused at connect): %s", p)
	}
	wantArrived(t, n1, "a request straight to the API host, inspected")
	if got := linesWith(mark.since(), n1); !strings.Contains(strings.Join(got, "\n"), `x-api-key="`+key+`"`) {
		t.Errorf("the request straight to the API host did not arrive with the user's key:\n%s", strings.Join(got, "\n"))
	}
	wantNeverArrived(t, agentKey, "the agent's own key, straight to the API host")
	wantNeverArrived(t, n2, "TLS by SNI to the API host at the router's address")
	wantOK(t, res, "control", "hello from allowed.test")
	wantArrived(t, n3, "TLS to a plain allowed host")
	if !strings.Contains(r.Stderr(), credHost+"  ANTHROPIC_API_KEY from your environment, 1 request") {
		t.Errorf("the exit summary does not count the request:\n%s", indent(r.Stderr()))
	}
	// Opened path: without a credential the host (marked passthrough in
	// credAllowlist) passes by SNI, unread, and the agent's key arrives.
	n4 := newNonce(t)
	res, _ = probeSession(t, sessionOpts{Dir: credDir(t), Allowlist: credAllowlist, Env: credEnv(nil)},
		probe{"by-name", direct(n4)})
	wantOK(t, res, "by-name", `"type":"message"`)
	if got := linesWith(fakeLog(), n4); !strings.Contains(strings.Join(got, "\n"), `x-api-key="`+agentKey+`"`) {
		t.Errorf("opened path: the agent's key did not arrive by SNI:\n%s", strings.Join(got, "\n"))
	}
	if !t.Failed() {
		ev.add("curl straight to %s with the agent's own key: inspected, through the API gate, arrived with the user's key and never the agent's; TLS to the router's :443 refused; allowed.test passed in the same session; passthrough without a credential the same request arrived with the agent's key (opened path)", credHost)
	}
}

func rowStoredSecret(t *testing.T, ev *evidence) {
	key := "sk-ant-api03-" + newNonce(t)
	xdg := mkdir(t, "xdg-")
	set := startLauncher(t, sessionOpts{Args: []string{"secret", "set", "anthropic"}, BareEnv: true, CombinedOutput: true,
		Env: map[string]string{"XDG_CONFIG_HOME": xdg}, Stdin: strings.NewReader(key + "\n")}).wait()
	if set.Err != nil || strings.Contains(set.Stdout(), key) {
		t.Fatalf("secret set: %v\n%s", set.Err, set.Stdout())
	}
	path := filepath.Join(xdg, "agent-sandbox", "secrets", "anthropic")
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("stored secret %s: %v %v, want mode 0600", path, fi.Mode(), err)
	}
	list := startLauncher(t, sessionOpts{Args: []string{"secret", "list"}, BareEnv: true,
		Env: map[string]string{"XDG_CONFIG_HOME": xdg}}).wait()
	if list.Err != nil || list.Stdout() != "anthropic\n" {
		t.Errorf("secret list = %q, %v", list.Stdout(), list.Err)
	}

	mark := markFakeLog()
	res, r := probeSession(t, sessionOpts{Dir: credDir(t), Allowlist: credAllowlist, Env: credEnv(map[string]string{"XDG_CONFIG_HOME": xdg})},
		probe{"post", `python3 -S ./cred.py post "$ANTHROPIC_BASE_URL" "authorization: Bearer $ANTHROPIC_AUTH_TOKEN"`})
	wantOK(t, res, "post", "status=200")
	wantOnlyHeader(t, mark, `x-api-key="`+key+`"`)
	if !strings.Contains(r.Stderr(), credHost+"  the stored secret anthropic, 1 request") {
		t.Errorf("the exit summary does not name the stored secret:\n%s", indent(r.Stderr()))
	}

	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	before := podmanInventory(t)
	nonce := newNonce(t)
	r = runSession(t, sessionOpts{Dir: credDir(t), Allowlist: credAllowlist, Env: credEnv(map[string]string{"XDG_CONFIG_HOME": xdg}),
		Cmd: []string{"sh", "-c", "echo ran-" + nonce}})
	wantCode(t, r, 1)
	want := "agent-sandbox: " + path + " is open to other users (mode 0644); fix: chmod 600 " + path
	if strings.TrimSpace(r.Stderr()) != want {
		t.Errorf("stderr = %q, want the one line %q", r.Stderr(), want)
	}
	if strings.Contains(r.Stdout(), "ran-"+nonce) {
		t.Error("the agent ran with a 0644 secret")
	}
	wantNothingCreated(t, before, r)
	if !t.Failed() {
		ev.add("secret set stored it 0600 and list names it; a session added it (the fake saw it in x-api-key); chmod 644: exit 1 with %q, the agent never ran, nothing created", want)
	}
}

// writeAllowlist writes an allowlist file for a run whose Env names it.
func writeAllowlist(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(mkdir(t, "cfg-"), "allowed-hosts")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// screen collects what a terminal shows, with escape sequences and all
// white space removed: Claude Code's interface moves the cursor between
// words instead of printing spaces.
type screen struct {
	raw syncBuffer
}

var escapes = regexp.MustCompile(`\x1b(\[[0-9;?<>=]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[()][0-9A-Za-z]|[=>78])`)

func (s *screen) read(f *os.File) {
	buf := make([]byte, 4096)
	for {
		n, err := f.Read(buf)
		s.raw.Write(buf[:n])
		if err != nil {
			return
		}
	}
}

func (s *screen) text() string {
	t := escapes.ReplaceAllString(s.raw.String(), "")
	return strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || r == 0 {
			return -1
		}
		return r
	}, t)
}

// waitFor waits until the screen shows want (without white space).
func (s *screen) waitFor(want string, timeout time.Duration) bool {
	want = strings.Join(strings.Fields(want), "")
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if strings.Contains(s.text(), want) {
			return true
		}
	}
	return false
}

// notOnScreen are what Claude Code shows when it wants a login or has no
// way to the API.
var notOnScreen = []string{"Select login method", "Unable to connect to Anthropic services", "Detected a custom API key", "Do you want to use this API key", "Invalid API key", "Please run /login"}

func rowInteractiveClaude(t *testing.T, ev *evidence) {
	key := "sk-ant-api03-" + newNonce(t)
	home := homeVolume(t)
	dir := credDir(t)
	env := credEnv(map[string]string{"ANTHROPIC_API_KEY": key, "AGENT_SANDBOX_ALLOWLIST": writeAllowlist(t, credAllowlist)})
	interactive := func(what string, fn func(scr *screen, master *os.File)) *launcher {
		master, slave := testpty.Open(t)
		setSize(t, master, 40, 120)
		scr := &screen{}
		go scr.read(master)
		l := startLauncher(t, sessionOpts{Trace: true, Dir: dir, HomeVolume: home, PTY: slave, Env: env, Cmd: []string{"claude"}, Timeout: 3 * time.Minute})
		fn(scr, master)
		if !l.done() {
			// Ctrl-C twice is how one leaves Claude Code.
			_, _ = master.WriteString("\x03")
			// It asks for the second one before it takes it.
			scr.waitFor("again to exit", 5*time.Second)
			_, _ = master.WriteString("\x03")
		}
		l.wait()
		got := scr.text()
		for _, bad := range notOnScreen {
			if strings.Contains(got, strings.Join(strings.Fields(bad), "")) {
				t.Errorf("%s: claude showed %q", what, bad)
			}
		}
		if strings.Contains(got, key) {
			t.Errorf("LEAK: %s: the key was on the agent's terminal", what)
		}
		if t.Failed() {
			t.Logf("%s: the screen, without escapes and spaces:\n%s", what, got)
		}
		return l
	}

	// A new home: its first screen is the first-run setup's theme picker,
	// not a login, a failed connectivity check or a question about the key.
	interactive("first start", func(scr *screen, _ *os.File) {
		if !scr.waitFor("Choose the text style", 90*time.Second) {
			t.Errorf("first start: claude never showed its theme picker")
		}
		time.Sleep(2 * time.Second) // anything it would show next
	})

	// With that setup done and the launch dir trusted (as after a first
	// start), claude starts into its prompt and answers a typed message
	// through the router.
	seed := fmt.Sprintf(`{"hasCompletedOnboarding":true,"theme":"dark","projects":{%q:{"hasTrustDialogAccepted":true}}}`, dir)
	r := runSession(t, sessionOpts{Dir: dir, HomeVolume: home, Cmd: []string{"sh", "-c", "printf '%s' '" + seed + "' > ~/.claude.json"}})
	wantCode(t, r, 0)
	mark := markFakeLog()
	prompted, answered := false, false
	interactive("prompt", func(scr *screen, master *os.File) {
		// The prompt's status line.
		if prompted = scr.waitFor("shift+tab to cycle", 90*time.Second); !prompted {
			t.Errorf("claude never showed its prompt")
			return
		}
		_, _ = master.WriteString("Say hello.")
		// Enter once the prompt shows what was typed: sooner, Claude Code
		// takes the text and the Enter as one paste.
		if !scr.waitFor("Say hello.", 30*time.Second) {
			t.Errorf("claude never echoed the typed prompt")
			return
		}
		_, _ = master.WriteString("\r")
		if answered = scr.waitFor("Hello from the fake Messages API.", 90*time.Second); !answered {
			t.Errorf("claude never showed the fake's answer")
		}
	})
	n := wantOnlyHeader(t, mark, `x-api-key="`+key+`"`, `authorization=""`)
	if !t.Failed() {
		ev.add("first start in a new home: the theme picker, none of %q; after setup: the prompt, a typed message answered by the fake (requests with the user's key: %d)", notOnScreen, n)
	}
}
