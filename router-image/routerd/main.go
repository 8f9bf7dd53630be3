// routerd is the router container's entrypoint: it runs the upstream DNS
// filter that nginx resolves through, the API gate and the TLS-inspecting
// proxy (inspect.go), and supervises dnsmasq and nginx, reloading them
// when the launcher rewrites their config.
package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agent-sandbox/agent-sandbox/router-image/routerd/inspect"
)

const (
	defaultDNSListen  = "127.0.0.1:5353"
	defaultConfigDir  = "/etc/router"
	defaultResolvConf = "/etc/resolv.conf"
	// defaultRunDir holds the config copies the children run with.
	defaultRunDir = "/run/routerd"
	stopGrace     = 2 * time.Second
)

// dnsmasqBackend is where dnsmasq listens, behind the DNS front on the
// router's address.
var dnsmasqBackend = netip.MustParseAddrPort("127.0.0.1:5354")

type config struct {
	// readyAddr is the router's session address; when dnsmasq and nginx
	// both accept, routerd prints readyLine for the launcher.
	readyAddr netip.Addr
	// front, when set, is the router's DNS address, served by routerd
	// and passed on to dnsmasq at backend.
	front, backend netip.AddrPort
	// tlsSocket is nginx's TLS server (TLS_SOCKET), which the forwarder
	// alone reaches; "" when nginx listens on the router's address.
	tlsSocket string
	dnsListen string
	upstreams []netip.AddrPort
	allow     []netip.Prefix
	children  []child
	// watch names the config files whose changes reach the children
	// while they run.
	watch []watched
	// apiPolicy is the API gate's config file (apiproxy.go); "" for none.
	apiPolicy string
	// inspectSocket is where nginx passes the connections routerd
	// inspects (INSPECT_SOCKET; "" for no inspection), caDir where the
	// session CA goes for the launcher (CA_DIR), inspectFile the
	// proxy's config (inspect.go).
	inspectSocket, caDir, inspectFile string
	// caListen, when set, serves the CA's certificate and bundle from
	// caDir over HTTP (CA_LISTEN, caport.go): a cluster's agent pod
	// fetches them there.
	caListen netip.AddrPort
	// ready, when set, replaces the listeners announceReady waits for
	// (tests name their own).
	ready []readyTarget
}

// startLine is routerd's first line: the launcher's exit report, which
// reads the log's tail, knows the log is whole when it sees this line.
const startLine = "routerd: starting"

func main() {
	fmt.Fprintln(os.Stderr, startLine)
	if os.Getenv("GOMAXPROCS") == "" {
		// A second P only adds threads that wake each other for work
		// this small, and on the two-vCPU guests this runs on each
		// wake-up is a costly context switch. The inspecting proxy's is
		// not small: it decrypts and encrypts every byte, and with two
		// the inspected upload went from 0.35 to 0.57 of direct
		// (BENCHMARKS.md).
		procs := 1
		if os.Getenv("INSPECT_SOCKET") != "" {
			procs = 2
		}
		runtime.GOMAXPROCS(procs)
	}
	cfg, err := configFromEnv(os.Getenv, defaultResolvConf, defaultConfigDir)
	if err == nil {
		err = refuseLocal(cfg.readyAddr, os.Getenv("HOST_ADDRS"), os.Stderr)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "routerd: %v\n", err)
		os.Exit(2)
	}
	os.Exit(runUntilSignal(cfg))
}

func runUntilSignal(cfg config) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return run(ctx, cfg, os.Stdout, os.Stderr)
}

// defaultChildren: dnsmasq runs with routerd's copy of its config (see
// defaultWatches), nginx with the launcher's file.
func defaultChildren(configDir, runDir string) []child {
	return []child{
		{"dnsmasq", []string{"dnsmasq", "--keep-in-foreground", "--conf-file=" + filepath.Join(runDir, "dnsmasq.conf")}},
		{"nginx", []string{"nginx", "-c", filepath.Join(configDir, "nginx.conf")}},
	}
}

