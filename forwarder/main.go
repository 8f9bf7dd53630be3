// forwarder runs inside the agent's pod and relays connections made to
// loopback addresses on to the session's router, the pod's only way out.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// dialTimeout bounds how long a client waits when the router is unreachable.
const dialTimeout = 5 * time.Second

type forward struct {
	listen netip.AddrPort
	target netip.AddrPort
	// socket, when set, is the target instead: a unix socket (the
	// router's TLS server, which the agent has no path to).
	socket string
	// tls says the pair carries TLS: each client's ClientHello is read
	// and looked at before anything is relayed (see readHello).
	tls bool
	// published says the pair takes connections from the host (a port
	// published with --publish) on the pod's own address and relays them
	// to a server inside, on loopback; publishedAs is the name and port
	// a browser must use (see screenPublished).
	published   bool
	publishedAs publishedHost
	// sendLink is the preamble an agent's forwarder writes first to the
	// router over TCP (link.go); wantLink, the one a front requires of
	// each client.
	sendLink, wantLink []byte
}

// tlsOption marks a pair that carries TLS: LISTEN=TARGET/tls.
const tlsOption = "/tls"

// publishOption marks a published port's pair:
// POD_IP:PORT=127.0.0.1:PORT/publish=NAME.localhost:HOST_PORT.
const publishOption = "/publish="

// describe is how a pair's destination is logged.
func (f forward) describe() string {
	t := f.target.String()
	if f.socket != "" {
		t = "unix:" + f.socket
	}
	if f.tls {
		return t + " (TLS; a ClientHello with ECH is refused)"
	}
	if f.published {
		return t + " (a port published to the host)"
	}
	return t
}

// dialTarget is the network and address to dial for f.
func (f forward) dialTarget() (string, string) {
	if f.socket != "" {
		return "unix", f.socket
	}
	return "tcp", f.target.String()
}

const readyLine = "forwarder: ready"

func main() {
	if isGate(os.Args) {
		gateMain()
	}
	if os.Getenv("GOMAXPROCS") == "" {
		// One thread runs every relay: the work is in the kernel, and a
		// second P only adds threads that wake each other.
		runtime.GOMAXPROCS(1)
	}
	os.Exit(run())
}

func run() int {
	forwards, file, err := forwardsFromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "forwarder: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := serveWatching(ctx, forwards, file); err != nil {
		fmt.Fprintf(os.Stderr, "forwarder: %v\n", err)
		return 1
	}
	return 0
}

// The roles a forwarder plays (FORWARDER_ROLE).
const (
	// roleAgent, the default, runs in the agent's pod: it listens on the
	// pod's loopback, where the router's DNS sends the agent.
	roleAgent = "agent"
	// roleFront runs in the router's pod in a cluster (kube export), where
	// the agent can connect to the router's port 443 around its own
	// forwarder: the front takes that port on the pod's addresses and
	// screens each ClientHello again before nginx's TLS socket sees it.
	roleFront = "front"
)

// forwardsFromEnv reads FORWARDS, or FORWARDS_FILE, which is then followed
// for changes; a front takes FORWARDS alone, of the one shape it may have.
func forwardsFromEnv(getenv func(string) string) ([]forward, *forwardsFile, error) {
	var preamble []byte
	if k := getenv("LINK_KEY"); k != "" {
		p, err := parseLinkKey(k)
		if err != nil {
			return nil, nil, err
		}
		preamble = p
	}
	switch role := getenv("FORWARDER_ROLE"); role {
	case "", roleAgent:
	case roleFront:
		if getenv("FORWARDS_FILE") != "" {
			return nil, nil, errors.New("FORWARDER_ROLE=front takes FORWARDS, not FORWARDS_FILE: a front's pairs never change")
		}
		if preamble == nil {
			return nil, nil, errors.New("FORWARDER_ROLE=front needs LINK_KEY: the sandbox's link key, which the agent pod's forwarder sends first (kube export puts it in a Secret)")
		}
		fs, err := parseFrontForwards(getenv("FORWARDS"))
		for i := range fs {
			fs[i].wantLink = preamble
		}
		return fs, nil, err
	default:
		return nil, nil, fmt.Errorf("FORWARDER_ROLE=%q is not a role: use %s (the default) or %s", role, roleAgent, roleFront)
	}
	path := getenv("FORWARDS_FILE")
	if path == "" {
		fs, err := parseForwards(getenv("FORWARDS"))
		return linked(fs, preamble), nil, err
	}
	if strings.TrimSpace(getenv("FORWARDS")) != "" {
		return nil, nil, errors.New("both FORWARDS and FORWARDS_FILE are set; set one of them")
	}
	f := &forwardsFile{path: path, every: forwardsPoll, link: preamble}
	fs, _, err := f.read()
	if err != nil {
		return nil, nil, err
	}
	return fs, f, nil
}

