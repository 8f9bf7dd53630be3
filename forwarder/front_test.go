package main

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// A front (FORWARDER_ROLE=front) takes one shape of pair, and only a
// front may listen on the pod's addresses.
func TestFrontRole(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	key := strings.Repeat("0f", 32)
	front := func(kv ...string) func(string) string {
		return env(append([]string{"FORWARDER_ROLE", "front", "LINK_KEY", key}, kv...)...)
	}
	fs, file, err := forwardsFromEnv(front("FORWARDS", "0.0.0.0:443=unix:/run/agent-sandbox-tls/tls.sock/tls 10.0.0.5:8080=127.0.0.1:8080"))
	if err != nil || file != nil || len(fs) != 2 {
		t.Fatalf("a front's pairs: %v, %v, %v", fs, file, err)
	}
	preamble := []byte("agent-sandbox-link " + key + "\n")
	for i, want := range []forward{
		{listen: ap("0.0.0.0:443"), socket: "/run/agent-sandbox-tls/tls.sock", tls: true, wantLink: preamble},
		{listen: ap("10.0.0.5:8080"), target: ap("127.0.0.1:8080"), wantLink: preamble},
	} {
		if !reflect.DeepEqual(fs[i], want) {
			t.Errorf("front pair %d = %+v, want %+v", i, fs[i], want)
		}
	}
	for _, tc := range []struct {
		env  func(string) string
		want []string
	}{
		// Without the key a front would let any pod in.
		{env("FORWARDER_ROLE", "front", "FORWARDS", "0.0.0.0:443=unix:/run/tls.sock/tls"), []string{"needs LINK_KEY"}},
		{env("FORWARDER_ROLE", "front", "LINK_KEY", "0f0f", "FORWARDS", "0.0.0.0:443=unix:/run/tls.sock/tls"), []string{"LINK_KEY is 4 characters", "64 hex digits"}},
		{env("FORWARDER_ROLE", "front", "LINK_KEY", strings.Repeat("0F", 32), "FORWARDS", "0.0.0.0:443=unix:/run/tls.sock/tls"), []string{"not lowercase hex"}},
		// A pair to loopback reaches its own port there, from the pod's
		// own address, and nothing else.
		{front("FORWARDS", "10.0.0.5:8080=127.0.0.1:22"), []string{"on the port it listens on (8080) alone"}},
		{front("FORWARDS", "10.0.0.5:8080=10.0.0.9:8080"), []string{"127.0.0.1 on the port"}},
		{front("FORWARDS", "0.0.0.0:8080=127.0.0.1:8080"), []string{"own IPv4 address, not 0.0.0.0"}},
		{front("FORWARDS", "127.0.0.1:8080=127.0.0.1:8080"), []string{"own IPv4 address, not 127.0.0.1"}},
		{front("FORWARDS", "10.0.0.5:8080=127.0.0.1:8080/tls"), []string{"bad target port"}},
		// Everything a front could be turned into: a way to an address, a
		// way around the screening, a narrower or wider listener.
		{front("FORWARDS", "0.0.0.0:443=10.0.0.1:443/tls"), []string{"bad target port"}},
		{front("FORWARDS", "0.0.0.0:443=10.0.0.1:443"), []string{"own IPv4 address, not 0.0.0.0"}},
		{front("FORWARDS", "0.0.0.0:443=unix:/run/tls.sock"), []string{"TLS alone"}},
		{front("FORWARDS", "0.0.0.0:443=unix:run/tls.sock/tls"), []string{"unix:/ABSOLUTE/PATH/tls"}},
		{front("FORWARDS", "0.0.0.0:443=unix:/run/../tls.sock/tls"), []string{"unix:/ABSOLUTE/PATH/tls"}},
		{front("FORWARDS", "[::]:443=unix:/run/tls.sock/tls"), []string{"0.0.0.0", "not ::"}},
		{front("FORWARDS", "127.0.0.1:443=unix:/run/tls.sock/tls"), []string{"not 127.0.0.1"}},
		{front("FORWARDS", "10.0.0.5:443=unix:/run/tls.sock/tls"), []string{"not 10.0.0.5"}},
		{front("FORWARDS", "router.test:443=unix:/run/tls.sock/tls"), []string{"bad listen IP"}},
		{front("FORWARDS", "0.0.0.0:443=unix:/a.sock/tls 0.0.0.0:443=unix:/b.sock/tls"), []string{"duplicate listen address"}},
		{front("FORWARDS", "0.0.0.0:443"), []string{"missing '='"}},
		{front("FORWARDS", "0.0.0.0:61000=127.0.0.1:8000/publish=p.localhost:1"), []string{"bad target address"}},
		{front(), []string{"FORWARDER_ROLE=front needs FORWARDS"}},
		{front("FORWARDS_FILE", "/etc/forwards"), []string{"not FORWARDS_FILE"}},
		{env("FORWARDER_ROLE", "router", "FORWARDS", "127.0.0.1:443=10.0.0.1:443"), []string{`FORWARDER_ROLE="router" is not a role`, "agent", "front"}},
		// The agent's role, named or not, stays on loopback.
		{env("FORWARDER_ROLE", "agent", "FORWARDS", "0.0.0.0:443=unix:/run/tls.sock/tls"), []string{"not loopback"}},
		{env("FORWARDS", "0.0.0.0:443=unix:/run/tls.sock/tls"), []string{"not loopback"}},
	} {
		_, _, err := forwardsFromEnv(tc.env)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("want an error with %q, got %v", w, err)
			}
		}
	}
	if fs, _, err := forwardsFromEnv(env("FORWARDER_ROLE", "agent", "FORWARDS", "127.0.0.1:443=10.0.0.1:443/tls")); err != nil || len(fs) != 1 || !fs[0].tls {
		t.Errorf("FORWARDER_ROLE=agent: %v %v", fs, err)
	}
}

// A front on the pod's addresses relays a plain hello to the socket and
// refuses one with ECH, as the agent's forwarder does.
func TestFrontScreensTheHello(t *testing.T) {
	path, accepted := unixUpstream(t)
	fs, err := parseFrontForwards("0.0.0.0:443=unix:" + path + "/tls")
	if err != nil {
		t.Fatal(err)
	}
	fs[0].listen = ap("0.0.0.0:0") // any free port
	addrs, log := startRelays(t, fs...)
	addr := strings.Replace(addrs[0], "0.0.0.0", "127.0.0.1", 1)
	addr = strings.Replace(addr, "[::]", "127.0.0.1", 1)
	echoed(t, addr, append(browserHello(), "application data"...))
	if accepted.Load() != 1 {
		t.Fatalf("the socket accepted %d connections, want 1", accepted.Load())
	}
	c := dial(t, addr)
	if _, err := c.Write(browserHello(echExt("nonce-in-ech"))); err != nil {
		t.Fatal(err)
	}
	closedWithin(t, c, 5*time.Second, "a client that sent ECH to the front")
	log.waitFor(t, "forwarder: refused a TLS ClientHello with encrypted_client_hello (0xfe0d)", 5*time.Second)
	if accepted.Load() != 1 {
		t.Errorf("the ECH hello reached the socket (%d connections)", accepted.Load())
	}
}
