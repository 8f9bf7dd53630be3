//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Issue 21: no key the agent brings works on an allowlisted host. The
// router ends TLS for the allowlist's HTTPS names with a CA made for the
// session (its key only in routerd's memory), removes every credential the
// agent sends of its own, and passes a host marked passthrough unread.
// Two sessions run the same probes: one with the hosts inspected (the
// default), one with them marked passthrough (the opened path, where the
// agent's tokens arrive).

func TestInspect(t *testing.T) {
	runSecRows(t, inspectRows...)
}

var inspectRows = []secRow{
	{39, "an attacker's token in Authorization, in the URL, in a cookie, in each token header and in the query, sent by git push, PUT and POST, arrives without it (or is refused) on an inspected host; a cookie the host set is kept; with the host passthrough the same requests arrive with it", rowForeignCredentialsRemoved},
	{40, "anonymous git clone and downloads by curl, python, node and npm work over the inspected path with no flag (the agent trusts the session CA)", rowInspectedDownloads},
	{41, "the session CA's key is in no file the agent can read; no leaf for a name outside the allowlist; a Host header other than the TLS name is refused (421) and never arrives", rowCAKeyOutOfReach},
	{42, "a passthrough entry passes by SNI, unread: the client's own ClientHello reaches the host; an inspected one's never does", rowPassthroughBySNI},
	{43, "HTTP/2 and a WebSocket echo work through the inspecting proxy", rowInspectedH2WebSocket},
}

const (
	inspHost = "creds.allowed.test"
	passHost = "pass.allowed.test"
)

// tokenCase is one way an agent sends a credential of its own: shell is
// the probe (%[1]s the token, %[2]s the path nonce), refused says the
// request is refused rather than passed on without it, want is what its
// refusal prints.
type tokenCase struct {
	name, shell string
	refused     bool
	want        string
}

var tokenCases = []tokenCase{
	{"Authorization on a POST", `curl -sS --max-time 15 -X POST -d '{"title":"x"}' -H "Authorization: Bearer %[1]s" https://` + inspHost + `/api/issues/%[2]s`, false, ""},
	{"userinfo in the URL on a PUT", `curl -sS --max-time 15 -X PUT --data-binary @/etc/hostname https://agent:%[1]s@` + inspHost + `/pkg/%[2]s`, false, ""},
	{"a cookie the agent made", `curl -sS --max-time 15 -H "Cookie: session=%[1]s" https://` + inspHost + `/c/%[2]s`, false, ""},
	{"access_token in the query", `curl -sS --max-time 15 "https://` + inspHost + `/q/%[2]s?access_token=%[1]s&page=2"`, false, ""},
	{"private_token in the query", `curl -sS --max-time 15 "https://` + inspHost + `/q/%[2]s?private_token=%[1]s"`, false, ""},
	{"X-Api-Key", `curl -sS --max-time 15 -X POST -d x -H "X-Api-Key: %[1]s" https://` + inspHost + `/h/%[2]s`, false, ""},
	{"Private-Token", `curl -sS --max-time 15 -X POST -d x -H "Private-Token: %[1]s" https://` + inspHost + `/h/%[2]s`, false, ""},
	{"Job-Token", `curl -sS --max-time 15 -X POST -d x -H "Job-Token: %[1]s" https://` + inspHost + `/h/%[2]s`, false, ""},
	{"X-Auth-Token", `curl -sS --max-time 15 -X POST -d x -H "X-Auth-Token: %[1]s" https://` + inspHost + `/h/%[2]s`, false, ""},
	{"X-Access-Token", `curl -sS --max-time 15 -X POST -d x -H "X-Access-Token: %[1]s" https://` + inspHost + `/h/%[2]s`, false, ""},
	{"X-Goog-Api-Key", `curl -sS --max-time 15 -X POST -d x -H "X-Goog-Api-Key: %[1]s" https://` + inspHost + `/h/%[2]s`, false, ""},
	{"Proxy-Authorization", `curl -sS --max-time 15 -X POST -d x -H "Proxy-Authorization: Basic %[1]s" https://` + inspHost + `/h/%[2]s`, false, ""},
	{"git push with a token header", `git -C wc -c http.extraHeader="Authorization: Bearer %[1]s" push -q https://` + gitHost + `/%[3]s HEAD:refs/heads/%[2]s`, false, ""},
	// The fake asks this repository for credentials (401), the only thing
	// that makes git send a URL's userinfo; the router removes them, so
	// the second try is refused as well.
	{"git push with the token in the URL", `GIT_TERMINAL_PROMPT=0 git -C wc push -q https://agent:%[1]s@` + gitHost + `/` + gitAuthRepo + ` HEAD:refs/heads/%[2]s`, true, "Authentication failed"},
}