// parseForwards reads FORWARDS: whitespace-separated
// LISTEN_IP:PORT=TARGET_IP:PORT, each optionally followed by /tls.
func parseForwards(s string) ([]forward, error) { return parsePairs(s, parseForward, "") }

// parsePairs reads whitespace-separated pairs with parse; each listen
// address may appear once. role names the forwarder's role in errors.
func parsePairs(s string, parse func(string) (forward, error), role string) ([]forward, error) {
	var out []forward
	seen := map[netip.AddrPort]bool{}
	for _, pair := range strings.Fields(s) {
		f, err := parse(pair)
		if err != nil {
			return nil, fmt.Errorf("bad FORWARDS pair %q%s: %w", pair, role, err)
		}
		if seen[f.listen] {
			return nil, fmt.Errorf("bad FORWARDS pair %q%s: duplicate listen address %s (each listen address may appear once)", pair, role, f.listen)
		}
		seen[f.listen] = true
		out = append(out, f)
	}
	return out, nil
}

func parseForward(pair string) (forward, error) {
	listen, target, ok := strings.Cut(pair, "=")
	if !ok {
		return forward{}, errors.New("missing '=' (want LISTEN_IP:PORT=TARGET_IP:PORT, optionally followed by /tls)")
	}
	if target, as, ok := strings.Cut(target, publishOption); ok {
		return parsePublished(listen, target, as)
	}
	target, tls := strings.CutSuffix(target, tlsOption)
	if path, ok := strings.CutPrefix(target, "unix:"); ok {
		l, err := parseListen(listen)
		if err != nil {
			return forward{}, err
		}
		if !filepath.IsAbs(path) || filepath.Clean(path) != path {
			return forward{}, fmt.Errorf("bad target socket %q: want unix:/ABSOLUTE/PATH", path)
		}
		return forward{listen: l, socket: path, tls: tls}, nil
	}
	if i := strings.LastIndexByte(target, '/'); i >= 0 {
		return forward{}, fmt.Errorf("unknown option %q after the target (the options are %s and %s)", target[i:], tlsOption, publishOption)
	}
	l, err := parseListen(listen)
	if err != nil {
		return forward{}, err
	}
	t, err := parseAddrPort("target", target)
	if err != nil {
		return forward{}, err
	}
	return forward{listen: l, target: t, tls: tls}, nil
}

// frontShapes are the pair shapes a front takes: TLS to nginx's socket,
// and a port of the router pod's own address to the same port on its
// loopback (a host:port entry's nginx server, which listens there).
const frontShapes = "0.0.0.0:PORT=unix:/PATH/tls or POD_IP:PORT=127.0.0.1:PORT"

// parseFrontForwards reads a front's FORWARDS: each pair listens on every
// IPv4 address of the router's pod and relays TLS, screened, to a unix
// socket (nginx's TLS server). A TCP target would make the front a way to
// any address the router's pod reaches; a pair without /tls, a way around
// the screening.
func parseFrontForwards(s string) ([]forward, error) {
	out, err := parsePairs(s, parseFront, " for FORWARDER_ROLE=front")
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("FORWARDER_ROLE=front needs FORWARDS: " + frontShapes)
	}
	return out, nil
}

