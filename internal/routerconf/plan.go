// Package routerconf plans a session's router from its allowlist and the
// model APIs it adds credentials for, and renders the files the router and
// the forwarder read: dnsmasq.conf, nginx.conf, the inspecting proxy's and
// the API gate's JSON, and the forwarder's pairs. Every function is pure:
// the same plan gives the same bytes (the root's golden files under
// testdata/), and a Replan keeps every address and port that stays.
package routerconf

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/allowlist"
)

// FirstPortEntryPort is the first router port given to a host:port entry;
// 443 stays the SNI-checked port.
const FirstPortEntryPort = 10001

// maxPortEntries keeps router ports below 65536 and loopback addresses in
// 127.0.0.0/16.
const maxPortEntries = 50000

// ngxStreamModule is where Debian's libnginx-mod-stream puts the module.
const ngxStreamModule = "/usr/lib/nginx/modules/ngx_stream_module.so"

// UpstreamResolver is routerd's filtering resolver, which refuses upstream
// addresses in the host's own ranges.
const UpstreamResolver = "127.0.0.1:5353"

// TLSSocketDir is where nginx's TLS server listens, in the router and the
// forwarder alike: a directory of the session's that only those two mount.
// The agent shares the forwarder's network namespace, so a TCP listener on
// the router could be reached around the forwarder's ClientHello check; a
// path it has no mount for cannot.
const (
	TLSSocketDir = "/run/agent-sandbox-tls"
	TLSSocket    = TLSSocketDir + "/tls.sock"
)

// APIRelayDir holds the unix sockets on which the stream module relays the
// credential proxy's connections to the API hosts (credentialRelays). It is
// the router container's own /tmp, beside nginx's pid file: no other
// container mounts it, so neither the agent nor the forwarder can reach
// those sockets, which would lead past the credential proxy to an API host.
const APIRelayDir = "/tmp"

// InspectSocket is where routerd's inspecting proxy takes the TLS
// connections nginx routes to it by SNI: in the router's own /tmp, like
// APIRelayDir, so that only the router reaches it.
const InspectSocket = APIRelayDir + "/inspect.sock"

// InspectFile is the inspecting proxy's config in the session's dir: the
// names it may make certificates for and what it verifies upstreams with.
const InspectFile = "inspect.json"

// APIKeepalive is how many idle connections to each API host nginx keeps
// for the next request (per worker; there is one): an agent's parallel
// requests (subagents) each hold one while they stream.
const APIKeepalive = 16

// Plan is where every allowlisted host is answered and relayed.
type Plan struct {
	entries []allowlist.Entry
	// loopback maps a host with port entries to its own loopback address,
	// so two hosts can both use the same port. Other names get 127.0.0.1.
	loopback map[string]netip.Addr
	// routerPort maps a port entry to the router port that relays it.
	routerPort map[allowlist.Entry]int
	// injections are the API hosts the router adds the user's credential
	// for (the root's credentials.go): nginx proxies them over HTTP, never by SNI.
	// trustedCA is the bundle it verifies their certificates with.
	Routes    []Route
	TrustedCA string
	// apiAllow are the API gate's rules the user turned off by name
	// (AGENT_SANDBOX_API_ALLOW).
	APIAllow []string
	// forge is GitHub's and the registries' part of the inspecting
	// proxy's config (the root's forge.go); nil when the session has none.
	Forge *Forge
	// published are the forwarder's pairs for published ports
	// (the root's publish.go), whatever the allowlist says.
	Published []string
}

// Route is a model API whose requests the router takes through its
// gate and on through the credential proxy, which adds the user's
// credential. It holds no credential: the proxy includes the header from
// a file only the router mounts.
type Route struct {
	Provider string // the provider's id: names its sockets and upstream group
	Host     string
	GatePort int    // the gate's port on the router's session address
	Header   string // the header the proxy sets to the user's credential
	// agentHeaders are every header the API takes a credential in, which
	// the proxy removes; refuseArgs are query arguments it takes one in,
	// which the proxy refuses.
	AgentHeaders, RefuseArgs []string
	IncludeFile              string // the router's file that sets header
}