// inspSuite runs the two sessions every row reads, once.
type inspSuite struct {
	once     sync.Once
	repo     string // the bare repository anonymous pushes go to
	tokens   []string
	paths    []string
	inspect  inspRun
	opened   inspRun
	extras   map[string]string // the other rows' nonces, by name
	keyProbe string            // the CA key search's output
}

type inspRun struct {
	res  map[string]probeResult
	r    *launcher
	log  string // the fake's log of this session
	took time.Duration
}

var insp inspSuite

// inspWS sends one WebSocket message and prints the echo (standard library
// only): ws.py HOST MESSAGE.
const inspWS = `import base64, os, socket, ssl, struct, sys
host, msg = sys.argv[1], sys.argv[2]
ctx = ssl.create_default_context(); ctx.set_alpn_protocols(["http/1.1"])
s = ctx.wrap_socket(socket.create_connection((host, 443), timeout=10), server_hostname=host)
key = base64.b64encode(os.urandom(16)).decode()
s.sendall(("GET /ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (host, key)).encode())
f = s.makefile("rb")
status = f.readline()
if b" 101 " not in status: sys.exit("no 101: %r" % status)
while f.readline() not in (b"\r\n", b""): pass
def send(op, data):
    m = os.urandom(4)
    s.sendall(bytes([0x80 | op, 0x80 | len(data)]) + m + bytes(b ^ m[i % 4] for i, b in enumerate(data)))
def recv():
    b0, b1 = f.read(2); n = b1 & 0x7f
    if n == 126: n = struct.unpack("!H", f.read(2))[0]
    return b0 & 0x0f, f.read(n)
send(0x1, msg.encode()); op, data = recv()
print("echo=" + data.decode())
send(0x8, struct.pack("!H", 1000)); s.close()
`

// inspKeySearch looks through every file the agent can read for a private
// key whose public key is the session CA's (the last certificate of the
// system bundle, where routerd puts it), or, given a certificate, that
// certificate's: keysearch.sh [CERT].
const inspKeySearch = `cert=${1:-}
if [ -z "$cert" ]; then
  cert=$(mktemp); awk '/BEGIN CERTIFICATE/{b=""} {b=b $0 "\n"} /END CERTIFICATE/{last=b} END{printf "%s", last}' /etc/ssl/certs/ca-certificates.crt > "$cert"
fi
openssl x509 -in "$cert" -noout -subject || exit 3
want=$(openssl x509 -in "$cert" -noout -pubkey | openssl pkey -pubin -outform DER | sha256sum)
n=0; found=""
# Not /usr: the image's own files, the same in every session.
for f in $(grep -rlIs --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev --exclude-dir=usr -e 'PRIVATE KEY-----' / 2>/dev/null); do
  awk -v d="$(mktemp -d)" '/-----BEGIN .*PRIVATE KEY-----/{k++; o=d "/" k ".pem"} o{print > o} /-----END .*PRIVATE KEY-----/{o=""} END{print d}' "$f" > /tmp/keys.dir
  d=$(tail -n1 /tmp/keys.dir)
  for k in "$d"/*.pem; do
    [ -s "$k" ] || continue
    n=$((n+1))
    got=$(openssl pkey -in "$k" -pubout -outform DER 2>/dev/null | sha256sum)
    [ "$got" = "$want" ] && found="$found $f"
  done
done
grep -lIs 'PRIVATE KEY-----' /proc/self/environ /proc/1/environ >/dev/null 2>&1 && found="$found environ"
if [ -n "$found" ]; then echo "found the key in:$found"; exit 1; fi
echo "no matching key among $n private keys"
`

func (s *inspSuite) run(t *testing.T) {
	s.once.Do(func() {
		s.extras = map[string]string{}
		for _, name := range []string{"ua", "ub", "clone", "curl", "python", "node", "npm", "cookie", "front", "alpn-inspect", "alpn-pass", "h2", "ws"} {
			s.extras[name] = newNonce(t)
		}
		s.extras["cookie-value"] = newNonce(t)
		for range tokenCases {
			s.tokens = append(s.tokens, newNonce(t))
			s.paths = append(s.paths, newNonce(t))
		}
		// A repository anonymous pushes and clones go to.
		src := gitProject(t)
		url, _ := servedRepo(t, src)
		s.repo = filepath.Base(url)
		s.inspect = s.session(t, "")
		s.opened = s.session(t, " passthrough")
	})
}

