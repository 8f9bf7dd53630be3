package main

import (
	"strings"
	"testing"
)

const sampleRouterLog = `dnsmasq[13]: started, version 2.91 cachesize 150
dnsmasq[13]: query[A] denied.test from 10.89.1.3
dnsmasq[13]: config denied.test is NXDOMAIN
dnsmasq[13]: query[AAAA] denied.test from 10.89.1.3
dnsmasq[13]: config denied.test is NXDOMAIN
dnsmasq[13]: query[A] allowed.test from 10.89.1.3
dnsmasq[13]: config allowed.test is 127.0.0.1
dnsmasq[13]: query[AAAA] allowed.test from 10.89.1.3
dnsmasq[13]: config allowed.test is NODATA-IPv6
dnsmasq[13]: query[A] Other.Test. from 10.89.1.3
dnsmasq[13]: config Other.Test. is NXDOMAIN
dnsmasq[13]: query[A] wild.test from 10.89.1.3
dnsmasq[13]: config wild.test is NXDOMAIN
dnsmasq[13]: query[A] \027]0;pwned\007 from 10.89.1.3
dnsmasq[13]: config \027]0;pwned\007 is NXDOMAIN
10.89.1.3 port=443 sni="allowed.test" upstream="10.99.0.10:443" status=200 sent=10 received=20
10.89.1.3 port=443 sni="sneaky.test" upstream="-" status=500 sent=0 received=0
10.89.1.3 port=443 sni="sneaky.test" upstream="-" status=500 sent=0 received=0
10.89.1.3 port=443 sni="" upstream="-" status=500 sent=0 received=0
10.89.1.3 port=443 sni="a.wild.test" upstream="-" status=502 sent=0 received=0
10.89.1.2 port=443 sni="-" upstream="-" status=200 sent=0 received=0
routerd: refused upstream address 127.0.0.1 for allowed.test: loopback
`

func TestBlockedHosts(t *testing.T) {
	entries := mustParse(t, "allowed.test\n*.wild.test\nssh.test:22\n")
	hosts, unprintable := blockedHosts(sampleRouterLog, entries)
	got := []string{}
	for _, h := range hosts {
		got = append(got, h.name+" "+plural(h.lookups, "lookup")+" "+plural(h.connections, "connection"))
	}
	want := []string{
		"denied.test 2 lookups 0 connections",
		"sneaky.test 0 lookups 2 connections",
		"other.test 1 lookup 0 connections",
		"wild.test 1 lookup 0 connections",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("blocked:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if unprintable != 1 {
		t.Fatalf("unprintable = %d, want 1 (the escape sequence)", unprintable)
	}
}

func TestBlockedSummary(t *testing.T) {
	if s := blockedSummary(nil, 0); s != "" {
		t.Fatalf("summary with nothing blocked: %q", s)
	}
	hosts, unprintable := blockedHosts(sampleRouterLog, mustParse(t, "allowed.test\n*.wild.test\n"))
	s := blockedSummary(hosts, unprintable)
	for _, want := range []string{
		"agent-sandbox: the allowlist blocked these hosts in this session:\n",
		"denied.test  2 lookups",
		"allow it: agent-sandbox allow denied.test\n",
		"sneaky.test  2 connections",
		"and 1 name that is not a host name",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
	if strings.ContainsAny(s, "\x07\x1b") {
		t.Fatalf("summary carries control characters: %q", s)
	}
	for _, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		if !strings.HasPrefix(line, "agent-sandbox: ") {
			t.Errorf("line without the prefix: %q", line)
		}
	}
}