// Forge is inspect.json's "forge" part (routerd: inspect/policy.go).
type Forge struct {
	Roles     map[string]string `json:"roles"`
	Repos     []string          `json:"repos"`
	Publish   []string          `json:"publish,omitempty"`
	Allow     []string          `json:"allow,omitempty"`
	TokenFile string            `json:"token_file,omitempty"`
}

// Cursor is where the next new host's loopback address (as an index:
// 127.0.i>>8.i&255) and the next new entry's router port are taken from.
// It only moves forward, so that within a session an address or port is
// not handed to a second host while the space lasts: a program that
// resolved a removed host earlier must not reach another one through it.
type Cursor struct{ addr, port int }

// FirstCursor starts a session: 127.0.0.1 is every other name's address.
var FirstCursor = Cursor{addr: 2, port: FirstPortEntryPort}

const (
	lastAddrIndex = 0xffff // 127.0.255.255
	lastPort      = 65535
)

func loopbackAt(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, 0, byte(i >> 8), byte(i)})
}

// Replan plans entries after prev: every host that keeps a port entry
// keeps its loopback address and every entry that stays keeps its router
// port, so that a reload moves nothing that open connections or cached
// answers use. New ones are given in sorted order from cursor. A session
// starts from the empty plan and FirstCursor.
func Replan(prev Plan, cursor Cursor, entries []allowlist.Entry) (Plan, Cursor, error) {
	p := Plan{entries: entries, loopback: map[string]netip.Addr{}, routerPort: map[allowlist.Entry]int{}}
	portEntries := portEntriesOf(entries)
	if len(portEntries) > maxPortEntries {
		return p, cursor, fmt.Errorf("the allowlist has %d host:port entries; at most %d are supported", len(portEntries), maxPortEntries)
	}
	usedAddr, usedPort := map[netip.Addr]bool{}, map[int]bool{}
	for _, e := range portEntries {
		if a, ok := prev.loopback[e.Host]; ok {
			p.loopback[e.Host] = a
			usedAddr[a] = true
		}
		if port, ok := prev.routerPort[e]; ok {
			p.routerPort[e] = port
			usedPort[port] = true
		}
	}
	for _, e := range portEntries {
		if _, ok := p.loopback[e.Host]; !ok {
			a, err := nextFree(&cursor.addr, lastAddrIndex, FirstCursor.addr, func(i int) bool { return usedAddr[loopbackAt(i)] })
			if err != nil {
				return p, cursor, errors.New("no loopback address is left for a new host:port entry; restart the session")
			}
			p.loopback[e.Host] = loopbackAt(a)
			usedAddr[loopbackAt(a)] = true
		}
		if _, ok := p.routerPort[e]; !ok {
			port, err := nextFree(&cursor.port, lastPort, FirstCursor.port, func(i int) bool { return usedPort[i] })
			if err != nil {
				return p, cursor, errors.New("no router port is left for a new host:port entry; restart the session")
			}
			p.routerPort[e] = port
			usedPort[port] = true
		}
	}
	return p, cursor, nil
}

// portEntriesOf is the entries that are not SNI-checked, by host and port:
// the order new ones are given addresses and router ports in.
func portEntriesOf(entries []allowlist.Entry) []allowlist.Entry {
	var out []allowlist.Entry
	for _, e := range entries {
		if e.Port != allowlist.TLSPort {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Host != out[j].Host {
			return out[i].Host < out[j].Host
		}
		return out[i].Port < out[j].Port
	})
	return out
}

// nextFree takes *next if it is within last, else the lowest index from
// first that used does not claim: only a session that went through the
// whole space reuses what an earlier list had.
func nextFree(next *int, last, first int, used func(int) bool) (int, error) {
	if *next <= last {
		i := *next
		*next++
		return i, nil
	}
	for i := first; i <= last; i++ {
		if !used(i) {
			return i, nil
		}
	}
	return 0, errors.New("exhausted")
}

// sharedAddress is where every name without a host:port entry resolves:
// the forwarder's 127.0.0.1, which relays TLS by its SNI.
var sharedAddress = loopbackAt(1).String()

// addressOf is where host resolves in the pod.
func (p Plan) addressOf(host string) string {
	if a, ok := p.loopback[host]; ok {
		return a.String()
	}
	return sharedAddress
}