// session runs every probe with the rows' hosts marked mode ("" inspected,
// " passthrough" the opened path).
func (s *inspSuite) session(t *testing.T, mode string) inspRun {
	dir := launchDir(t)
	for name, body := range map[string]string{"ws.py": inspWS, "keysearch.sh": inspKeySearch} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	x := s.extras
	probes := []probe{{"setup", "git init -q -b main wc && git -C wc -c user.email=a@b -c user.name=a commit -q --allow-empty -m x && echo ok"}}
	for i, c := range tokenCases {
		probes = append(probes, probe{c.name, fmt.Sprintf(c.shell, s.tokens[i], s.paths[i], s.repo)})
	}
	probes = append(probes,
		probe{"a cookie the host set", fmt.Sprintf(`curl -sS --max-time 15 -c jar "https://%s/set-cookie?name=sid&value=%s" && curl -sS --max-time 15 -b jar https://%s/after/%s`, inspHost, x["cookie-value"], inspHost, x["cookie"])},
		probe{"git clone", fmt.Sprintf("git clone -q https://%s/%s clone-%s && git -C clone-%s log --oneline | head -1", gitHost, s.repo, x["clone"], x["clone"])},
		probe{"curl", fmt.Sprintf("curl -sS --max-time 15 https://%s/dl/%s", inspHost, x["curl"])},
		probe{"python", fmt.Sprintf(`python3 -c 'import urllib.request; print(urllib.request.urlopen("https://%s/py/%s", timeout=15).read().decode())'`, inspHost, x["python"])},
		probe{"node", fmt.Sprintf(`node -e 'fetch("https://%s/node/%s").then(r => r.text()).then(t => console.log(t), e => { console.error(String(e.cause || e)); process.exit(1) })'`, inspHost, x["node"])},
		// The fake answers text, not a package document: npm fails after
		// TLS, which is what this shows.
		probe{"npm", fmt.Sprintf(`npm view --registry https://%s/npm/%s/ left-pad version 2>&1; true`, inspHost, x["npm"])},
		probe{"ca key search", "sh ./keysearch.sh"},
		// The search finds a key it is shown: it is not blind.
		probe{"key search control", "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ctl.key -out ctl.pem -subj /CN=ctl -days 1 2>/dev/null && sh ./keysearch.sh ctl.pem; true"},
		probe{"leaf for a name outside", "openssl s_client -connect 127.0.0.1:443 -servername outside-" + x["ua"] + ".denied.test </dev/null 2>&1"},
		probe{"leaf for an allowed name", "openssl s_client -connect 127.0.0.1:443 -servername " + inspHost + " </dev/null 2>&1 | grep -E 'issuer|Verify return code'"},
		probe{"a Host other than the TLS name", fmt.Sprintf(`curl -sS --max-time 15 -o /dev/null -w '%%{http_code}' -H "Host: front-%s.denied.test" https://%s/%s`, x["front"], inspHost, x["front"])},
		probe{"alpn to an inspected host", fmt.Sprintf("openssl s_client -connect %s:443 -servername %s -alpn %s </dev/null 2>&1 | grep -i alpn", inspHost, inspHost, x["alpn-inspect"])},
		probe{"alpn to a passthrough host", fmt.Sprintf("openssl s_client -connect %s:443 -servername %s -alpn %s </dev/null 2>&1 | grep -i alpn", passHost, passHost, x["alpn-pass"])},
		probe{"http/2", fmt.Sprintf("curl -sS --max-time 15 --http2 -o /dev/null -w '%%{http_version}' https://%s/h2/%s", inspHost, x["h2"])},
		probe{"websocket", fmt.Sprintf("python3 -S ./ws.py %s %s", inspHost, x["ws"])},
	)
	allow := fmt.Sprintf("%s%s\n%s%s\n%s passthrough\n", inspHost, mode, gitHost, mode, passHost)
	mark := markFakeLog()
	start := time.Now()
	res, r := probeSession(t, sessionOpts{Dir: dir, Allowlist: allow, Timeout: 4 * time.Minute}, probes...)
	took := time.Since(start)
	settleFakeLog(t, "the inspecting proxy's session"+mode)
	if p := res["setup"]; p.RC != 0 {
		t.Fatalf("the probes' repository: %s", p)
	}
	return inspRun{res: res, r: r, log: mark.since(), took: took}
}

