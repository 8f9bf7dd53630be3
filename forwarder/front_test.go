package main

import (
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
	fs, file, err := forwardsFromEnv(env("FORWARDER_ROLE", "front", "FORWARDS", "0.0.0.0:443=unix:/run/agent-sandbox-tls/tls.sock/tls"))
	if err != nil || file != nil || len(fs) != 1 {
		t.Fatalf("a front's pair: %v, %v, %v", fs, file, err)
	}
	if want := (forward{listen: ap("0.0.0.0:443"), socket: "/run/agent-sandbox-tls/tls.sock", tls: true}); fs[0] != want {
		t.Errorf("front pair = %+v, want %+v", fs[0], want)
	}
	for _, tc := range []struct {
		env  func(string) string
		want []string
	}{
		// Everything a front could be turned into: a way to an address, a
		// way around the screening, a narrower or wider listener.
		{env("FORWARDER_ROLE", "front", "FORWARDS", "0.0.0.0:443=10.0.0.1:443/tls"), []string{"unix socket alone"}},
		{env("FORWARDER_ROLE", "front", "FORWARDS", "0.0.0.0:443=10.0.0.1:443"), []string{"TLS alone", "/tls"}},
		{env("FORWARDER_ROLE", "front", "FORWARDS", "0.0.0.0:443=unix:/run/tls.sock"), []string{"TLS alone"}},
		{env("FORWARDER_ROLE", "front", "FORWARDS", "0.0.0.0:443=unix:run/tls.sock/tls"), []string{"unix:/ABSOLUTE/PATH/tls"}},
		{env("FORWARDER_ROLE", "front", "FORWARDS", "0.0.0.0:443=unix:/run/../tls.sock/tls"), []string{"unix:/ABSOLUTE/PATH/tls"}},
		{env("FORWARDER_ROLE", "front", "FORWARDS", "[::]:443=unix:/run/tls.sock/tls"), []string{"0.0.0.0", "not ::"}},
		{env("FORWARDER_ROLE", "front", "FORWARDS", "127.0.0.1:443=unix:/run/tls.sock/tls"), []string{"not 127.0.0.1"}},
		{env("FORWARDER_ROLE", "front", "FORWARDS", "10.0.0.5:443=unix:/run/tls.sock/tls"), []string{"not 10.0.0.5"}},
		{env("FORWARDER_ROLE", "front", "FORWARDS", "router.test:443=unix:/run/tls.sock/tls"), []string{"bad listen IP"}},
		{env("FORWARDER_ROLE", "front", "FORWARDS", "0.0.0.0:443=unix:/a.sock/tls 0.0.0.0:443=unix:/b.sock/tls"), []string{"duplicate listen address"}},
		{env("FORWARDER_ROLE", "front", "FORWARDS", "0.0.0.0:443"), []string{"missing '='"}},
		{env("FORWARDER_ROLE", "front", "FORWARDS", "0.0.0.0:61000=127.0.0.1:8000/publish=p.localhost:1"), []string{"TLS alone"}},
		{env("FORWARDER_ROLE", "front"), []string{"FORWARDER_ROLE=front needs FORWARDS"}},
		{env("FORWARDER_ROLE", "front", "FORWARDS_FILE", "/etc/forwards"), []string{"not FORWARDS_FILE"}},
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