// File is one file of the router's config, named as in /etc/router.
type File struct{ Name, Body string }

// Render is the session's config files for p and a router at routerIP,
// in the order they are to be replaced: nginx.conf first and dnsmasq.conf
// last, since a new name should resolve only once its ports are served.
func (p Plan) Render(routerIP string) []File {
	return []File{
		// Before nginx.conf: a name nginx routes to the inspecting proxy
		// must be one it admits.
		{InspectFile, p.inspectConf(routerIP)},
		{"nginx.conf", p.nginxConf(routerIP)},
		{"api-policy.json", p.apiPolicy(routerIP)},
		{"forwards", p.forwards(routerIP) + "\n"},
		{"dnsmasq.conf", p.dnsmasqConf(routerIP)},
	}
}

func (p Plan) dnsmasqConf(routerIP string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `# Generated by agent-sandbox for one session; do not edit.
# The agent's only resolver. It answers allowlisted names with the pod's
# loopback forwarder and NXDOMAIN for every other name. It has no upstream
# server, so no query the agent makes ever leaves the router.
listen-address=%s
bind-interfaces
port=53
no-resolv
no-hosts
log-queries
log-facility=-
address=/#/
`, routerIP)
	// Written piece by piece, not by Fprintf: a 5,000-entry list is
	// rendered on the start's path (about 3 times faster so).
	b.Grow(len(p.entries) * 64)
	hosts := make(map[string]bool, len(p.entries))
	for _, e := range p.entries {
		switch {
		case e.Wildcard:
			// local= makes AAAA and HTTPS/SVCB answers empty, not NXDOMAIN.
			for _, s := range [...]string{"local=/*.", e.Host, "/\naddress=/*.", e.Host, "/", p.addressOf(e.Host), "\n"} {
				b.WriteString(s)
			}
		case !hosts[e.Host]:
			hosts[e.Host] = true
			// host-record answers the exact name only, A alone.
			for _, s := range [...]string{"host-record=", e.Host, ",", p.addressOf(e.Host), "\n"} {
				b.WriteString(s)
			}
		}
	}
	return b.String()
}

// nginxConf is the router's nginx.conf: a stream block that relays TLS by
// SNI and host:port entries by router port, and the credential proxy's
// http block.
func (p Plan) nginxConf(routerIP string) string {
	var b strings.Builder
	streamHead(&b)
	p.sniMap(&b)
	tlsServer(&b)
	p.portServers(&b, routerIP)
	p.credentialRelays(&b)
	b.WriteString("}\n")
	p.credentialProxy(&b, routerIP)
	return b.String()
}

// streamHead is the start of nginx.conf, up to the stream block's own
// servers: what every session shares.
func streamHead(b *strings.Builder) {
	fmt.Fprintf(b, `# Generated by agent-sandbox for one session; do not edit.
load_module %s;
daemon off;
worker_processes 1;
pid /tmp/nginx.pid;
error_log stderr notice;

events {
    worker_connections 1024;
}

stream {
    # The SNI map's hash: with nginx's defaults (at most 2048 buckets of
    # 64 bytes) a list of thousands of names had nginx try every size,
    # warn, and start again with larger buckets, at each start and reload.
    map_hash_max_size 16384;
    map_hash_bucket_size 512;

    log_format egress '$remote_addr port=$server_port sni="$ssl_preread_server_name" upstream="$upstream_addr" status=$status sent=$bytes_sent received=$bytes_received';
    access_log /dev/stderr egress;

    # Upstream names are resolved at connect time through routerd, which
    # drops answers that point into loopback, link-local or private ranges.
    resolver %s ipv6=off valid=10s;
    resolver_timeout 5s;
    proxy_connect_timeout 10s;
    # ssh, git and many protocols send, half-close, then read the reply.
    proxy_half_close on;
    # Per direction of a busy connection. With the default 16k, moving a
    # large download took nginx twice the CPU (more wake-ups and syscalls
    # per byte); at 1m each new connection paid for mapping it afresh.
    # Only the pages a burst fills become resident.
    proxy_buffer_size 256k;

    # The TLS server listens on a unix socket that only the forwarder can
    # reach, and logs its port as 443 for the denial parsers.
    log_format egress_tls '$remote_addr port=443 sni="$ssl_preread_server_name" upstream="$upstream_addr" status=$status sent=$bytes_sent received=$bytes_received';
`, ngxStreamModule, UpstreamResolver)
}