func parseFront(pair string) (forward, error) {
	listen, target, ok := strings.Cut(pair, "=")
	if !ok {
		return forward{}, errors.New("missing '=' (want " + frontShapes + ")")
	}
	l, err := parseAddrPort("listen", listen)
	if err != nil {
		return forward{}, err
	}
	if !strings.HasPrefix(target, "unix:") {
		return parseFrontLoopback(l, target)
	}
	if l.Addr() != netip.IPv4Unspecified() {
		return forward{}, fmt.Errorf("a front listens on 0.0.0.0 (the router pod's addresses), not %s", l.Addr())
	}
	path, tls := strings.CutSuffix(target, tlsOption)
	if !tls {
		return forward{}, errors.New("a front relays TLS alone, screened: end the target with " + tlsOption)
	}
	path, ok = strings.CutPrefix(path, "unix:")
	if !ok || !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return forward{}, fmt.Errorf("a front relays to nginx's unix socket alone: want unix:/ABSOLUTE/PATH%s, not %s", tlsOption, target)
	}
	// hack/mutation-check's front-screen-off: the front passes every
	// ClientHello on unread.
	return forward{listen: l, socket: path, tls: !mutated("front-screen-off")}, nil
}

// parseFrontLoopback reads a front's pair to its own pod's loopback: the
// same port, so that the front reaches the one server behind it and no
// other port or address. It listens on the pod's own address (the server
// has the port on loopback, where 0.0.0.0 could not be bound too).
func parseFrontLoopback(l netip.AddrPort, target string) (forward, error) {
	t, err := parseAddrPort("target", target)
	if err != nil {
		return forward{}, err
	}
	if a := l.Addr(); !a.Is4() || a.IsLoopback() || a.IsUnspecified() {
		return forward{}, fmt.Errorf("a front's pair to loopback listens on the router pod's own IPv4 address, not %s", a)
	}
	if t.Addr() != netip.AddrFrom4([4]byte{127, 0, 0, 1}) || t.Port() != l.Port() {
		return forward{}, fmt.Errorf("a front relays to 127.0.0.1 on the port it listens on (%d) alone, not %s", l.Port(), t)
	}
	return forward{listen: l, target: t}, nil
}

// parsePublished reads a published port's pair: it listens on the pod's
// own address, where the host's connections arrive, and relays only to
// the pod's loopback, the server inside. It opens no way out.
func parsePublished(listen, target, as string) (forward, error) {
	name, port, ok := strings.Cut(as, ":")
	if !ok || !strings.HasSuffix(name, ".localhost") || strings.ContainsAny(name, "/:@ ") {
		return forward{}, fmt.Errorf("published name %q is not NAME.localhost:PORT", as)
	}
	if _, err := parsePort(port); err != nil {
		return forward{}, fmt.Errorf("published name %q has a bad port", as)
	}
	l, err := parseAddrPort("listen", listen)
	if err != nil {
		return forward{}, err
	}
	if l.Addr().IsLoopback() || l.Addr().IsUnspecified() {
		return forward{}, fmt.Errorf("published listen address %s is not the pod's own address", l.Addr())
	}
	t, err := parseAddrPort("target", target)
	if err != nil {
		return forward{}, err
	}
	if !t.Addr().IsLoopback() {
		return forward{}, fmt.Errorf("published target %s is not loopback: a published port reaches only a server in the sandbox", t)
	}
	return forward{listen: l, target: t, published: true, publishedAs: publishedHost(as)}, nil
}

// parseListen reads a pair's listen address, which must be in the pod's
// loopback: the agent's connections reach the forwarder there alone.
func parseListen(s string) (netip.AddrPort, error) {
	l, err := parseAddrPort("listen", s)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if !l.Addr().IsLoopback() {
		return netip.AddrPort{}, fmt.Errorf("listen address %s is not loopback (use 127.0.0.0/8 or ::1)", l.Addr())
	}
	return l, nil
}