// linesWith are log's lines holding s.
func linesWith(log, s string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(strings.ToLower(l), strings.ToLower(s)) {
			out = append(out, l)
		}
	}
	return out
}

func rowForeignCredentialsRemoved(t *testing.T, ev *evidence) {
	insp.run(t)
	in, op := insp.inspect, insp.opened
	for i, c := range tokenCases {
		tok, path := insp.tokens[i], insp.paths[i]
		p := in.res[c.name]
		switch {
		case c.refused:
			if p.RC == 0 || !strings.Contains(p.Out, c.want) {
				t.Errorf("%s: want it refused with %q: %s", c.name, c.want, p)
			}
		case p.RC != 0:
			t.Errorf("%s: the request failed: %s", c.name, p)
		case len(linesWith(in.log, path)) == 0:
			t.Errorf("%s: the request (nonce %s) never reached the fake: the path is broken", c.name, path)
		}
		if got := linesWith(in.log, tok); len(got) > 0 {
			t.Errorf("LEAK: %s: the agent's token reached the host:\n%s", c.name, strings.Join(got, "\n"))
		}
		if strings.Contains(in.r.Stderr()+in.r.Stdout(), tok) && !strings.Contains(p.Out, tok) {
			t.Errorf("LEAK: %s: the token is in the launcher's output", c.name)
		}
		// Opened path: passed unread, the same request carries it.
		if got := linesWith(op.log, tok); len(got) == 0 {
			t.Errorf("%s: with the host passthrough the token never arrived: the row is blind (%s)", c.name, op.res[c.name])
		}
	}
	if n := len(linesWith(in.log, "git auth-required")); n < 2 {
		t.Errorf("the push to the repository that wants credentials was not asked twice (%d 401s): git never sent the URL's userinfo", n)
	}
	if got := linesWith(op.log, "git push repo=\"/"+gitAuthRepo+"\""); len(got) == 0 {
		t.Errorf("with the host passthrough the push with the token in the URL did not land: %s", op.res[tokenCases[len(tokenCases)-1].name])
	}
	// The host's own cookie goes back to it.
	if got := linesWith(in.log, insp.extras["cookie"]); len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), "sid="+insp.extras["cookie-value"]) {
		t.Errorf("the cookie the host set was not sent back to it:\n%s\n%s", strings.Join(got, "\n"), in.res["a cookie the host set"])
	}
	for _, want := range []string{"the agent sent credentials of its own, which the router removed", inspHost + "  ", gitHost + "  ", "authorization", "cookie", "private-token", "query:access_token"} {
		if !strings.Contains(strings.ToLower(in.r.Stderr()), strings.ToLower(want)) {
			t.Errorf("the exit report lacks %q:\n%s", want, indent(in.r.Stderr()))
		}
	}
	if strings.Contains(op.r.Stderr(), "which the router removed") {
		t.Errorf("with the hosts passthrough the report still says credentials were removed:\n%s", indent(op.r.Stderr()))
	}
	if !t.Failed() {
		ev.add("%d ways (curl POST/PUT, git push by header and by URL, cookie, query, %d token headers): each request arrived without the token or was refused (401 twice), token nonces in no fake log line nor the launcher's output; the host's own cookie kept; exit report names %s and %s; with the hosts passthrough every token arrived (opened path)",
			len(tokenCases), 7, inspHost, gitHost)
	}
}

func rowInspectedDownloads(t *testing.T, ev *evidence) {
	insp.run(t)
	in := insp.inspect
	x := insp.extras
	wantOK(t, in.res, "git clone")
	for _, name := range []string{"curl", "python", "node"} {
		wantOK(t, in.res, name, "hello from "+inspHost)
	}
	for _, name := range []string{"git clone", "curl", "python", "node", "npm"} {
		out := strings.ToLower(in.res[name].Out)
		for _, bad := range []string{"certificate", "self-signed", "self signed", "unable_to", "ssl"} {
			if strings.Contains(out, bad) {
				t.Errorf("%s: a TLS error (%q): %s", name, bad, in.res[name])
			}
		}
	}
	for _, name := range []string{"curl", "python", "node", "npm"} {
		if len(linesWith(in.log, x[name])) == 0 {
			t.Errorf("%s: its request (nonce %s) never reached the fake: %s", name, x[name], in.res[name])
		}
	}
	if len(linesWith(in.log, "/"+insp.repo+"/info/refs")) == 0 {
		t.Errorf("the clone never reached the fake's git server")
	}
	if !t.Failed() {
		ev.add("git clone, curl, python3 urllib, node fetch and npm reached the fake through the inspecting proxy with no CA flag and no TLS error (pip is not in the image)")
	}
}