// sniMap gives each SNI the allowlist names an upstream. The hosts of the
// credential proxy it names only to give them none.
func (p Plan) sniMap(b *strings.Builder) {
	b.WriteString(`
    # Only an allowlisted SNI gets an upstream; anything else is closed.
    map $ssl_preread_server_name $sni_upstream {
        hostnames;
        default "";
`)
	for _, e := range p.entries {
		// hack/mutation-check's credential-sni passes an injected host by
		// SNI too, past the credential proxy.
		if e.Port != allowlist.TLSPort || !e.Wildcard && !mutated("credential-sni") && p.injected(e.Host) {
			continue
		}
		name := e.Host
		if e.Wildcard {
			name = "*." + e.Host
		}
		b.WriteString("        " + name + " " + p.sniUpstream(e) + ";\n")
	}
	if len(p.Routes) > 0 && !mutated("credential-sni") {
		// An exact name beats a wildcard in a hostnames map.
		b.WriteString("        # Inspected, and on through the API gate and the credential proxy\n        # (http below), never by SNI.\n")
		for _, r := range p.Routes {
			fmt.Fprintf(b, "        %s unix:%s;\n", r.Host, InspectSocket)
		}
	}
	b.WriteString("    }\n")
}

// tlsServer is the stream server the forwarder relays TLS to.
func tlsServer(b *strings.Builder) {
	fmt.Fprintf(b, `
    server {
        listen unix:%s;
        access_log /dev/stderr egress_tls;
        ssl_preread on;
        preread_timeout 10s;
        proxy_pass $sni_upstream;
    }
`, TLSSocket)
}

// portServers relays each host:port entry from its router port; nothing
// when there is none.
func (p Plan) portServers(b *strings.Builder, routerIP string) {
	ports := p.sortedPortEntries()
	if len(ports) == 0 {
		return
	}
	// A variable makes nginx resolve at connect time through routerd
	// rather than once at start through the system resolver.
	b.WriteString("\n    map $server_port $port_upstream {\n")
	for _, e := range ports {
		fmt.Fprintf(b, "        %d %s:%d;\n", p.routerPort[e], e.Host, e.Port)
	}
	b.WriteString("    }\n\n    server {\n")
	for _, e := range ports {
		fmt.Fprintf(b, "        listen %s:%d;\n", routerIP, p.routerPort[e])
	}
	b.WriteString("        proxy_pass $port_upstream;\n    }\n")
}

// sniUpstream is where nginx sends TLS for e: routerd's inspecting proxy,
// or for a passthrough entry the host itself, unread.
func (p Plan) sniUpstream(e allowlist.Entry) string {
	// hack/mutation-check's passthrough-all passes every host unread.
	if e.Passthrough || mutated("passthrough-all") {
		return "$ssl_preread_server_name:443"
	}
	return "unix:" + InspectSocket
}

// inspectConf is the inspecting proxy's config (routerd's inspect.go):
// the allowlist's inspected names on 443, exact and wildcard, the CA
// bundle it verifies upstream certificates with, and the API hosts whose
// requests go on to the API gate (which adds the user's key) rather than
// straight to the host. Its certificates are made for these names only.
func (p Plan) inspectConf(routerIP string) string {
	doc := struct {
		Hosts     []string          `json:"hosts"`
		Wildcards []string          `json:"wildcards"`
		TrustedCA string            `json:"trusted_ca"`
		Resolver  string            `json:"resolver"`
		Gates     map[string]string `json:"gates,omitempty"`
		Forge     *Forge            `json:"forge,omitempty"`
	}{TrustedCA: p.TrustedCA, Resolver: UpstreamResolver, Forge: p.Forge}
	doc.Hosts, doc.Wildcards = p.tlsNames(func(e allowlist.Entry) bool { return !e.Passthrough || p.injected(e.Host) })
	if doc.Wildcards == nil {
		doc.Wildcards = []string{}
	}
	for _, r := range p.Routes {
		if doc.Gates == nil {
			doc.Gates = map[string]string{}
		}
		doc.Gates[r.Host] = credentialGate(routerIP, r)
		// nginx sends it here even where only a passthrough wildcard
		// admits it.
		if !slices.Contains(doc.Hosts, r.Host) {
			doc.Hosts = append(doc.Hosts, r.Host)
		}
	}
	b, _ := json.MarshalIndent(doc, "", "  ")
	return string(b) + "\n"
}

