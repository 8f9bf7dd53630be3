package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it):\n%s", path, got)
	}
}

func mustParse(t *testing.T, s string) []entry {
	t.Helper()
	e, err := parseAllowlistFrom(strings.NewReader(s), "test")
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestRouterConfigGolden(t *testing.T) {
	for _, tc := range []struct{ name, allowlist string }{
		{"empty", ""},
		{"mixed", "api.example.com\n*.cdn.example.com\ngit.example.net\ngit.example.net:22\ndb.example.org:5432\nssh.example.org:22\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dnsmasq, nginx, forwards, err := routerConfig(mustParse(t, tc.allowlist), "10.89.3.2")
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name+".dnsmasq.conf", dnsmasq)
			golden(t, tc.name+".nginx.conf", nginx)
			golden(t, tc.name+".forwards", forwards+"\n")
		})
	}
}

func TestDnsmasqNeverForwards(t *testing.T) {
	dnsmasq, _, _, err := routerConfig(mustParse(t, "a.example\n*.b.example\nc.example:22\n"), "10.89.3.2")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(dnsmasq, "\n") {
		if strings.HasPrefix(line, "server=") || strings.HasPrefix(line, "resolv-file") {
			t.Errorf("dnsmasq would forward: %q", line)
		}
	}
	for _, must := range []string{"no-resolv", "address=/#/", "log-queries", "listen-address=10.89.3.2"} {
		if !strings.Contains(dnsmasq, must+"\n") {
			t.Errorf("dnsmasq.conf lacks %q", must)
		}
	}
}

func TestTwoHostsShareAPort(t *testing.T) {
	_, nginx, forwards, err := routerConfig(mustParse(t, "a.example:22\nb.example:22\n"), "10.89.3.2")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"127.0.0.2:22=10.89.3.2:10001", "127.0.0.3:22=10.89.3.2:10002"} {
		if !strings.Contains(forwards, want) {
			t.Errorf("FORWARDS %q lacks %q", forwards, want)
		}
	}
	for _, want := range []string{"10001 a.example:22;", "10002 b.example:22;"} {
		if !strings.Contains(nginx, want) {
			t.Errorf("nginx.conf lacks %q", want)
		}
	}
}

func TestManyPortEntriesGetDistinctAddresses(t *testing.T) {
	var b strings.Builder
	for i := range 300 {
		fmt.Fprintf(&b, "h%d.example:22\n", i)
	}
	p, err := planRouter(mustParse(t, b.String()))
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
