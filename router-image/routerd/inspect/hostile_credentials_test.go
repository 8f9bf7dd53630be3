package inspect

// The hostile review's probes of the strip (issue 21): each test asserts
// what the goal asks ("no key the agent brings works on any allowlisted
// host"), so a FAIL is a finding and a PASS is a check found sound.

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// recordBodies is an upstream handler that keeps every request body.
type bodyLog struct {
	mu     sync.Mutex
	bodies []string
}

func (b *bodyLog) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		b.mu.Lock()
		b.bodies = append(b.bodies, string(body))
		b.mu.Unlock()
		if next != nil {
			next.ServeHTTP(w, r)
		}
	})
}

func (b *bodyLog) all() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.bodies, "\n")
}

// Finding: header names that carry a credential on real hosts but are not
// in credentialHeaders pass through the inspected path unchanged.
func TestHostileHeaderTableMisses(t *testing.T) {
	u := startUpstream(t, echoHandler())
	e := startEnv(t, defaultConfig(u))
	// Each: a header some host takes as a credential (who, in the comment).
	misses := []string{
		"Ocp-Apim-Subscription-Key",  // Azure API Management, Cognitive Services, Translator, Bing
		"X-Auth-Key",                 // Cloudflare API (global key, with X-Auth-Email)
		"X-Nuget-Apikey",             // NuGet push (www.nuget.org/api/v2/package)
		"Apikey",                     // Supabase (with Authorization), Kong key-auth default
		"X-Shopify-Access-Token",     // Shopify Admin API
		"X-Consul-Token",             // Consul
		"X-Nomad-Token",              // Nomad
		"Circle-Token",               // CircleCI API v2
		"X-Algolia-Api-Key",          // Algolia
		"X-Honeycomb-Team",           // Honeycomb ingest
		"Statsig-Api-Key",            // Statsig (statsig.anthropic.com takes anyone's key)
		"Dd-Application-Key",         // Datadog (with Dd-Api-Key)
		"X-Serverless-Authorization", // Cloud Run: ID token in place of Authorization
		"X-Forwarded-Authorization",  // ESPv2 / API gateways pass it to the backend
		"Cf-Access-Client-Secret",    // Cloudflare Access service tokens
		"X-Figma-Token",              // Figma
		"X-Redmine-Api-Key",          // Redmine
		"X-Insert-Key",               // New Relic insights insert
		"X-License-Key",              // New Relic ingest
		"X-Registry-Auth",            // Docker Engine API: registry credentials
		"Authentication",             // misspelt Authorization, read by some APIs
		"X-Csrftoken-Bearer",         // (any *-Bearer / *-Token / *-Key name)
	}
	h := http.Header{}
	for i, name := range misses {
		h[name] = []string{nonce(200 + i)}
	}
	resp, _ := get(t, e.client(false), "https://allowed.test/h", h)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	got := u.last(t)
	var passed []string
	for _, name := range misses {
		if got.Header.Get(name) != "" {
			passed = append(passed, name)
		}
	}
	if len(passed) > 0 {
		t.Errorf("credential headers that reached the upstream (%d of %d): %s", len(passed), len(misses), strings.Join(passed, ", "))
	}
}

// Finding: query parameters that carry a credential but are not in
// credentialQuery (or only under another spelling) are kept.
func TestHostileQueryMisses(t *testing.T) {
	cases := []struct {
		host, query, who string
	}{
		{"maps.googleapis.com", "$key=K", "Google reads $key as key (the API gate refuses it; the strip does not)"},
		{"storage.googleapis.com", "%24key=K", "the same, escaped"},
		{"storage.googleapis.com", "X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Credential=attacker%40p.iam.gserviceaccount.com%2F20250101%2Fauto%2Fstorage%2Fgoog4_request&X-Goog-Date=20250101T000000Z&X-Goog-Expires=900&X-Goog-SignedHeaders=host&X-Goog-Signature=ab", "GCS V4 signed URL minted offline with the attacker's service account key: PUT into the attacker's bucket"},
		{"storage.googleapis.com", "GoogleAccessId=a%40p.iam.gserviceaccount.com&Expires=1&Signature=ab", "GCS V2 signed URL"},
		{"s3.amazonaws.com", "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAATTACKER%2F20250101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20250101T000000Z&X-Amz-Expires=900&X-Amz-SignedHeaders=host&X-Amz-Signature=ab", "S3 presigned PUT minted with the attacker's keys"},
		{"s3.amazonaws.com", "X-Amz-Security-Token=T", "the session token the header table removes, in the query"},
		{"s3.amazonaws.com", "AWSAccessKeyId=AKIA&Expires=1&Signature=ab", "S3 SigV2 query auth"},
		{"acct.blob.core.windows.net", "sv=2022-11-02&sp=cw&sig=ab", "Azure SAS"},
		{"x.firebaseio.com", "auth=T", "Firebase Realtime Database REST"},
		{"api.cognitive.microsofttranslator.com", "subscription-key=K", "Azure Cognitive Services"},
		{"o1.ingest.sentry.io", "sentry_key=K&sentry_version=7", "Sentry envelope endpoint"},
		{"browser-intake-datadoghq.com", "dd-api-key=K", "Datadog browser intake"},
		{"content.dropboxapi.com", "authorization=Bearer%20T", "Dropbox: the Authorization header as a URL parameter"},
		{"circleci.com", "circle-token=T", "CircleCI"},
		{"packagist.org", "username=a&apiToken=T", "Packagist update API"},
		{"app.example.com", "access.token=T", "PHP turns . and space in a name into _: access_token"},
		{"app.example.com", "access+token=T", "the same with a space"},
		{"app.example.com", "access[token=T", "PHP turns a lone [ into _"},
		{"app.example.com", "access_token[]=T", "Rack/PHP arrays of the name"},
		{"app.example.com", "api-key=K", "hyphenated api key"},
		{"app.example.com", "x-api-key=K", "the header's name as a parameter"},
		{"app.example.com", "jwt=eyJhbGciOi", "Atlassian Connect and many apps: a JWT in the query"},
	}
	var kept []string
	for _, c := range cases {
		r := httptest.NewRequest("GET", "https://"+c.host+"/x?"+c.query, nil)
		strip(r, c.host, newJar(), false)
		if r.URL.RawQuery == c.query {
			kept = append(kept, fmt.Sprintf("%s ?%s (%s)", c.host, c.query, c.who))
		}
	}
	if len(kept) > 0 {
		t.Errorf("%d of %d credential queries kept unchanged:\n  %s", len(kept), len(cases), strings.Join(kept, "\n  "))
	}
}

