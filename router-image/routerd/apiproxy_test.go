package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// upstreamRecorder stands in for nginx's credential proxy on its unix
// socket: it records what arrives and streams an answer in two parts.
type upstreamRecorder struct {
	mu   sync.Mutex
	got  []string
	body []string
}

func (u *upstreamRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.got = append(u.got, r.Method+" "+r.URL.RequestURI()+" host="+r.Host)
	u.body = append(u.body, string(b))
	u.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, "data: one\n\n")
	w.(http.Flusher).Flush()
	time.Sleep(300 * time.Millisecond)
	fmt.Fprint(w, "data: two\n\n")
}

func TestAPIGateRefusesSendsOnAndStreams(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "proxy.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	up := &upstreamRecorder{}
	go http.Serve(ln, up)
	defer ln.Close()
	listen := freePort(t)
	policy := apiPolicy{Routes: []apiRoute{{Provider: "anthropic", Host: "api.anthropic.com", Listen: listen, Upstream: sock}}, Hosts: []string{"wild.test"}, Wildcards: []string{"wild.test"}}
	b, _ := json.Marshal(policy)
	path := filepath.Join(dir, apiPolicyFile)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	var outMu sync.Mutex
	g := newAPIGate(path, writerFunc(func(p []byte) (int, error) { outMu.Lock(); defer outMu.Unlock(); return out.Write(p) }), log.New(io.Discard, "", 0))
	if err := g.load(); err != nil {
		t.Fatal(err)
	}
	defer g.close()
	post := func(path, body string) *http.Response {
		resp, err := http.Post("http://"+listen+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// Refused: the connector; never arrives, logged without body.
	resp := post("/v1/messages", `{"model":"m","messages":[],"mcp_servers":[{"url":"https://attacker.example"}]}`)
	msg, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 403 || !strings.Contains(string(msg), `"permission_error"`) || !strings.Contains(string(msg), "anthropic.mcp_servers") {
		t.Errorf("refusal: %d %s", resp.StatusCode, msg)
	}
	// A path that matches only once decoded is not the one sent on.
	resp = post("/v1%2Fmessages", `{"model":"m","messages":[]}`)
	if resp.StatusCode != 403 {
		t.Errorf("an escaped path: %d, want 403", resp.StatusCode)
	}
	// Sent on, with the web fetch tool trimmed, answered as a stream whose
	// first event arrives before the second is written.
	start := time.Now()
	resp = post("/v1/messages", `{"model":"m","messages":[],"tools":[{"type":"web_fetch_20250910","name":"web_fetch","allowed_domains":["attacker.example","wild.test"]}]}`)
	first := make([]byte, len("data: one\n\n"))
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "data: one\n\n" {
		t.Fatalf("first event %q: %v", first, err)
	}
	if took := time.Since(start); took > 250*time.Millisecond {
		t.Errorf("the first event took %s: the answer was buffered", took)
	}
	rest, _ := io.ReadAll(resp.Body)
	if string(rest) != "data: two\n\n" {
		t.Errorf("rest %q", rest)
	}
	up.mu.Lock()
	got, bodies := up.got, up.body
	up.mu.Unlock()
	if len(got) != 1 || got[0] != "POST /v1/messages host=api.anthropic.com" || !strings.Contains(bodies[0], `"allowed_domains":["wild.test"]`) {
		t.Errorf("arrived upstream: %q %q", got, bodies)
	}
	outMu.Lock()
	log := out.String()
	outMu.Unlock()
	for _, want := range []string{`api-refused host=api.anthropic.com method="POST" path="/v1/messages" rule=anthropic.mcp_servers status=403`, "api-changed host=api.anthropic.com", "trimmed"} {
		if !strings.Contains(log, want) {
			t.Errorf("router log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "attacker.example") {
		t.Errorf("the router log carries the body:\n%s", log)
	}
	// A route removed from the policy stops listening.
	if err := os.WriteFile(path, []byte(`{"routes":[],"hosts":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := g.load(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", listen, time.Second); err == nil {
		c.Close()
		t.Error("the removed route still listens")
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
