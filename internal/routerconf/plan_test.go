package routerconf

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/allowlist"
)

func TestManyPortEntriesGetDistinctAddresses(t *testing.T) {
	var b strings.Builder
	for i := range 300 {
		fmt.Fprintf(&b, "h%d.example:22\n", i)
	}
	p, _, err := Replan(Plan{}, FirstCursor, mustParse(t, b.String()))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for host, a := range p.loopback {
		if seen[a.String()] || !a.IsLoopback() || a.String() == "127.0.0.1" {
			t.Fatalf("host %s got address %s (duplicate, 127.0.0.1, or not loopback)", host, a)
		}
		seen[a.String()] = true
	}
}

func TestReplanKeepsAddressesAndPorts(t *testing.T) {
	p1, c1, err := Replan(Plan{}, FirstCursor, mustParse(t, "m.test:22\nm.test:2222\nz.test:22\n"))
	if err != nil {
		t.Fatal(err)
	}
	// a.test sorts first: from scratch it would take m.test's address.
	p2, c2, err := Replan(p1, c1, mustParse(t, "a.test:22\nm.test:22\nm.test:2222\nz.test:22\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"m.test", "z.test"} {
		if p2.loopback[host] != p1.loopback[host] {
			t.Errorf("%s moved from %s to %s", host, p1.loopback[host], p2.loopback[host])
		}
	}
	for e, port := range p1.routerPort {
		if p2.routerPort[e] != port {
			t.Errorf("%v moved from router port %d to %d", e, port, p2.routerPort[e])
		}
	}
	if a := p2.loopback["a.test"]; a.String() != "127.0.0.4" {
		t.Errorf("a.test got %s, want the next unused address 127.0.0.4", a)
	}
	if port := p2.routerPort[allowlist.Entry{Host: "a.test", Port: 22}]; port != FirstPortEntryPort+3 {
		t.Errorf("a.test:22 got router port %d, want %d", port, FirstPortEntryPort+3)
	}

	// A removed host's address and ports are not handed to the next one.
	p3, c3, err := Replan(p2, c2, mustParse(t, "a.test:22\nz.test:22\n"))
	if err != nil {
		t.Fatal(err)
	}
	p4, _, err := Replan(p3, c3, mustParse(t, "a.test:22\nb.test:22\nz.test:22\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a := p4.loopback["b.test"]; a == p1.loopback["m.test"] || a.String() != "127.0.0.5" {
		t.Errorf("b.test got %s; want 127.0.0.5, not m.test's old %s", a, p1.loopback["m.test"])
	}
	if port := p4.routerPort[allowlist.Entry{Host: "b.test", Port: 22}]; port != FirstPortEntryPort+4 {
		t.Errorf("b.test:22 got router port %d, want %d", port, FirstPortEntryPort+4)
	}

	// The rendered forwards keep the pairs of hosts that stay.
	before, after := p1.forwards("10.89.3.2"), p4.forwards("10.89.3.2")
	for _, pair := range strings.Fields(before) {
		if strings.HasPrefix(pair, p1.loopback["z.test"].String()+":") && !strings.Contains(after, pair) {
			t.Errorf("z.test's pair %s is gone from %q", pair, after)
		}
	}
}

func TestReplanReusesOnlyWhenExhausted(t *testing.T) {
	p1, _, err := Replan(Plan{}, FirstCursor, mustParse(t, "a.test:22\n"))
	if err != nil {
		t.Fatal(err)
	}
	// A cursor at the end of both spaces: only free slots are left.
	p2, _, err := Replan(p1, Cursor{addr: lastAddrIndex + 1, port: lastPort + 1}, mustParse(t, "a.test:22\nb.test:22\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a := p2.loopback["b.test"]; a.String() != "127.0.0.3" {
		t.Errorf("b.test got %s, want the lowest free 127.0.0.3", a)
	}
	if port := p2.routerPort[allowlist.Entry{Host: "b.test", Port: 22}]; port != FirstPortEntryPort+1 {
		t.Errorf("b.test:22 got %d, want the lowest free %d", port, FirstPortEntryPort+1)
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

// routerd ends nginx's old workers, and every connection they hold, when a
// new nginx.conf drops a line of the running one (router-image/routerd,
// dropsLine): an edit that only adds hosts must only add lines, or every
// addition would cut the agent's open connections.
func TestNginxConfOnlyGainsLinesWhenHostsAreAdded(t *testing.T) {
	steps := []string{
		"",
		"api.example.com\n",
		"api.example.com\n*.cdn.example.com\n",
		"api.example.com\n*.cdn.example.com\nssh.example.org:22\n",
		"api.example.com\n*.cdn.example.com\nssh.example.org:22\naaa.example.org\naaa.example.org:2222\n",
		"api.example.com\n*.cdn.example.com\nssh.example.org:22\naaa.example.org\naaa.example.org:2222\nssh.example.org:2222\ndb.example.org:5432\n",
	}
	var p Plan
	cursor := FirstCursor
	prev := p.nginxConf("10.89.3.2")
	for _, list := range steps {
		next, c, err := Replan(p, cursor, mustParse(t, list))
		if err != nil {
			t.Fatal(err)
		}
		conf := next.nginxConf("10.89.3.2")
		have := nginxLines(conf)
		for l := range nginxLines(prev) {
			if !have[l] {
				t.Errorf("adding hosts to get\n%s\ndropped the line %q of nginx.conf", list, l)
			}
		}
		p, cursor, prev = next, c, conf
	}

	// Removing any one entry drops a line, so that its connections end.
	full := mustParse(t, steps[len(steps)-1])
	for i := range full {
		rest := append(slices.Clone(full[:i]), full[i+1:]...)
		next, _, err := Replan(p, cursor, rest)
		if err != nil {
			t.Fatal(err)
		}
		have := nginxLines(next.nginxConf("10.89.3.2"))
		dropped := false
		for l := range nginxLines(prev) {
			dropped = dropped || !have[l]
		}
		if !dropped {
			t.Errorf("removing %v keeps every line of nginx.conf", full[i])
		}
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

// In a cluster the forwarder reaches the router over TCP: TLS to its port
// 443 (screened again by the router's front), each port entry to its
// router port, and RouterPorts lists exactly those.
func TestForwardsVia(t *testing.T) {
	p, _, err := Replan(Plan{}, FirstCursor, mustParse(t, "a.test\nb.test:22\nc.test:5432\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := "127.0.0.1:443=10.96.200.53:443/tls 127.0.0.2:443=10.96.200.53:443/tls 127.0.0.2:22=10.96.200.53:10001 " +
		"127.0.0.3:443=10.96.200.53:443/tls 127.0.0.3:5432=10.96.200.53:10002"
	if got := p.ForwardsVia("10.96.200.53"); got != want {
		t.Errorf("ForwardsVia:\n got %s\nwant %s", got, want)
	}
	if got := p.RouterPorts(); !slices.Equal(got, []int{10001, 10002}) {
		t.Errorf("RouterPorts = %v", got)
	}
	if got, want := p.FrontForwards("$(POD_IP)"), "0.0.0.0:443=unix:"+TLSSocket+"/tls $(POD_IP):10001=127.0.0.1:10001 $(POD_IP):10002=127.0.0.1:10002"; got != want {
		t.Errorf("FrontForwards:\n got %s\nwant %s", got, want)
	}
}

// Behind a front every TCP server of the router is on its pod's loopback
// (the front alone takes the pod's address, and only connections with the
// link key); dnsmasq answers on every address.
func TestRenderFronted(t *testing.T) {
	p, _, err := Replan(Plan{}, FirstCursor, mustParse(t, "a.test\nb.test:22\napi.test\n"))
	if err != nil {
		t.Fatal(err)
	}
	p.Routes = []Route{{Provider: "anthropic", Host: "api.test", GatePort: 81, Header: "x-api-key", IncludeFile: "/etc/router-credentials/anthropic.conf"}}
	files := map[string]string{}
	for _, f := range p.RenderFronted() {
		files[f.Name] = f.Body
	}
	if _, ok := files["forwards"]; ok {
		t.Error("a fronted router's files include the agent forwarder's pairs")
	}
	for name, want := range map[string][]string{
		"nginx.conf":      {"listen 127.0.0.1:10001;"},
		"api-policy.json": {`"listen": "127.0.0.1:81"`},
		InspectFile:       {`"api.test": "127.0.0.1:81"`},
		"dnsmasq.conf":    {"listen-address=0.0.0.0\n"},
	} {
		for _, w := range want {
			if !strings.Contains(files[name], w) {
				t.Errorf("%s has no %q:\n%s", name, w, files[name])
			}
		}
	}
	for name, body := range files {
		if name != "dnsmasq.conf" && strings.Contains(body, "0.0.0.0") {
			t.Errorf("%s listens on every address:\n%s", name, body)
		}
	}
}
