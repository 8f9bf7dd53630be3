package main

import (
	"io"
	"log"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// Every address below is test data only; no test connects to any of them.
func TestAllowed(t *testing.T) {
	none := []netip.Prefix(nil)
	p := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	cases := []struct {
		ip     string
		allow  []netip.Prefix
		ok     bool
		reason string
	}{
		// Public space.
		{"192.0.2.1", none, true, ""},
		{"198.51.100.7", none, true, ""},
		{"203.0.113.9", none, true, ""},
		{"2001:db8::1", none, true, ""},
		{"172.32.0.1", none, true, ""},  // just past 172.16/12
		{"100.128.0.1", none, true, ""}, // just past 100.64/10
		{"11.0.0.1", none, true, ""},

		// Always refused, whatever the allowlist says.
		{"127.0.0.1", none, false, "loopback"},
		{"127.0.0.1", p("127.0.0.0/8"), false, "loopback"},
		{"127.255.255.255", p("0.0.0.0/0"), false, "loopback"},
		{"::1", p("::/0"), false, "loopback"},
		{"169.254.169.254", none, false, "link-local"},
		{"169.254.169.254", p("169.254.0.0/16"), false, "link-local"},
		{"fe80::1", p("fe80::/10"), false, "link-local"},
		{"0.0.0.0", none, false, "unspecified"},
		{"0.1.2.3", p("0.0.0.0/0"), false, "unspecified"},
		{"::", p("::/0"), false, "unspecified"},
		{"224.0.0.1", none, false, "multicast"},
		{"239.255.255.250", p("224.0.0.0/4"), false, "multicast"},
		{"ff02::1", p("ff00::/8"), false, "multicast"},
		{"240.0.0.1", p("240.0.0.0/4"), false, "reserved"},
		{"255.255.255.255", p("0.0.0.0/0"), false, "reserved"},

		// IPv4-mapped IPv6 is judged as IPv4.
		{"::ffff:127.0.0.1", none, false, "loopback"},
		{"::ffff:127.0.0.1", p("::ffff:0:0/96", "127.0.0.0/8"), false, "loopback"},
		{"::ffff:169.254.169.254", none, false, "link-local"},
		{"::ffff:10.0.0.1", none, false, "private"},
		{"::ffff:10.0.0.1", p("10.0.0.0/8"), true, ""},
		{"::ffff:192.0.2.1", none, true, ""},

		// Refused unless allowed.
		{"10.0.0.1", none, false, "private"},
		{"10.0.0.1", p("10.0.0.0/8"), true, ""},
		{"10.99.0.10", p("10.99.0.0/24"), true, ""},
		{"10.99.1.10", p("10.99.0.0/24"), false, "private"},
		{"172.16.0.1", none, false, "private"},
		{"172.31.255.255", p("172.16.0.0/12"), true, ""},
		{"192.168.1.1", none, false, "private"},
		{"192.168.1.1", p("192.168.1.1/32"), true, ""},
		{"100.64.0.1", none, false, "shared (CGNAT)"},
		{"100.64.0.1", p("100.64.0.0/10"), true, ""},
		{"198.18.0.1", none, false, "reserved"},
		{"198.19.255.255", p("198.18.0.0/15"), true, ""},
		{"192.0.0.8", none, false, "reserved"},
		{"fc00::1", none, false, "private"},
		{"fd12:3456::1", none, false, "private"},
		{"fc00::1", p("fc00::/7"), true, ""},
		{"10.0.0.1", p("0.0.0.0/0"), true, ""},

		// NAT64: the prefix needs allowing, and the embedded IPv4 address
		// must pass too.
		{"64:ff9b::c000:201", none, false, "nat64"},
		{"64:ff9b::c000:201", p("64:ff9b::/96"), true, ""},
		{"64:ff9b::7f00:1", p("64:ff9b::/96"), false, "loopback (via nat64)"},
		{"64:ff9b::a9fe:a9fe", p("64:ff9b::/96"), false, "link-local (via nat64)"},
		{"64:ff9b::a00:1", p("64:ff9b::/96"), false, "private (via nat64)"},
		{"64:ff9b::a00:1", p("64:ff9b::/96", "10.0.0.0/8"), true, ""},

		// Zones do not change the verdict.
		{"fe80::1%eth0", none, false, "link-local"},
	}
	for _, tc := range cases {
		ok, reason := allowed(netip.MustParseAddr(tc.ip), tc.allow)
		if ok != tc.ok || reason != tc.reason {
			t.Errorf("allowed(%s, %v) = %v, %q; want %v, %q", tc.ip, tc.allow, ok, reason, tc.ok, tc.reason)
		}
	}
	if ok, _ := allowed(netip.Addr{}, nil); ok {
		t.Error("the zero Addr is allowed")
	}
}

func TestParseAllow(t *testing.T) {
	good := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"  ", nil},
		{"10.99.0.0/24", []string{"10.99.0.0/24"}},
		{"10.99.0.0/24, 192.168.5.0/24 ,fc00::/7", []string{"10.99.0.0/24", "192.168.5.0/24", "fc00::/7"}},
		{"192.168.1.1/32", []string{"192.168.1.1/32"}},
		{"::ffff:10.0.0.0/104", []string{"10.0.0.0/8"}},
	}
	for _, tc := range good {
		got, err := parseAllow(tc.in)
		if err != nil {
			t.Errorf("parseAllow(%q): %v", tc.in, err)
			continue
		}
		var gs []string
		for _, p := range got {
			gs = append(gs, p.String())
		}
		if !reflect.DeepEqual(gs, tc.want) {
			t.Errorf("parseAllow(%q) = %v, want %v", tc.in, gs, tc.want)
		}
	}
	bad := []struct{ in, want string }{
		{"10.0.0.0/33", `"10.0.0.0/33"`},
		{"10.0.0.1", `"10.0.0.1": want a CIDR such as 10.0.0.1/32`},
		{"fd00::1", `fd00::1/128`},
		{"10.0.0.1/8", "did you mean 10.0.0.0/8"},
		{"10.0.0.0/8,", `""`},
		{"10.0.0.0/8,,192.168.0.0/16", `""`},
		{"10.0.0.0/8;192.168.0.0/16", `"10.0.0.0/8;192.168.0.0/16"`},
		{"10.0.0.0/8 192.168.0.0/16", `"10.0.0.0/8 192.168.0.0/16"`},
		{"lan.test/24", `"lan.test/24"`},
	}
	for _, tc := range bad {
		got, err := parseAllow(tc.in)
		if err == nil {
			t.Errorf("parseAllow(%q) = %v, want an error", tc.in, got)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "UPSTREAM_ALLOW") {
			t.Errorf("parseAllow(%q) error %q, want it to name UPSTREAM_ALLOW and %s", tc.in, err, tc.want)
		}
	}
}

