// fakeupstream is the e2e suite's whole "internet": an authoritative DNS for
// test names, a TLS/HTTPS server and raw TCP echo ports, all logging every
// received thing one line each so tests can prove what did or did not leak.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/agent-sandbox/agent-sandbox/internal/testpki"
)

type options struct {
	logFile string
	zone    string
	dnsAddr string
	tlsAddr string
	tcpAddr string
	cert    string
	key     string
	caCert  string
	caKey   string
	// The roles below are the security rows' additions; "" turns each off.
	udpAddr   string // UDP datagram loggers, comma-separated
	httpAddr  string // plaintext HTTP, comma-separated
	proxyAddr string // HTTP CONNECT proxies that never dial out, comma-separated
	// ipNames answers names under this suffix whose first label is
	// ip-A-B-C-D[-anything] with A.B.C.D, when ipAllow contains it.
	ipNames string
	ipAllow string
	// sniff logs every frame in the network namespace that carries a
	// nonce, but for the two kinds below.
	sniff bool
	// sniffIgnore: frames whose source and destination both lie in these
	// CIDRs are not logged.
	sniffIgnore string
	// sniffSessions: pools of session networks (/24s, router at .2); a
	// frame between a /24's .2 and another address of it (an agent and
	// its router) is not logged.
	sniffSessions string
	// unreachable: CIDRs given an unreachable route in the network
	// namespace while the fake runs, removed when it stops.
	unreachable string
	// stdinEOF stops the fake when its stdin closes, so that a parent that
	// cannot signal it (podman unshare) ends it by closing a pipe.
	stdinEOF bool
	// gitHosts are served git's smart HTTP protocol on the TLS port, from
	// the bare repositories under gitRoot; "" turns it off.
	gitHosts string
	gitRoot  string
	// gitAuthRepos: repository paths under gitRoot ("/secret.git") that
	// answer 401 to a request without an Authorization header.
	gitAuthRepos string
	// forgeAPIHosts get a small GitHub-like REST and GraphQL API
	// (forge.go); forgeToken is the user's token that API and the
	// gitAuthRepos accept ("" accepts any Authorization, as before).
	forgeAPIHosts string
	forgeToken    string
}

func main() {
	var o options
	flag.StringVar(&o.logFile, "log", "", "append events to this file as well as stdout")
	flag.StringVar(&o.zone, "dns", "", "names to answer, name=IPv4 or *.suffix=IPv4, comma-separated")
	flag.StringVar(&o.dnsAddr, "dns-addr", ":53", "DNS address, UDP and TCP ('' turns DNS off)")
	flag.StringVar(&o.tlsAddr, "tls-addr", ":443", "TLS/HTTPS address ('' turns it off)")
	flag.StringVar(&o.tcpAddr, "tcp-addr", ":2222", "TCP echo addresses, comma-separated ('' turns them off)")
	flag.StringVar(&o.cert, "cert", "", "server certificate PEM")
	flag.StringVar(&o.key, "key", "", "server key PEM")
	flag.StringVar(&o.caCert, "ca-cert", "", "CA certificate PEM, to mint certificates for other *.test names")
	flag.StringVar(&o.caKey, "ca-key", "", "CA key PEM")
	flag.StringVar(&o.udpAddr, "udp-addr", "", "UDP datagram logger addresses, comma-separated")
	flag.StringVar(&o.httpAddr, "http-addr", "", "plaintext HTTP addresses, comma-separated")
	flag.StringVar(&o.proxyAddr, "proxy-addr", "", "HTTP CONNECT proxy addresses (they log and echo, never dial), comma-separated")
	flag.StringVar(&o.ipNames, "ip-names", "", "answer ip-A-B-C-D[-x].SUFFIX with A.B.C.D (needs -ip-allow)")
	flag.StringVar(&o.ipAllow, "ip-allow", "", "CIDRs that -ip-names may answer with, comma-separated")
	flag.BoolVar(&o.sniff, "sniff", false, "log frames carrying a nonce (needs CAP_NET_RAW in the network namespace)")
	flag.StringVar(&o.sniffIgnore, "sniff-ignore", "", "CIDRs: frames between two addresses in them are not logged")
	flag.StringVar(&o.gitHosts, "git-hosts", "", "names whose HTTPS requests go to git http-backend, comma-separated")
	flag.StringVar(&o.gitRoot, "git-root", "", "directory of the bare repositories the git hosts serve")
	flag.StringVar(&o.gitAuthRepos, "git-auth-repos", "", "repository paths (/secret.git) that answer 401 Basic to a request without Authorization, comma-separated")
	flag.StringVar(&o.forgeAPIHosts, "forge-api-hosts", "", "names whose HTTPS requests go to a GitHub-like REST and GraphQL API, comma-separated")
	flag.StringVar(&o.forgeToken, "forge-token", "", "the user's token the forge API and the -git-auth-repos accept (Bearer or token; Basic password for git); '' accepts any Authorization")
	flag.StringVar(&o.sniffSessions, "sniff-sessions", "", "session pools, comma-separated: frames between a /24's .2 (its router) and another address of that /24 are not logged")
	flag.StringVar(&o.unreachable, "unreachable", "", "CIDRs to give an unreachable route in this network namespace while running (needs CAP_NET_ADMIN)")
	flag.BoolVar(&o.stdinEOF, "exit-on-stdin-eof", false, "stop when stdin closes")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if o.stdinEOF {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			stop()
		}()
	}
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fakeupstream:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, stdout io.Writer) error {
	out := stdout
	if o.logFile != "" {
		f, err := os.OpenFile(o.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_SYNC, 0o644)
		if err != nil {
			return fmt.Errorf("open log: %w (is the log directory mounted?)", err)
		}
		defer f.Close()
		out = io.MultiWriter(f, stdout)
	}
	srv, err := start(o, &eventLog{w: out})
	if err != nil {
		return err
	}
	<-ctx.Done()
	srv.close()
	return nil
}

