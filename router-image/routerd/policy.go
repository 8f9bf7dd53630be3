package main

import (
	"fmt"
	"net/netip"
	"strings"
)

type rule struct {
	prefix netip.Prefix
	reason string
}

func rules(reason string, prefixes ...string) []rule {
	var rs []rule
	for _, p := range prefixes {
		rs = append(rs, rule{netip.MustParsePrefix(p), reason})
	}
	return rs
}

func concat(parts ...[]rule) []rule {
	var rs []rule
	for _, p := range parts {
		rs = append(rs, p...)
	}
	return rs
}

// alwaysRefused can never be reached through the router: it would let a
// sandbox talk to the router itself, its host or cloud metadata services.
var alwaysRefused = concat(
	rules("loopback", "127.0.0.0/8", "::1/128"),
	rules("link-local", "169.254.0.0/16", "fe80::/10"),
	rules("unspecified", "0.0.0.0/8", "::/128"),
	rules("multicast", "224.0.0.0/4", "ff00::/8"),
	rules("reserved", "240.0.0.0/4"),
)

// refusedUnlessAllowed is the non-public space: the host's own networks
// live here, so reaching it needs an explicit UPSTREAM_ALLOW entry.
var refusedUnlessAllowed = concat(
	rules("private", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"),
	rules("shared (CGNAT)", "100.64.0.0/10"),
	rules("reserved", "198.18.0.0/15", "192.0.0.0/24"),
	rules("nat64", "64:ff9b::/96"),
)

var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// allowed reports whether the router may connect to ip, and if not, why.
func allowed(ip netip.Addr, allow []netip.Prefix) (ok bool, reason string) {
	if !ip.IsValid() {
		return false, "invalid"
	}
	ip = ip.Unmap().WithZone("")
	for _, r := range alwaysRefused {
		if r.prefix.Contains(ip) {
			return false, r.reason
		}
	}
	if nat64.Contains(ip) {
		// The NAT64 gateway would carry us to the embedded IPv4 address, so
		// that address must pass too.
		b := ip.As16()
		if ok, reason := allowed(netip.AddrFrom4([4]byte(b[12:])), allow); !ok {
			return false, reason + " (via nat64)"
		}
	}
	for _, r := range refusedUnlessAllowed {
		if r.prefix.Contains(ip) && !inAny(ip, allow) {
			return false, r.reason
		}
	}
	return true, ""
}

func inAny(ip netip.Addr, prefixes []netip.Prefix) bool {
	for _, p := range prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// parseAllow reads UPSTREAM_ALLOW: comma-separated CIDRs, possibly none.
func parseAllow(s string) ([]netip.Prefix, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		p, err := netip.ParsePrefix(f)
		if err != nil {
			if _, aerr := netip.ParseAddr(f); aerr == nil {
				return nil, fmt.Errorf("bad UPSTREAM_ALLOW entry %q: want a CIDR such as %s/%d", f, f, bitsOf(f))
			}
			return nil, fmt.Errorf("bad UPSTREAM_ALLOW entry %q: want a CIDR such as 10.1.0.0/16", f)
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("bad UPSTREAM_ALLOW entry %q: host bits are set (did you mean %s?)", f, p.Masked())
		}
		// Addresses are judged unmapped, so a mapped prefix would never match.
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		out = append(out, p)
	}
	return out, nil
}

func bitsOf(addr string) int {
	if strings.Contains(addr, ":") {
		return 128
	}
	return 32
}