// tlsNames are the names of the TLS entries that keep takes: the exact
// hosts, and the suffixes of the wildcards (never nil hosts, for JSON).
func (p Plan) tlsNames(keep func(allowlist.Entry) bool) (hosts, wildcards []string) {
	hosts = []string{}
	for _, e := range p.entries {
		switch {
		case e.Port != allowlist.TLSPort || !keep(e):
		case e.Wildcard:
			wildcards = append(wildcards, e.Host)
		default:
			hosts = append(hosts, e.Host)
		}
	}
	return hosts, wildcards
}

func (p Plan) injected(host string) bool {
	for _, r := range p.Routes {
		if r.Host == host {
			return true
		}
	}
	return false
}

// credentialGate is where the agent's requests for r arrive: routerd's API
// gate on a port of the router's session address, to which the forwarder
// relays 127.0.0.1 and the same port in the pod. credentialListen is where
// nginx serves r's proxy behind the gate: a unix socket in the router's own
// /tmp, which no other container mounts, so that nothing reaches the
// proxy (and the user's key) around the gate's checks.
func credentialGate(routerIP string, r Route) string {
	return fmt.Sprintf("%s:%d", routerIP, r.GatePort)
}

func credentialListen(r Route) string {
	return APIRelayDir + "/api-" + r.Provider + "-proxy.sock"
}

// apiPolicy is the gate's config (routerd's apiproxy.go): each route, the
// rules the user allowed, and the allowlist's names on 443 for a web fetch
// tool's domains. Empty routes when nothing is injected.
func (p Plan) apiPolicy(routerIP string) string {
	type route struct {
		Provider string `json:"provider"`
		Host     string `json:"host"`
		Listen   string `json:"listen"`
		Upstream string `json:"upstream"`
	}
	doc := struct {
		Routes    []route  `json:"routes"`
		Allow     []string `json:"allow,omitempty"`
		Hosts     []string `json:"hosts"`
		Wildcards []string `json:"wildcards,omitempty"`
	}{Routes: []route{}, Allow: p.APIAllow, Hosts: []string{}}
	for _, r := range p.Routes {
		doc.Routes = append(doc.Routes, route{r.Provider, r.Host, credentialGate(routerIP, r), credentialListen(r)})
	}
	doc.Hosts, doc.Wildcards = p.tlsNames(func(allowlist.Entry) bool { return true })
	b, _ := json.MarshalIndent(doc, "", "  ")
	return string(b) + "\n"
}

// APIUpstream is the name of route r's upstream group in the http block,
// and apiRelaySocket the unix socket of its stream relay: one of each per
// provider, as the proxy's listen port is.
func APIUpstream(r Route) string { return "api_" + r.Provider }

func APIRelaySocket(r Route) string {
	return APIRelayDir + "/api-" + r.Provider + ".sock"
}

// credentialRelays writes, into the stream block, the relay that carries
// the credential proxy's TLS connections to each injected host; nothing
// when there is none.
//
// The proxy (http below) keeps its connections to an API host open for
// the next request, which takes an upstream group (ngx_http_upstream_module
// keepalive): with proxy_pass to a variable nginx keeps none and every
// request paid a TCP and TLS handshake to the API host. But the server of
// a group is resolved once, when nginx loads its config, through the
// container's resolver: that would bypass routerd's filtering resolver
// (the router's nginx 1.26 has no `resolve` for upstream servers). So the
// group's one server is this relay's unix socket, and the relay passes the
// bytes on to the host through a variable, which the stream module
// resolves at connect time through routerd (the stream block's resolver),
// as it does every other upstream. TLS stays the http proxy's, end to
// end: it sends the host's name as SNI and verifies its certificate
// through this hop, which sees only ciphertext.
func (p Plan) credentialRelays(b *strings.Builder) {
	if len(p.Routes) == 0 {
		return
	}
	// Its own log format, with neither port= nor sni=: blocked.go reads
	// `port=443 sni="..." upstream="-"` as a connection the allowlist
	// closed, and credentialSummary counts `credentials host=` lines as
	// the proxy's requests; a relay line is neither, but it shows which
	// address routerd let the host resolve to (the http log shows only
	// this socket), one line per upstream connection.
	b.WriteString(`
    # The credential proxy's connections to the API hosts (http below),
    # which it keeps open for further requests: it connects to a socket
    # here, and the host is resolved at connect time through routerd.
    log_format api_relay 'api-relay to=$api_upstream upstream="$upstream_addr" status=$status sent=$bytes_sent received=$bytes_received time=$session_time';
`)
	for _, r := range p.Routes {
		fmt.Fprintf(b, `
    server {
        listen unix:%s;
        access_log /dev/stderr api_relay;
        set $api_upstream %s:443;
        proxy_pass $api_upstream;
    }
`, APIRelaySocket(r), r.Host)
	}
}

