package main

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// zone is the fake DNS's whole world: exact names and "*.suffix" wildcards,
// each mapped to one IPv4 address. Everything else does not exist.
type zone struct {
	exact map[string]net.IP
	wild  map[string]net.IP
	// ipSuffix and ipAllow: see setIPNames.
	ipSuffix string
	ipAllow  []netip.Prefix
}

// setIPNames makes names under suffix whose first label is
// ip-A-B-C-D[-anything] answer A.B.C.D, so a test can point an allowlisted
// name at any address without restarting the fake. Only addresses in allow
// are answered: the suite must never send anything off the machine, so it
// lists the machine's own addresses and nothing else.
func (z *zone) setIPNames(suffix, allow string) error {
	suffix = canonical(suffix)
	if suffix == "" {
		return nil
	}
	if strings.TrimSpace(allow) == "" {
		return fmt.Errorf("-ip-names %s needs -ip-allow: list the addresses it may answer with", suffix)
	}
	for _, f := range strings.Split(allow, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(f))
		if err != nil || !p.Addr().Is4() {
			return fmt.Errorf("bad -ip-allow entry %q: want an IPv4 CIDR such as 10.99.0.1/32", f)
		}
		z.ipAllow = append(z.ipAllow, p.Masked())
	}
	z.ipSuffix = suffix
	return nil
}

// ipName reads an ip-A-B-C-D name; refused reports one that parses but
// names an address outside the allowed list.
func (z *zone) ipName(name string) (ip net.IP, isIPName, refused bool) {
	if z.ipSuffix == "" || !strings.HasSuffix(name, "."+z.ipSuffix) {
		return nil, false, false
	}
	first, _, _ := strings.Cut(name, ".")
	rest, ok := strings.CutPrefix(first, "ip-")
	if !ok {
		return nil, false, false
	}
	parts := strings.SplitN(rest, "-", 5)
	if len(parts) < 4 {
		return nil, false, false
	}
	var b [4]byte
	for i := range 4 {
		n, err := strconv.Atoi(parts[i])
		if err != nil || n < 0 || n > 255 {
			return nil, false, false
		}
		b[i] = byte(n)
	}
	a := netip.AddrFrom4(b)
	for _, p := range z.ipAllow {
		if p.Contains(a) {
			return net.IP(b[:]), true, false
		}
	}
	return nil, true, true
}

func parseZone(spec string) (*zone, error) {
	z := &zone{exact: map[string]net.IP{}, wild: map[string]net.IP{}}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, addr, ok := strings.Cut(item, "=")
		ip := net.ParseIP(strings.TrimSpace(addr))
		if !ok || ip == nil || ip.To4() == nil {
			return nil, fmt.Errorf("bad -dns entry %q: want name=IPv4, e.g. allowed.test=10.99.0.10", item)
		}
		name = canonical(name)
		if suffix, ok := strings.CutPrefix(name, "*."); ok {
			z.wild[suffix] = ip.To4()
			continue
		}
		z.exact[name] = ip.To4()
	}
	return z, nil
}

// lookup matches exact names first, then the longest wildcard suffix; a
// wildcard never covers its own apex, like the allowlist's "*.domain".
func (z *zone) lookup(name string) (net.IP, bool) {
	name = canonical(name)
	if ip, isIP, refused := z.ipName(name); isIP {
		return ip, !refused
	}
	if ip, ok := z.exact[name]; ok {
		return ip, true
	}
	for rest := name; ; {
		_, after, ok := strings.Cut(rest, ".")
		if !ok {
			return nil, false
		}
		if ip, ok := z.wild[after]; ok {
			return ip, true
		}
		rest = after
	}
}

func canonical(name string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(name)), ".")
}