// The ranges below can never be made local on a test machine (a probe of
// them would leave it), so only these unit tests prove that an upstream
// answer pointing there never reaches nginx. They run the real filter on
// a real answer, with the broadest UPSTREAM_ALLOW a corporate user might
// set, and with everything allowed for the ranges that stay refused even
// then.
func TestFilterDropsUnlocalisableRanges(t *testing.T) {
	corporate := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("172.16.0.0/12"),
		netip.MustParsePrefix("192.168.0.0/16"),
	}
	everything := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
	cases := []struct {
		ip    string
		allow []netip.Prefix
		why   string
	}{
		{"169.254.169.254", everything, "cloud metadata (AWS, GCP, Azure)"},
		{"169.254.170.2", everything, "ECS task metadata"},
		{"169.254.0.1", everything, "link-local"},
		{"::ffff:169.254.169.254", everything, "metadata, IPv4-mapped"},
		{"fd00:ec2::254", everything, "AWS metadata over IPv6"},
		{"fe80::a9fe:a9fe", everything, "IPv6 link-local"},
		{"::1", everything, "IPv6 loopback"},
		{"::ffff:127.0.0.1", everything, "loopback, IPv4-mapped"},
		{"127.0.0.53", everything, "loopback"},
		{"0.0.0.0", everything, "unspecified (connects to the router itself)"},
		{"100.100.100.200", corporate, "CGNAT (Alibaba metadata)"},
		{"100.64.0.1", corporate, "CGNAT"},
		{"::ffff:100.64.0.1", corporate, "CGNAT, IPv4-mapped"},
		{"fd12:3456::1", corporate, "ULA"},
		{"fc00::1", corporate, "ULA"},
		{"::ffff:10.1.2.3", nil, "private, IPv4-mapped"},
		{"2002:a9fe:a9fe::1", everything, "6to4 of the metadata address"},
		{"64:ff9b::a9fe:a9fe", everything, "NAT64 of the metadata address"},
		{"::a9fe:a9fe", everything, "IPv4-compatible metadata address"},
		{"2001:db8::1", everything, "any IPv6: the router's egress is IPv4 only"},
	}
	for _, tc := range cases {
		f := &filter{allow: tc.allow, log: log.New(io.Discard, "", 0)}
		m, err := f.clean(answerWith(t, netip.MustParseAddr(tc.ip)), "x.test")
		if err != nil {
			t.Fatalf("%s: %v", tc.ip, err)
		}
		for _, section := range [][]dnsmessage.Resource{m.Answers, m.Authorities, m.Additionals} {
			for _, r := range section {
				if a, ok := recordAddr(r); ok {
					t.Errorf("%s (%s) survived the filter as %s with UPSTREAM_ALLOW %v", tc.ip, tc.why, a, tc.allow)
				}
			}
		}
	}
}

// answerWith is an upstream answer for x.test carrying ip in every section.
func answerWith(t *testing.T, ip netip.Addr) []byte {
	t.Helper()
	name := dnsmessage.MustNewName("x.test.")
	typ := dnsmessage.TypeA
	if !ip.Is4() {
		typ = dnsmessage.TypeAAAA
	}
	m := dnsmessage.Message{Header: dnsmessage.Header{ID: 1, Response: true}}
	m.Questions = []dnsmessage.Question{{Name: name, Type: typ, Class: dnsmessage.ClassINET}}
	h := dnsmessage.ResourceHeader{Name: name, Type: typ, Class: dnsmessage.ClassINET, TTL: 5}
	var body dnsmessage.ResourceBody = &dnsmessage.AAAAResource{AAAA: ip.As16()}
	if ip.Is4() {
		body = &dnsmessage.AResource{A: ip.As4()}
	}
	r := dnsmessage.Resource{Header: h, Body: body}
	m.Answers = []dnsmessage.Resource{r}
	m.Authorities = []dnsmessage.Resource{r}
	m.Additionals = []dnsmessage.Resource{r}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