func rowCAKeyOutOfReach(t *testing.T, ev *evidence) {
	insp.run(t)
	in, op := insp.inspect, insp.opened
	x := insp.extras
	search, control := in.res["ca key search"], in.res["key search control"]
	if search.RC != 0 || !strings.Contains(search.Out, "agent-sandbox session CA") || !strings.Contains(search.Out, "no matching key among") {
		t.Errorf("the search for the session CA's key: %s", search)
	}
	if !strings.Contains(control.Out, "found the key in:") || !strings.Contains(control.Out, "ctl.key") {
		t.Errorf("the search does not find a key it is shown (ctl.key): it is blind: %s", control)
	}
	outside := in.res["leaf for a name outside"]
	if outside.RC == 0 || strings.Contains(outside.Out, "BEGIN CERTIFICATE") || strings.Contains(outside.Out, "session CA") {
		t.Errorf("a name outside the allowlist got a certificate: %s", outside)
	}
	if p := in.res["leaf for an allowed name"]; !strings.Contains(p.Out, "agent-sandbox session CA") || !strings.Contains(p.Out, "Verify return code: 0") {
		t.Errorf("an allowed name's leaf is not the session CA's, verified: %s", p)
	}
	if p := in.res["a Host other than the TLS name"]; p.Out != "421" {
		t.Errorf("a Host header other than the TLS name: want 421: %s", p)
	}
	if got := linesWith(in.log, x["front"]); len(got) > 0 {
		t.Errorf("LEAK: the fronted request reached the fake:\n%s", strings.Join(got, "\n"))
	}
	if got := linesWith(op.log, x["front"]); len(got) == 0 {
		t.Errorf("with the host passthrough the fronted request never arrived: the row is blind: %s", op.res["a Host other than the TLS name"])
	}
	if !t.Failed() {
		ev.add("no private key the agent can read (files, environ) is the session CA's (%s; the same search finds a key it is shown); openssl got no certificate for outside-*.denied.test and a session-CA leaf for %s; Host: front-*.denied.test on %s got 421 and never arrived, while passthrough it did (opened path)",
			strings.TrimSpace(lastLine(search.Out)), inspHost, inspHost)
	}
}

func rowPassthroughBySNI(t *testing.T, ev *evidence) {
	insp.run(t)
	in := insp.inspect
	x := insp.extras
	if got := linesWith(in.log, x["alpn-pass"]); len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), "tls hello") {
		t.Errorf("the passthrough host's ClientHello (ALPN %s) did not reach the fake: %s", x["alpn-pass"], in.res["alpn to a passthrough host"])
	}
	if got := linesWith(in.log, x["alpn-inspect"]); len(got) > 0 {
		t.Errorf("the inspected host's ClientHello reached the fake unread:\n%s", strings.Join(got, "\n"))
	}
	if !t.Failed() {
		ev.add("an ALPN nonce in the client's hello reached the fake for %s (passthrough) and not for %s (the router's own hello)", passHost, inspHost)
	}
}

func rowInspectedH2WebSocket(t *testing.T, ev *evidence) {
	insp.run(t)
	in := insp.inspect
	x := insp.extras
	if p := in.res["http/2"]; p.RC != 0 || p.Out != "2" {
		t.Errorf("curl --http2 did not speak HTTP/2 to the router: %s", p)
	}
	if len(linesWith(in.log, x["h2"])) == 0 {
		t.Errorf("the HTTP/2 request never reached the fake")
	}
	wantOK(t, in.res, "websocket", "echo="+x["ws"])
	if got := linesWith(in.log, "websocket message"); len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), x["ws"]) {
		t.Errorf("the WebSocket message never reached the fake:\n%s", strings.Join(got, "\n"))
	}
	if !t.Failed() {
		ev.add("curl --http2 got HTTP/2 from the router and reached the fake; a WebSocket message went to the fake's echo and back")
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