func configFromEnv(getenv func(string) string, resolvConf, configDir string) (config, error) {
	allow, err := parseAllow(getenv("UPSTREAM_ALLOW"))
	if err != nil {
		return config{}, err
	}
	upstreams, err := parseUpstreams(getenv("UPSTREAM_DNS"))
	if err != nil {
		return config{}, err
	}
	if len(upstreams) == 0 {
		if upstreams, err = resolvConfServers(resolvConf); err != nil {
			return config{}, err
		}
	}
	if len(upstreams) == 0 {
		return config{}, fmt.Errorf("no upstream DNS servers: set UPSTREAM_DNS or add nameserver lines to %s", resolvConf)
	}
	inspectSocket, caDir := strings.TrimSpace(getenv("INSPECT_SOCKET")), strings.TrimSpace(getenv("CA_DIR"))
	if inspectSocket != "" && caDir == "" {
		return config{}, fmt.Errorf("INSPECT_SOCKET is set but CA_DIR is not: the agent could not trust the session CA (the launcher sets both)")
	}
	caListen, err := parseCAListen(getenv("CA_LISTEN"))
	if err != nil {
		return config{}, err
	}
	if caListen.IsValid() && (caDir == "" || inspectSocket == "") {
		return config{}, fmt.Errorf("CA_LISTEN is set but INSPECT_SOCKET or CA_DIR is not: there is no session CA to serve (set all three)")
	}
	v := strings.TrimSpace(getenv("READY_ADDR"))
	ready, err := netip.ParseAddr(v)
	if err != nil {
		return config{}, fmt.Errorf("bad READY_ADDR %q: want the router's IP address on the session network (the launcher sets it)", v)
	}
	return config{
		readyAddr: ready,
		tlsSocket: strings.TrimSpace(getenv("TLS_SOCKET")),
		front:     netip.AddrPortFrom(ready, 53),
		backend:   dnsmasqBackend,
		dnsListen: defaultDNSListen,
		upstreams: upstreams,
		allow:     allow,
		children:  defaultChildren(configDir, defaultRunDir),
		watch:     defaultWatches(configDir, defaultRunDir, dnsmasqBackend),
		apiPolicy: filepath.Join(configDir, apiPolicyFile),

		inspectSocket: inspectSocket,
		caDir:         caDir,
		inspectFile:   filepath.Join(configDir, inspect.ConfigFile),
		caListen:      caListen,
	}, nil
}

// parseUpstreams reads UPSTREAM_DNS: comma-separated addresses, port 53
// unless given as IP:PORT or [IPv6]:PORT.
func parseUpstreams(s string) ([]netip.AddrPort, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []netip.AddrPort
	for _, f := range strings.Split(s, ",") {
		a, err := parseServer(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("bad UPSTREAM_DNS entry %q: want an IPv4 or IPv6 address such as 10.89.1.1", strings.TrimSpace(f))
		}
		out = append(out, a)
	}
	return out, nil
}

func parseServer(s string) (netip.AddrPort, error) {
	if ip, err := netip.ParseAddr(s); err == nil {
		return netip.AddrPortFrom(ip, 53), nil
	}
	a, err := netip.ParseAddrPort(s)
	if err == nil && a.Port() == 0 {
		return a, fmt.Errorf("port 0")
	}
	return a, err
}

// resolvConfServers returns the nameservers of a resolv.conf file.
func resolvConfServers(path string) ([]netip.AddrPort, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("no UPSTREAM_DNS and cannot read %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	var out []netip.AddrPort
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[0] != "nameserver" {
			continue
		}
		ip, err := netip.ParseAddr(fields[1])
		if err != nil {
			return nil, fmt.Errorf("%s: bad nameserver %q: set UPSTREAM_DNS instead", path, fields[1])
		}
		out = append(out, netip.AddrPortFrom(ip, 53))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", path, err)
	}
	return out, nil
}

// run starts the DNS filter before the children, since nginx resolves
// through it, and the DNS front, and returns the process exit code.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) int {
	logger := log.New(stderr, "routerd: ", 0)
	f := &filter{upstreams: cfg.upstreams, allow: cfg.allow, timeout: upstreamTimeout, log: logger}
	srv, err := listenDNS(f, cfg.dnsListen)
	if err != nil {
		logger.Printf("dns filter: %v", err)
		return 1
	}
	servers := map[string]*dnsServer{"dns filter": srv}
	if cfg.front.IsValid() {
		fr, err := listenDNS(&front{backend: cfg.backend, attempt: frontAttempt, patience: frontPatience}, cfg.front.String())
		if err != nil {
			logger.Printf("dns front: %v", err)
			_ = srv.udp.Close()
			_ = srv.tcp.Close()
			return 1
		}
		servers["dns front"] = fr
	}
	// Deferred in this order, the servers are stopped and then awaited.
	var served sync.WaitGroup
	defer served.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// One each for the servers, the inspecting proxy, the CA port and a
	// failed start of those.
	stopped := make(chan error, len(servers)+3)
	for name, s := range servers {
		served.Go(func() {
			if err := s.serve(ctx); err != nil {
				stopped <- fmt.Errorf("%s stopped: %w", name, err)
			}
		})
	}
	// dnsmasq and nginx are started first, since theirs is the longest
	// part of the router's start (a long list's configs to read); the
	// API gate, the inspecting proxy and the CA port, which neither
	// needs, are set up meanwhile, and the ready line waits for all.
	reloads := make(chan reload)
	if len(cfg.watch) > 0 {
		w := newConfigWatcher(cfg.watch, logger)
		// Before the children start: dnsmasq reads the copy this makes.
		if err := w.prepare(); err != nil {
			logger.Printf("%v", err)
			return 1
		}
		go w.follow(ctx, configPoll, reloads)
	}
	s := &supervisor{children: cfg.children, grace: stopGrace, stdout: stdout, stderr: stderr, log: logger, reloads: reloads, cut: nginxCutter}
	supervised := make(chan int, 1)
	go func() { supervised <- s.run(ctx, stopped) }()
	px, closeGate, err := startServices(ctx, cfg, stdout, logger, &served, stopped)
	defer closeGate()
	if err != nil {
		// The supervisor stops the children, logs it and returns 1.
		stopped <- err
		return <-supervised
	}
	if targets := cfg.readyTargets(); targets != nil {
		go func() {
			announceReady(ctx, targets, stdout)
			// The certificates of the exact hosts are made after the
			// ready line, off the start's critical path.
			if px != nil && ctx.Err() == nil {
				px.Warm()
			}
		}()
	} else if px != nil {
		go px.Warm()
	}
	return <-supervised
}