// running holds the bound listeners; tests use their addresses.
type running struct {
	log      *eventLog
	dnsUDP   net.PacketConn
	dnsTCP   net.Listener
	tls      net.Listener
	tcp      []net.Listener
	udp      []net.PacketConn
	http     []net.Listener
	proxy    []net.Listener
	sniffing bool
	git      *gitServer
	forge    *forgeServer
	// unreachable are the routes added for -unreachable.
	unreachable []netip.Prefix
	listeners   []io.Closer
}

func start(o options, log *eventLog) (_ *running, err error) {
	r := &running{log: log}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	z, err := parseZone(o.zone)
	if err != nil {
		return nil, err
	}
	if err := z.setIPNames(o.ipNames, o.ipAllow); err != nil {
		return nil, err
	}
	if o.dnsAddr != "" {
		if err := r.startDNS(o.dnsAddr, z); err != nil {
			return nil, err
		}
	}
	if o.tlsAddr != "" {
		if err := r.startTLS(o); err != nil {
			return nil, err
		}
	}
	for _, addr := range strings.Split(o.tcpAddr, ",") {
		if addr = strings.TrimSpace(addr); addr == "" {
			continue
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("tcp echo: %w", err)
		}
		r.add(l)
		r.tcp = append(r.tcp, l)
		go (&echoServer{log: log}).serve(l)
	}
	if err := r.startExtras(o); err != nil {
		return nil, err
	}
	// The suite waits for this line before it sends anything.
	log.printf("ready dns=%s tls=%s tcp=%s%s%s", r.dnsAddrString(), addrString(r.tls), r.tcpAddrs(), r.extrasString(), r.git.String()+r.forge.String())
	return r, nil
}

func (r *running) startDNS(addr string, z *zone) error {
	pc, l, err := listenDNS(addr)
	if err != nil {
		return err
	}
	r.add(pc)
	r.add(l)
	r.dnsUDP, r.dnsTCP = pc, l
	s := &dnsServer{zone: z, log: r.log}
	s.serve(pc, l)
	return nil
}

// listenDNS binds UDP and TCP on one port; for ":0" (tests) it retries
// because the kernel's free UDP port may be taken for TCP.
func listenDNS(addr string) (net.PacketConn, net.Listener, error) {
	_, port, _ := net.SplitHostPort(addr)
	for attempt := 0; ; attempt++ {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("dns udp: %w", err)
		}
		l, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, l, nil
		}
		pc.Close()
		if port != "0" || attempt == 20 {
			return nil, nil, fmt.Errorf("dns tcp: %w", err)
		}
	}
}

func (r *running) startTLS(o options) error {
	var static *tls.Certificate
	if o.cert != "" || o.key != "" {
		c, err := tls.LoadX509KeyPair(o.cert, o.key)
		if err != nil {
			return fmt.Errorf("load -cert/-key: %w", err)
		}
		static = &c
	}
	var ca *testpki.CA
	if o.caCert != "" || o.caKey != "" {
		var err error
		if ca, err = testpki.LoadCA(o.caCert, o.caKey); err != nil {
			return err
		}
	}
	s, err := newTLSServer(r.log, static, ca)
	if err != nil {
		return err
	}
	if s.git, err = newGitServer(r.log, o.gitHosts, o.gitRoot, o.gitAuthRepos); err != nil {
		return err
	}
	if s.git != nil {
		s.git.token = o.forgeToken
	}
	s.forge = newForgeServer(r.log, o.forgeAPIHosts, o.forgeToken)
	if err := checkForge(s.forge, s.git); err != nil {
		return err
	}
	r.git, r.forge = s.git, s.forge
	l, err := net.Listen("tcp", o.tlsAddr)
	if err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	r.add(l)
	r.tls = l
	go s.serve(l)
	return nil
}

func (r *running) add(c io.Closer) { r.listeners = append(r.listeners, c) }

func (r *running) close() {
	for _, c := range r.listeners {
		_ = c.Close()
	}
}

func (r *running) dnsAddrString() string {
	if r.dnsUDP == nil {
		return "off"
	}
	return r.dnsUDP.LocalAddr().String()
}

func (r *running) tcpAddrs() string {
	var s []string
	for _, l := range r.tcp {
		s = append(s, l.Addr().String())
	}
	if len(s) == 0 {
		return "off"
	}
	return strings.Join(s, ",")
}

func addrString(l net.Listener) string {
	if l == nil {
		return "off"
	}
	return l.Addr().String()
}