// credentialProxy writes the http block of the credential proxy, one
// server for each injected host; nothing when there is none.
func (p Plan) credentialProxy(b *strings.Builder, routerIP string) {
	if len(p.Routes) == 0 {
		return
	}
	fmt.Fprintf(b, `
http {
    # The credential proxy: the agent talks plain HTTP to 127.0.0.1:PORT in
    # its pod, which the forwarder relays here. nginx removes whatever
    # credential the agent sent, adds the user's from a file that only the
    # router mounts, and proxies to the real host over TLS, its certificate
    # verified and its name sent as SNI. No header or query is logged.
    log_format credentials 'credentials host=$api_host method=$request_method path="$uri" status=$status sent=$bytes_sent received=$request_length upstream="$upstream_addr" time=$request_time';
    access_log /dev/stderr credentials;
    server_tokens off;
    # Bodies as large as the APIs take, streamed both ways (SSE) rather
    # than buffered.
    client_max_body_size 0;
    # HTTP/1.1 and no Connection header, as upstream keepalive needs.
    proxy_http_version 1.1;
    proxy_buffering off;
    proxy_request_buffering off;
    proxy_connect_timeout 10s;
    proxy_read_timeout 600s;
    proxy_send_timeout 600s;
    proxy_ssl_server_name on;
    proxy_ssl_verify on;
    proxy_ssl_verify_depth 4;
    proxy_ssl_protocols TLSv1.2 TLSv1.3;
    proxy_ssl_trusted_certificate %s;
`, p.TrustedCA)
	for _, r := range p.Routes {
		credentialServer(b, routerIP, r)
	}
	b.WriteString("}\n")
}

// credentialServer is the proxy of route r: the agent's credential out,
// the user's in. Its upstream group holds the connections to the API host
// open between requests; its one server is the stream relay to the host
// (credentialRelays), so the group names no address nginx would resolve
// when it loads its config.
func credentialServer(b *strings.Builder, routerIP string, r Route) {
	fmt.Fprintf(b, "\n    upstream %s {\n        server unix:%s;\n        keepalive %d;\n    }\n", APIUpstream(r), APIRelaySocket(r), APIKeepalive)
	fmt.Fprintf(b, "\n    server {\n        listen unix:%s;\n        set $api_host %s;\n", credentialListen(r), r.Host)
	if len(r.RefuseArgs) > 0 {
		// The API also takes a key in the query: such a request would
		// use the agent's key, not the user's.
		fmt.Fprintf(b, "        if ($args ~* \"(^|&)([^&=]*%%[^&=]*|%s)(=|&|$)\") {\n            return 403;\n        }\n", strings.Join(r.RefuseArgs, "|"))
	}
	// proxy_ssl_name: the host's name, not the group's, is what nginx
	// sends as SNI and verifies the certificate against.
	fmt.Fprintf(b, `        location / {
            proxy_pass https://%s;
            proxy_ssl_name $api_host;
            proxy_set_header Host $api_host;
            proxy_set_header Connection "";
`, APIUpstream(r))
	for _, h := range r.AgentHeaders {
		// hack/mutation-check's credential-headers lets the agent's own
		// credential headers through.
		if !strings.EqualFold(h, r.Header) && !mutated("credential-headers") {
			fmt.Fprintf(b, "            proxy_set_header %s \"\";\n", h)
		}
	}
	fmt.Fprintf(b, "            # proxy_set_header %s with the user's credential, replacing the agent's.\n            include %s;\n        }\n    }\n", r.Header, r.IncludeFile)
}