func TestHostileLoginWithAttackersPasswordBecomesSession(t *testing.T) {
	var acted []string
	var mu sync.Mutex
	u := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/session":
			_ = r.ParseForm()
			if r.PostForm.Get("password") == nonce(400) {
				http.SetCookie(w, &http.Cookie{Name: "user_session", Value: "ATTACKER-SESSION", Path: "/", Secure: true, HttpOnly: true})
			}
		case "/upload":
			if c, err := r.Cookie("user_session"); err == nil {
				mu.Lock()
				acted = append(acted, c.Value)
				mu.Unlock()
			}
		}
	}))
	e := startEnv(t, defaultConfig(u))
	c := e.client(false)
	resp, err := c.PostForm("https://allowed.test/session", url.Values{"login": {"attacker"}, "password": {nonce(400)}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var sess string
	for _, ck := range resp.Cookies() {
		if ck.Name == "user_session" {
			sess = ck.Value
		}
	}
	if sess == "" {
		t.Fatal("no session cookie came back to the agent")
	}
	get(t, c, "https://allowed.test/upload", http.Header{"Cookie": {"user_session=" + sess}})
	mu.Lock()
	defer mu.Unlock()
	if len(acted) > 0 {
		t.Errorf("after a login with a password the agent brought, the host took a request as the attacker (user_session=%s): the jar kept the cookie the login set", acted[0])
	}
}

// Finding: a WebSocket handshake carries a credential in
// Sec-WebSocket-Protocol, which is not removed: OpenAI's Realtime API
// (subprotocol openai-insecure-api-key.KEY), Kubernetes
// (base64url.bearer.authorization.k8s.io.TOKEN), Deepgram (token, KEY).
func TestHostileWebSocketSubprotocolCarriesKey(t *testing.T) {
	u := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Protocol: realtime\r\n\r\n")
		_ = brw.Flush()
	}))
	e := startEnv(t, defaultConfig(u))
	c, err := e.handshake("allowed.test", "http/1.1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(c, "GET /v1/realtime?model=gpt-realtime HTTP/1.1\r\nHost: allowed.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"+
		"Sec-WebSocket-Protocol: realtime, openai-insecure-api-key.sk-"+nonce(500)+", base64url.bearer.authorization.k8s.io."+nonce(501)+"\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if p := u.last(t).Header.Get("Sec-Websocket-Protocol"); strings.Contains(p, nonce(500)) || strings.Contains(p, nonce(501)) {
		t.Errorf("a key in Sec-WebSocket-Protocol reached the upstream: %q", p)
	}
}

// Hardening: the jar keeps a cookie value with ", " in it as the host set
// it, and passes the pair back whole. A server that splits Cookie on
// commas too (RFC 2965 parsers: Tomcat's legacy processor, Jetty's
// RFC2965 mode) reads a second cookie from it. Only a host that reflects
// the agent's input into a Set-Cookie value makes this a way in.
func TestHostileJarKeepsCommaValues(t *testing.T) {
	j := newJar()
	j.remember("allowed.test", []string{`return_to=/x, user_session=ATTACKER; Path=/`})
	kept, _ := j.filter("allowed.test", []string{`return_to=/x, user_session=ATTACKER`})
	if strings.Contains(kept, "user_session=ATTACKER") {
		t.Errorf("kept %q: a comma-splitting server reads user_session=ATTACKER", kept)
	}
}
