package main

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// Every address below is test data only; no test connects to any of them.

func TestRouteGateways(t *testing.T) {
	// A router on an internal session network and the egress bridge.
	route := "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
		"eth1\t00000000\t0100630A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n" +
		"eth0\t0000590A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n" +
		"eth1\t0000630A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n" +
		"eth1\t0014A8C0\t0200630A\t0003\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
	got, err := routeGateways(strings.NewReader(route))
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Addr{netip.MustParseAddr("10.99.0.1"), netip.MustParseAddr("10.99.0.2")}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("gateways = %v, want %v", got, want)
	}
	if _, err := routeGateways(strings.NewReader("Iface\tDestination\tGateway\tFlags\neth0\t0\tzz\t0003\n")); err == nil {
		t.Error("a bad gateway field parsed")
	}
}

func TestHostsEntries(t *testing.T) {
	hosts := `127.0.0.1	localhost
192.0.2.2	host.containers.internal
# 192.0.2.9 host.containers.internal
::ffff:192.0.2.3 Host.Docker.Internal. other
10.89.0.2	agent-sandbox-router
bogus host.containers.internal
`
	got := hostsEntries(strings.NewReader(hosts), hostNames)
	want := []netip.Addr{netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("192.0.2.3")}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("host entries = %v, want %v", got, want)
	}
}

func TestParseHostAddrs(t *testing.T) {
	got, err := parseHostAddrs(" 192.0.2.2, fd00::2/64,::ffff:198.51.100.1,fe80::1%eth0 ")
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Addr{
		netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("fd00::2"),
		netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("fe80::1"),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("HOST_ADDRS = %v, want %v", got, want)
	}
	if _, err := parseHostAddrs("192.0.2.2,host.test"); err == nil || !strings.Contains(err.Error(), "HOST_ADDRS") {
		t.Errorf("a name in HOST_ADDRS: err = %v, want one naming HOST_ADDRS", err)
	}
}

// The launcher allows the egress subnet for its fakes, or a user allows
// 10.0.0.0/8 for corporate hosts: the gateway, the session network, the
// router's own addresses and the host must stay refused all the same.
func TestLocalRulesBeatUpstreamAllow(t *testing.T) {
	saved := alwaysRefused
	t.Cleanup(func() { alwaysRefused = saved })
	session := netip.MustParseAddr("10.89.0.2")
	rs := localRules(session,
		[]netip.Prefix{
			netip.MustParsePrefix("127.0.0.1/8"),
			netip.MustParsePrefix("10.89.0.2/24"),
			netip.MustParsePrefix("10.99.0.7/24"),
			netip.MustParsePrefix("fe80::1/64"),
		},
		[]netip.Addr{netip.MustParseAddr("10.99.0.1")},
		[]netip.Addr{netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("fd00::2"), netip.MustParseAddr("127.0.0.1")},
	)
	var got []string
	for _, r := range rs {
		got = append(got, r.prefix.String()+" "+r.reason)
	}
	want := []string{
		"10.89.0.0/24 the session network",
		"10.89.0.2/32 the router itself",
		"10.99.0.7/32 the router itself",
		"10.99.0.1/32 gateway: podman's network namespace and the host",
		"192.0.2.2/32 the host",
		"fd00::2/128 the host",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	alwaysRefused = concat(alwaysRefused, rs)
	wide := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
	for _, tc := range []struct{ ip, reason string }{
		{"10.99.0.1", "gateway: podman's network namespace and the host"},
		{"::ffff:10.99.0.1", "gateway: podman's network namespace and the host"},
		{"10.89.0.2", "the session network"},
		{"10.89.0.77", "the session network"},
		{"10.99.0.7", "the router itself"},
		{"192.0.2.2", "the host"},
		{"fd00::2", "the host"},
	} {
		if ok, reason := allowed(netip.MustParseAddr(tc.ip), wide); ok || reason != tc.reason {
			t.Errorf("allowed(%s, everything) = %v, %q; want refused as %q", tc.ip, ok, reason, tc.reason)
		}
	}
	// The rest of the egress subnet (the tests' fakes) is still the
	// allowlist's to open.
	if ok, reason := allowed(netip.MustParseAddr("10.99.0.10"), []netip.Prefix{netip.MustParsePrefix("10.99.0.0/24")}); !ok {
		t.Errorf("10.99.0.10 with 10.99.0.0/24 allowed is refused: %s", reason)
	}
}

func TestRefuseLocalReadsThisMachine(t *testing.T) {
	saved := alwaysRefused
	t.Cleanup(func() { alwaysRefused = saved })
	var out strings.Builder
	if err := refuseLocal(netip.Addr{}, "198.51.100.77", &out); err != nil {
		t.Fatal(err)
	}
	if ok, reason := allowed(netip.MustParseAddr("198.51.100.77"), nil); ok || reason != "the host" {
		t.Errorf("HOST_ADDRS address: allowed = %v, %q; want refused as the host", ok, reason)
	}
	if !strings.Contains(out.String(), "198.51.100.77/32 (the host)") {
		t.Errorf("refuseLocal did not say what it refuses: %q", out.String())
	}
	if err := refuseLocal(netip.Addr{}, "nope", &out); err == nil {
		t.Error("a bad HOST_ADDRS was accepted")
	}
}
