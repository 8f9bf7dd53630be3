package main

import (
	"fmt"
	"net"
	"strings"
)

// zone is the fake DNS's whole world: exact names and "*.suffix" wildcards,
// each mapped to one IPv4 address. Everything else does not exist.
type zone struct {
	exact map[string]net.IP
	wild  map[string]net.IP
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
