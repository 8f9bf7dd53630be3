package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Addresses that reach the machine the router runs on, or the router
// itself, are refused whatever UPSTREAM_ALLOW says. They are not in any
// fixed range: a rootless bridge's gateway is podman's network namespace,
// which runs aardvark-dns (a resolver that forwards to the host's) and
// routes to the host; slirp4netns or pasta carry a connection to the
// host's own address to the host itself, and that address may be public
// or inside a range a user allowed for corporate hosts. So routerd learns
// them at start.

const (
	procRoute = "/proc/net/route"
	etcHosts  = "/etc/hosts"
	// rtfGateway is RTF_GATEWAY in /proc/net/route's flags.
	rtfGateway = 0x2
)

// hostNames are the names podman (and docker) write into a container's
// /etc/hosts for the host.
var hostNames = []string{"host.containers.internal", "host.docker.internal"}

// refuseLocal adds the router's own addresses, the session network, the
// gateways and the host's addresses to alwaysRefused, and says so on
// stderr. hostAddrs is HOST_ADDRS: the host's addresses as the launcher
// sees them, comma-separated IPs or CIDRs.
func refuseLocal(session netip.Addr, hostAddrs string, stderr io.Writer) error {
	host, err := parseHostAddrs(hostAddrs)
	if err != nil {
		return err
	}
	var ifaces []netip.Prefix
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return fmt.Errorf("cannot list the router's addresses: %w", err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if p, ok := prefixOf(ipn); ok {
				ifaces = append(ifaces, p)
			}
		}
	}
	var gateways []netip.Addr
	if f, err := os.Open(procRoute); err == nil {
		gateways, err = routeGateways(f)
		_ = f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", procRoute, err)
		}
	}
	if f, err := os.Open(etcHosts); err == nil {
		host = append(host, hostsEntries(f, hostNames)...)
		_ = f.Close()
	}
	rs := localRules(session, ifaces, gateways, host)
	alwaysRefused = concat(alwaysRefused, rs)
	var desc []string
	for _, r := range rs {
		desc = append(desc, r.prefix.String()+" ("+r.reason+")")
	}
	fmt.Fprintf(stderr, "routerd: always refused besides loopback and link-local: %s\n", strings.Join(desc, ", "))
	return nil
}

// localRules turns what routerd learnt into rules. The session network
// is refused whole: it holds only the router and the agent's pod.
func localRules(session netip.Addr, ifaces []netip.Prefix, gateways, host []netip.Addr) []rule {
	var rs []rule
	seen := map[netip.Prefix]bool{}
	add := func(p netip.Prefix, reason string) {
		p = p.Masked()
		if !p.IsValid() || seen[p] || p.Addr().IsLoopback() || p.Addr().IsLinkLocalUnicast() {
			return
		}
		seen[p] = true
		rs = append(rs, rule{p, reason})
	}
	for _, p := range ifaces {
		if session.IsValid() && p.Contains(session) {
			add(p.Masked(), "the session network")
		}
	}
	for _, p := range ifaces {
		add(netip.PrefixFrom(p.Addr(), p.Addr().BitLen()), "the router itself")
	}
	for _, g := range gateways {
		add(netip.PrefixFrom(g, g.BitLen()), "gateway: podman's network namespace and the host")
	}
	for _, h := range host {
		add(netip.PrefixFrom(h, h.BitLen()), "the host")
	}
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].prefix.Bits() < rs[j].prefix.Bits() })
	return rs
}

func prefixOf(ipn *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(ipn.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	ones, _ := ipn.Mask.Size()
	if a.Is4() && ones > 32 {
		ones -= 96
	}
	return netip.PrefixFrom(a, ones), true
}

// routeGateways reads the gateways of /proc/net/route: hex, host byte order.
func routeGateways(r io.Reader) ([]netip.Addr, error) {
	var out []netip.Addr
	sc := bufio.NewScanner(r)
	for first := true; sc.Scan(); first = false {
		f := strings.Fields(sc.Text())
		if first || len(f) < 4 {
			continue
		}
		flags, err := strconv.ParseUint(f[3], 16, 32)
		if err != nil {
			return nil, fmt.Errorf("bad flags %q", f[3])
		}
		if flags&rtfGateway == 0 {
			continue
		}
		gw, err := strconv.ParseUint(f[2], 16, 32)
		if err != nil {
			return nil, fmt.Errorf("bad gateway %q", f[2])
		}
		out = append(out, netip.AddrFrom4([4]byte{byte(gw), byte(gw >> 8), byte(gw >> 16), byte(gw >> 24)}))
	}
	return out, sc.Err()
}

// hostsEntries returns the addresses an /etc/hosts file gives any of names.
func hostsEntries(r io.Reader, names []string) []netip.Addr {
	var out []netip.Addr
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		a, err := netip.ParseAddr(f[0])
		if err != nil {
			continue
		}
		for _, n := range f[1:] {
			for _, want := range names {
				if strings.EqualFold(strings.TrimSuffix(n, "."), want) {
					out = append(out, a.Unmap())
				}
			}
		}
	}
	return out
}

// parseHostAddrs reads HOST_ADDRS: comma-separated addresses (a CIDR's
// address counts; the host owns that one address, not its subnet).
func parseHostAddrs(s string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			p, perr := netip.ParsePrefix(f)
			if perr != nil {
				return nil, fmt.Errorf("bad HOST_ADDRS entry %q: want the host's IP addresses, comma-separated (the launcher sets it)", f)
			}
			a = p.Addr()
		}
		out = append(out, a.Unmap().WithZone(""))
	}
	return out, nil
}
