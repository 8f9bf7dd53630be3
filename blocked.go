package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/allowlist"
	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
	"github.com/agent-sandbox/agent-sandbox/internal/routerlog"
)

// blockedHost is a name the agent tried to reach that the allowlist does
// not name, as the router logged it.
type blockedHost struct {
	name        string
	lookups     int // dnsmasq answered NXDOMAIN
	connections int // nginx closed a TLS connection with this SNI
}

// blockedHosts reads the router's log for names the agent was refused,
// most refused first. Names the allowlist does name (refused for another
// reason, such as an upstream address in a private range) are left out.
func blockedHosts(routerLog string, entries []allowlist.Entry) (hosts []blockedHost, unprintable int) {
	byName := map[string]*blockedHost{}
	get := func(name string) *blockedHost {
		name = strings.TrimSuffix(strings.ToLower(name), ".")
		if byName[name] == nil {
			byName[name] = &blockedHost{name: name}
		}
		return byName[name]
	}
	for _, line := range strings.Split(routerLog, "\n") {
		d, ok := routerlog.ParseDenial(line)
		switch {
		case !ok:
		case d.Lookup:
			get(d.Host).lookups++
		default:
			get(d.Host).connections++
		}
	}
	for name, h := range byName {
		switch {
		case !routerlog.PrintableHost(name):
			unprintable++
		case !allowlist.Allows(name, entries):
			hosts = append(hosts, *h)
		}
	}
	sort.Slice(hosts, func(i, j int) bool {
		a, b := hosts[i].lookups+hosts[i].connections, hosts[j].lookups+hosts[j].connections
		if a != b {
			return a > b
		}
		return hosts[i].name < hosts[j].name
	})
	return hosts, unprintable
}

// blockedSummary is what the user sees on stderr when a session ends;
// empty when nothing was blocked.
func blockedSummary(hosts []blockedHost, unprintable int) string {
	if len(hosts) == 0 && unprintable == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("the allowlist blocked these hosts in this session:\n")
	width := 0
	for _, h := range hosts {
		width = max(width, len(h.name))
	}
	for _, h := range hosts {
		var what []string
		if h.lookups > 0 {
			what = append(what, plural(h.lookups, "lookup"))
		}
		if h.connections > 0 {
			what = append(what, plural(h.connections, "connection"))
		}
		fmt.Fprintf(&b, "  %-*s  %-24s allow it: agent-sandbox allow %s\n", width, h.name, strings.Join(what, ", "), h.name)
	}
	if unprintable > 0 {
		what := "names that are not host names"
		if unprintable == 1 {
			what = "name that is not a host name"
		}
		fmt.Fprintf(&b, "  and %d %s\n", unprintable, what)
	}
	return iostreams.Prefixed(b.String())
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