// parseAddrPort is stricter than netip.ParseAddrPort so that the error says
// which half of IP:PORT is wrong.
func parseAddrPort(what, s string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("bad %s address %q: want IP:PORT ([IP]:PORT for IPv6)", what, s)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.Zone() != "" {
		return netip.AddrPort{}, fmt.Errorf("bad %s IP %q: want a literal IPv4 or IPv6 address", what, host)
	}
	p, err := parsePort(port)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("bad %s port %q: want 1-65535", what, port)
	}
	return netip.AddrPortFrom(ip, p), nil
}

func parsePort(s string) (uint16, error) {
	if s == "" || len(s) > 5 {
		return 0, errors.New("bad port")
	}
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, errors.New("bad port")
		}
		n = n*10 + int(c-'0')
	}
	if n < 1 || n > 65535 {
		return 0, errors.New("bad port")
	}
	return uint16(n), nil
}

type listener struct {
	ln *net.TCPListener
	forward
	// ctx ends when the pair is removed or the forwarder stops, and with
	// it every relay accepted here: open counts those relays.
	ctx    context.Context
	cancel context.CancelFunc
	open   *atomic.Int64
	// log is where a refused ClientHello is reported.
	log io.Writer
}

// serveWatching listens on every forward before relaying any, so a bad
// address fails the start rather than leaving a half-working pod, and
// serves them until ctx ends (see serveListeners).
func serveWatching(ctx context.Context, forwards []forward, file *forwardsFile) error {
	ls, err := listenAll(forwards)
	if err != nil {
		return err
	}
	serveListeners(ctx, ls, file, os.Stderr)
	return nil
}

// serveListeners says on log where ls listen and that the forwarder is
// ready, and relays what they accept until ctx ends. It also follows file,
// when there is one: a change opens listeners for new pairs and closes
// those of removed pairs with their open relays. At the end it closes the
// listeners and every open relay, and returns once they are all gone.
func serveListeners(ctx context.Context, ls []listener, file *forwardsFile, log io.Writer) {
	// The launcher, attached to our output, starts the agent on this line:
	// first, since every listener is open already. A list of many
	// host:port entries is a line each, which the launcher need not wait
	// for.
	fmt.Fprintln(log, readyLine)
	current := make([]forward, len(ls))
	for i, l := range ls {
		current[i] = l.forward
		fmt.Fprintf(log, "forwarder: listening on %s, forwarding to %s\n", l.ln.Addr(), l.describe())
	}
	r := newRelays(ctx, log)
	for _, l := range ls {
		r.start(l)
	}
	if file != nil {
		r.follow(file, current)
	}
	<-ctx.Done()
	r.wait()
}

func listenAll(forwards []forward) ([]listener, error) {
	reserveFDs(len(forwards))
	var ls []listener
	for _, f := range forwards {
		ln, err := listen(f)
		if err != nil {
			for _, l := range ls {
				_ = l.ln.Close()
			}
			return nil, err
		}
		ls = append(ls, listener{ln: ln, forward: f})
	}
	return ls, nil
}

func listen(f forward) (*net.TCPListener, error) {
	lc := net.ListenConfig{KeepAlive: -1} // as for the dial in relay
	// Plain TCP: since Go 1.24 a listener is MPTCP by default, which
	// relays on the pod's loopback have no use for, and each such socket
	// carries a subflow of its own.
	lc.SetMultipathTCP(false)
	// tcp4 for an IPv4 address: "tcp" would make a front's 0.0.0.0 a
	// dual-stack socket that takes IPv6 too.
	network := "tcp"
	if f.listen.Addr().Is4() {
		network = "tcp4"
	}
	ln, err := lc.Listen(context.Background(), network, f.listen.String())
	if err != nil {
		return nil, fmt.Errorf("cannot listen on %s: %w (is another process using it, or is NET_BIND_SERVICE missing?)", f.listen, err)
	}
	return ln.(*net.TCPListener), nil
}

func acceptLoop(l *listener, wg *sync.WaitGroup) {
	backoff := 5 * time.Millisecond
	for {
		c, err := l.ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || l.ctx.Err() != nil {
				return
			}
			// Out of file descriptors and the like: wait for relays to end
			// instead of spinning.
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		l.open.Add(1)
		wg.Go(func() {
			defer l.open.Add(-1)
			relay(l, c)
		})
	}
}