func (p Plan) sortedPortEntries() []allowlist.Entry {
	var ports []allowlist.Entry
	for e := range p.routerPort {
		ports = append(ports, e)
	}
	sort.Slice(ports, func(i, j int) bool { return p.routerPort[ports[i]] < p.routerPort[ports[j]] })
	return ports
}

// forwards renders the forwarder's FORWARDS: each listen address in the pod
// and the router port it relays to. Pairs to the router's TLS socket are
// marked /tls: the forwarder refuses a ClientHello there that asks for ECH,
// whose hidden name nginx could not check. The socket is reached through a
// directory only the router and the forwarder mount, so the agent cannot
// get to nginx's TLS server past that check.
func (p Plan) forwards(routerIP string) string {
	return p.forwardPairs("unix:"+TLSSocket+"/tls", routerIP)
}

// ForwardsVia renders the pairs of a forwarder that reaches the router over
// TCP at routerIP (a cluster, where the router runs in a pod of its own):
// TLS goes to the router's port 443, where its own front checks the
// ClientHello again (FrontForwards), since the agent can reach that port
// around its pod's forwarder.
func (p Plan) ForwardsVia(routerIP string) string {
	return p.forwardPairs(routerIP+":443/tls", routerIP)
}

// RenderFronted is Render for a router whose TCP ports are its front's (a
// forwarder with FORWARDER_ROLE=front, FrontForwards): in a cluster, where
// every pod the network lets through reaches the router pod's address, and
// the front lets in only connections that carry the sandbox's link key.
// DNS stays on the pod's address (routerd's DNS front takes port 53 there
// and moves dnsmasq behind it on loopback; it hands out loopback addresses
// and asks no one); the host:port entries' servers listen on the pod's
// loopback, behind the front, and the API gates there too, where only
// routerd's inspecting proxy reaches them.
func (p Plan) RenderFronted() []File {
	const inner = "127.0.0.1"
	return []File{
		{InspectFile, p.inspectConf(inner)},
		{"nginx.conf", p.nginxConf(inner)},
		{"api-policy.json", p.apiPolicy(inner)},
		{"dnsmasq.conf", p.dnsmasqConf("0.0.0.0")},
	}
}

// FrontForwards are the pairs of the router pod's front in a cluster: any
// address's port 443, screened for ECH, to nginx's TLS socket; and each
// host:port entry's router port on podIP (the pod's own address, which the
// front has in a variable) to the same port on loopback, where
// RenderFronted's nginx serves it.
func (p Plan) FrontForwards(podIP string) string {
	pairs := []string{"0.0.0.0:443=unix:" + TLSSocket + "/tls"}
	for _, port := range p.RouterPorts() {
		pairs = append(pairs, fmt.Sprintf("%s:%d=127.0.0.1:%d", podIP, port, port))
	}
	return strings.Join(pairs, " ")
}

// RouterPorts are the router ports that relay the host:port entries, in
// order: with 53 and 443, every port the agent's forwarder connects to.
func (p Plan) RouterPorts() []int {
	var out []int
	for _, e := range p.sortedPortEntries() {
		out = append(out, p.routerPort[e])
	}
	return out
}

func (p Plan) forwardPairs(tls, routerIP string) string {
	pairs := []string{"127.0.0.1:443=" + tls}
	seen := map[netip.Addr]bool{}
	for _, e := range p.sortedPortEntries() {
		addr := p.loopback[e.Host]
		if !seen[addr] {
			// The host's own address must serve HTTPS too, since its
			// name resolves there.
			seen[addr] = true
			pairs = append(pairs, fmt.Sprintf("%s:443=%s", addr, tls))
		}
		pairs = append(pairs, fmt.Sprintf("%s:%d=%s:%d", addr, e.Port, routerIP, p.routerPort[e]))
	}
	pairs = append(pairs, p.Published...)
	return strings.Join(pairs, " ")
}