// startServices starts what routerd serves besides the DNS servers: the
// API gate, the inspecting proxy (its CA files written when it returns,
// as the ready line needs) and the CA port. Their failures once running
// go to stopped; closeGate stops the gate's servers.
func startServices(ctx context.Context, cfg config, stdout io.Writer, logger *log.Logger, served *sync.WaitGroup, stopped chan<- error) (px *inspect.Proxy, closeGate func(), err error) {
	closeGate = func() {}
	if cfg.apiPolicy != "" {
		gate := newAPIGate(cfg.apiPolicy, stdout, logger)
		// Before the load: a load that fails part way closes the routes
		// it opened too.
		closeGate = gate.close
		if err := gate.load(); err != nil {
			return nil, closeGate, err
		}
		go gate.follow(ctx, configPoll)
	}
	if cfg.inspectSocket != "" {
		if px, err = startInspect(cfg, stdout, logger); err != nil {
			return nil, closeGate, fmt.Errorf("inspect proxy: %w", err)
		}
		served.Go(func() {
			if err := px.Serve(ctx); err != nil {
				stopped <- fmt.Errorf("inspect proxy stopped: %w", err)
			}
		})
	}
	if cfg.caListen.IsValid() && px != nil {
		// After startInspect: the files it serves are written.
		ca, err := listenCA(cfg.caListen, cfg.caDir, logger)
		if err != nil {
			return nil, closeGate, err
		}
		served.Go(func() {
			if err := ca.serve(ctx); err != nil {
				stopped <- fmt.Errorf("ca port stopped: %w", err)
			}
		})
	}
	return px, closeGate, nil
}

// readyTargets are the listeners announceReady waits for; nil when
// routerd has no session address to announce.
func (cfg config) readyTargets() []readyTarget {
	if cfg.ready != nil || !cfg.readyAddr.IsValid() {
		return cfg.ready
	}
	targets := []readyTarget{{"tcp", netip.AddrPortFrom(cfg.readyAddr, 53).String()}, {"tcp", netip.AddrPortFrom(cfg.readyAddr, 443).String()}}
	if cfg.front.IsValid() {
		// Our front answers on port 53 at once; dnsmasq is behind it.
		targets[0].addr = cfg.backend.String()
	}
	if cfg.tlsSocket != "" {
		targets[1] = readyTarget{"unix", cfg.tlsSocket}
	}
	if cfg.caListen.IsValid() {
		targets = append(targets, readyTarget{"tcp", caReadyAddr(cfg.caListen)})
	}
	return targets
}

// readyLine tells the launcher, which is attached to our output, that the
// agent may start: polling from outside would cost a podman exec each time.
const readyLine = "routerd: ready"

// readyTarget is a listener announceReady waits for.
type readyTarget struct{ network, addr string }

// announceReady waits until every target accepts a connection (dnsmasq on
// 53, nginx's TLS server), then prints readyLine. A bare connect makes
// dnsmasq log no query. nginx's unix socket is opened to every uid once it
// is there: the forwarder connects as another uid of its user namespace,
// and only the forwarder and the router mount its directory.
func announceReady(ctx context.Context, targets []readyTarget, out io.Writer) {
	var d net.Dialer
	for _, t := range targets {
		for {
			dctx, cancel := context.WithTimeout(ctx, time.Second)
			c, err := d.DialContext(dctx, t.network, t.addr)
			cancel()
			if err == nil && t.network == "unix" {
				err = os.Chmod(t.addr, 0o666)
			}
			if err == nil {
				_ = c.Close()
				break
			}
			// A refused connection costs microseconds; the agent waits
			// for this line.
			select {
			case <-ctx.Done():
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}
	fmt.Fprintln(out, readyLine)
}