// relay connects client to l's target and copies both ways until both
// are done, or l.ctx ends. On a TLS pair the client's ClientHello is read
// first: one that asks for ECH is refused before anything is dialled; what
// the client sends after one that passes is watched for a later
// ClientHello (see watchClient) before it is spliced.
func relay(l *listener, client *net.TCPConn) {
	if l.wantLink != nil && !checkLink(l, client) {
		return
	}
	if l.published {
		relayPublished(l, client)
		return
	}
	ctx := l.ctx
	var hello *helloBuf
	watching := false // a ClientHello passed: watch what follows it
	if l.tls {
		var ok bool
		if hello, watching, ok = screenHello(l, client); !ok {
			return
		}
	}
	defer func() { hello.release() }()
	// No keepalive probes: both ends of this hop are on this machine, and
	// each probe setting costs a syscall per connection.
	d := net.Dialer{Timeout: dialTimeout, KeepAlive: -1}
	network, addr := l.dialTarget()
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		// A reset tells the client the connection failed, not that the
		// server had nothing to say.
		reset(client)
		return
	}
	upstream := c.(relayConn)
	if l.sendLink != nil {
		if _, err := upstream.Write(l.sendLink); err != nil {
			reset(client)
			_ = upstream.Close()
			return
		}
	}
	closeBoth := func() {
		_ = client.Close()
		_ = upstream.Close()
	}
	defer context.AfterFunc(ctx, closeBoth)()
	var wg sync.WaitGroup
	switch {
	case watching:
		// The hello and what came after it are passed on by the watch,
		// which owns them from here.
		h := hello
		hello = nil
		wg.Go(func() { watchClient(l, upstream, client, h, closeBoth) })
	case hello != nil && len(hello.b) > 0:
		if _, err := upstream.Write(hello.b); err != nil {
			closeBoth()
			return
		}
		hello.release()
		hello = nil
		fallthrough
	default:
		wg.Go(func() { pipe(upstream, client, closeBoth) })
	}
	wg.Go(func() { pipe(client, upstream, closeBoth) })
	wg.Wait()
	closeBoth()
}

// screenHello reads the ClientHello of a client of l, a TLS pair, before
// anything is dialled. ok is false when the client is closed: its hello
// asks for ECH, did not come whole, or l.ctx ended meanwhile. Otherwise
// hello is what was read, to be passed on, and watching says it was a
// ClientHello that passed, so that what follows it is to be watched.
func screenHello(l *listener, client *net.TCPConn) (hello *helloBuf, watching, ok bool) {
	// Ending ctx while the client is still sending closes it.
	stop := context.AfterFunc(l.ctx, func() { _ = client.Close() })
	hello, v, typ := readHello(client)
	if !stop() {
		hello.release()
		return nil, false, false
	}
	switch v {
	case helloPlain:
		return hello, true, true
	case helloECH:
		fmt.Fprintf(l.log, "forwarder: refused a TLS ClientHello with %s (0x%04x) on %s\n", extName(typ), typ, l.ln.Addr())
	case helloIncomplete:
		// Too slow, or the client went away. nginx, had it been the one
		// waiting, would have closed it at its preread timeout; passing
		// it on would give the rest of the hello a second wait there,
		// past this check.
	default:
		return hello, false, true
	}
	reset(client)
	hello.release()
	return nil, false, false
}

// reset closes c with a RST rather than a FIN.
func reset(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}

// pipe copies src to dst with splice (see relayCopy). A clean EOF is passed
// on as a half-close; an error aborts both directions, since the other one
// may otherwise wait forever.
func pipe(dst, src relayConn, abort func()) {
	if err := relayCopy(dst, src); err != nil {
		abort()
		return
	}
	_ = dst.CloseWrite()
}

// relayConn is either end of a relay: a TCP client, or the router over
// TCP or a unix socket.
type relayConn interface {
	net.Conn
	syscall.Conn
	CloseWrite() error
}
