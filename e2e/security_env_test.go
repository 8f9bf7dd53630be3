//go:build e2e

package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The security rows' world, beside the harness's fake. Every address here
// is this machine's own: containers on podman bridges, podman's rootless
// network namespace (the egress gateway), loopback and the machine's own
// address. Probes never name anything else, and the fake DNS answers only
// with these (-ip-allow), so a defence that fails still keeps the traffic
// on the machine.
const (
	secFakeName = "asb-e2e-secfake"
	// secFakeIP is the security rows' upstream: DNS (with the rebind
	// names), TLS, TCP echo, UDP, plaintext HTTP and a CONNECT proxy.
	secFakeIP = "10.99.0.11"
	// egressGW is the egress bridge's gateway: podman's rootless network
	// namespace, which runs aardvark-dns and routes to the host.
	egressGW = "10.99.0.1"
	// secAllow is AGENT_SANDBOX_UPSTREAM_ALLOW for the security sessions:
	// the fakes and the gateway are inside, the egress canary is not.
	secAllow = "10.99.0.0/25"
	// rebindSuffix names answer with the address in their first label.
	rebindSuffix = "rebind.test"
	// sessionPool is where podman puts networks created without a subnet,
	// the sessions' among them: /24s, the router at .2 of each. The
	// sniffer leaves out frames between such a .2 and another address of
	// its /24 (an agent and its router); the egress network is outside
	// the pool, so no other traffic has that shape.
	sessionPool = "10.89.0.0/16"
)

// secCanary is a fake on a podman network in a private range outside
// secAllow; it must stay silent unless a row opens the path on purpose.
type secCanary struct {
	name, network, subnet, ip string
}

var secCanaries = []secCanary{
	{"asb-e2e-canary-egress", egressNet, "", "10.99.0.200"},
	{"asb-e2e-canary-172", "asb-e2e-canary-172", "172.31.99.0/24", "172.31.99.20"},
	{"asb-e2e-canary-192", "asb-e2e-canary-192", "192.168.99.0/24", "192.168.99.20"},
}

// secEnv is what the security rows share.
type secEnv struct {
	dir       string // logs of the fakes and canaries
	hostIPs   []string
	hostPort  int // the host canaries' port, TCP and UDP
	host      *hostCanaries
	gw        *exec.Cmd
	gwStdin   io.WriteCloser
	logs      map[string]string // name -> file
	markers   markerLines       // what settle sent, not the probes
	networks  []string
	started   []string
	setupTime time.Duration
}

// secLogNames are the logs every blocked nonce must be absent from.
func (e *secEnv) logNames() []string {
	names := []string{"fake"}
	for n := range e.logs {
		names = append(names, n)
	}
	names = append(names, "host canaries")
	slices.Sort(names)
	return slices.Compact(names)
}

func startSecEnv() (*secEnv, error) {
	start := time.Now()
	e := &secEnv{logs: map[string]string{}}
	e.dir = filepath.Join(harness.workDir, "sec")
	if err := os.MkdirAll(e.dir, 0o777); err != nil {
		return e, err
	}
	if err := os.Chmod(e.dir, 0o777); err != nil {
		return e, err
	}
	var err error
	if e.hostIPs, err = machineAddrs(); err != nil {
		return e, err
	}
	if e.host, err = startHostCanaries(e.hostIPs); err != nil {
		return e, err
	}
	e.hostPort = e.host.port
	for _, c := range secCanaries {
		if c.subnet == "" {
			continue
		}
		_, _ = podman("network", "rm", "-f", c.network)
		if _, err := podman("network", "create", "--label", harnessLabel+"=canary", "--subnet", c.subnet, c.network); err != nil {
			return e, fmt.Errorf("%w (is %s taken by another network or interface?)", err, c.subnet)
		}
		e.networks = append(e.networks, c.network)
	}
	if err := e.startSecFake(); err != nil {
		return e, err
	}
	for _, c := range secCanaries {
		if err := e.startCanary(c); err != nil {
			return e, err
		}
	}
	if err := e.startGateway(); err != nil {
		return e, err
	}
	for name := range e.logs {
		if err := waitReady(e.logs[name]); err != nil {
			return e, fmt.Errorf("%s: %w%s", name, err, containerState(name))
		}
	}
	e.setupTime = time.Since(start)
	return e, nil
}

func (e *secEnv) close() {
	if e.gwStdin != nil {
		_ = e.gwStdin.Close()
		done := make(chan struct{})
		go func() { _ = e.gw.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = e.gw.Process.Kill()
		}
	}
	for _, name := range e.started {
		_, _ = podman("rm", "-f", "-t", "0", name)
	}
	for _, n := range e.networks {
		_, _ = podman("network", "rm", "-f", n)
	}
	if e.host != nil {
		e.host.close()
	}
}

// fakeArgs are the roles every fake and canary of the security rows runs.
func fakeArgs(logFile, zone string) []string {
	return []string{
		"-log", logFile, "-dns", zone,
		"-cert", "/fake/server.pem", "-key", "/fake/server.key",
		"-ca-cert", "/fake/ca.pem", "-ca-key", "/fake/ca.key",
		"-tcp-addr", ":22,:2222", "-udp-addr", ":443", "-http-addr", ":80", "-proxy-addr", ":3128",
	}
}

// ipAllow is every address the rebind names may answer: each one is a
// listener of this suite or the router's own loopback.
func (e *secEnv) ipAllow() string {
	all := []string{"127.0.0.1/32", egressGW + "/32", fakeIP + "/32", secFakeIP + "/32"}
	for _, c := range secCanaries {
		all = append(all, c.ip+"/32")
	}
	for _, ip := range e.hostIPs {
		if a := netip.MustParseAddr(ip); a.Is4() {
			all = append(all, ip+"/32")
		}
	}
	return strings.Join(all, ",")
}

func (e *secEnv) startSecFake() error {
	var zone []string
	for _, n := range []string{"allowed.test", "*.allowed.test", "wild.test", "*.wild.test", "denied.test", "*.denied.test"} {
		zone = append(zone, n+"="+secFakeIP)
	}
	// Upstream, host.containers.internal is what podman's hosts file makes
	// it: the machine's own address. Row 8 allowlists the name, so that
	// only routerd's refusal of that address stands between it and the
	// host canaries.
	zone = append(zone, "host.containers.internal="+e.hostIPs[0])
	e.logs["secfake"] = filepath.Join(e.dir, "secfake.log")
	args := []string{"run", "-d", "--name", secFakeName, "--label", harnessLabel + "=secfake",
		"--network", egressNet, "--ip", secFakeIP, "-v", harness.fakeDir + ":/fake:ro", "-v", e.dir + ":/sec",
		harness.fakeImage}
	args = append(args, fakeArgs("/sec/secfake.log", strings.Join(zone, ","))...)
	args = append(args, "-ip-names", rebindSuffix, "-ip-allow", e.ipAllow())
	// The kube session's agent pod clones its project from here, as a
	// cluster clones from the project's remote.
	args = append(args, "-git-hosts", gitHost, "-git-root", "/fake/git")
	if _, err := podman(args...); err != nil {
		return err
	}
	e.started = append(e.started, secFakeName)
	return nil
}

func (e *secEnv) startCanary(c secCanary) error {
	e.logs[c.name] = filepath.Join(e.dir, c.name+".log")
	args := []string{"run", "-d", "--name", c.name, "--label", harnessLabel + "=canary",
		"--network", c.network, "--ip", c.ip, "-v", harness.fakeDir + ":/fake:ro", "-v", e.dir + ":/sec",
		harness.fakeImage}
	args = append(args, fakeArgs("/sec/"+c.name+".log", "")...)
	if _, err := podman(args...); err != nil {
		return err
	}
	e.started = append(e.started, c.name)
	return nil
}

// startGateway runs a canary and the sniffer inside podman's rootless
// network namespace, where the egress gateway lives. The canary listens on
// every address there (IPv4 and IPv6); aardvark-dns keeps 53.
func (e *secEnv) startGateway() error {
	bin, err := filepath.Abs(filepath.Join("fakeupstream", "fakeupstream.bin"))
	if err != nil {
		return err
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%s is missing: run `make e2e-bins` (make e2e does)", bin)
	}
	e.logs["gateway"] = filepath.Join(e.dir, "gateway.log")
	args := []string{"unshare", "--rootless-netns", bin, "-log", e.logs["gateway"], "-dns-addr", "",
		"-cert", filepath.Join(harness.fakeDir, "server.pem"), "-key", filepath.Join(harness.fakeDir, "server.key"),
		"-ca-cert", filepath.Join(harness.fakeDir, "ca.pem"), "-ca-key", filepath.Join(harness.fakeDir, "ca.key"),
		"-tcp-addr", ":22,:2222", "-udp-addr", ":443", "-http-addr", ":80", "-proxy-addr", ":3128",
		// The sniffer logs every frame with a nonce but an agent's own
		// traffic to its router (the .2 of its session /24), which carries
		// blocked nonces by design; between two sessions, it logs all.
		"-sniff", "-sniff-sessions", sessionPool,
		// A session network's bridge has no address here (it is internal,
		// without a gateway), so its /24 has no route: a packet to it that
		// got this far would follow the default route out through
		// slirp4netns or pasta, off the machine. The rows that target
		// another session's addresses rely on this route to keep such a
		// packet here, where the sniffer sees it on the veth it came from.
		"-unreachable", sessionPool, "-exit-on-stdin-eof"}
	e.gw = exec.Command("podman", args...)
	if e.gwStdin, err = e.gw.StdinPipe(); err != nil {
		return err
	}
	e.gw.Stdout, e.gw.Stderr = io.Discard, os.Stderr
	if err := e.gw.Start(); err != nil {
		return fmt.Errorf("podman unshare --rootless-netns: %w", err)
	}
	return nil
}

// containerState says what podman knows of a fake that never got ready.
func containerState(name string) string {
	if name == "secfake" {
		name = secFakeName
	}
	if !slices.Contains(secContainerNames(), name) {
		return ""
	}
	state, _ := podman("inspect", "--format", "{{.State.Status}} exit={{.State.ExitCode}} {{.State.Error}}", name)
	logs, _ := podman("logs", "--tail", "20", name)
	return fmt.Sprintf("\ncontainer %s: %s\n%s", name, strings.TrimSpace(state), indent(logs))
}

func secContainerNames() []string {
	names := []string{secFakeName}
	for _, c := range secCanaries {
		names = append(names, c.name)
	}
	return names
}

func waitReady(path string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), " ready dns=") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("never logged ready in %s: %q", path, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// machineAddrs are the addresses of the interface with the default route:
// "the machine's own address" of the rows.
func machineAddrs() ([]string, error) {
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ifname := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) > 2 && fl[1] == "00000000" {
			ifname = fl[0]
			break
		}
	}
	if ifname == "" {
		return nil, errors.New("no default route: cannot find this machine's own address")
	}
	ifc, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, err
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			ip, _ := netip.AddrFromSlice(ipn.IP)
			ip = ip.Unmap()
			if !ip.IsLinkLocalUnicast() {
				out = append(out, ip.String())
			}
		}
	}
	// IPv4 first: the rebind names and most probes need one.
	slices.SortStableFunc(out, func(a, b string) int { return strings.Count(a, ":") - strings.Count(b, ":") })
	if len(out) == 0 || !strings.Contains(out[0], ".") {
		return nil, fmt.Errorf("%s has no IPv4 address: the host canaries need one", ifname)
	}
	return out, nil
}

// hostCanaries listen as the test user on the host's loopback and its own
// addresses, TCP and UDP on one port, and remember everything they get.
type hostCanaries struct {
	port    int
	mu      sync.Mutex
	lines   []string
	closers []io.Closer
}

func startHostCanaries(hostIPs []string) (*hostCanaries, error) {
	addrs := append([]string{"127.0.0.1", "::1"}, hostIPs...)
	for attempt := 0; attempt < 20; attempt++ {
		h := &hostCanaries{}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		h.port = l.Addr().(*net.TCPAddr).Port
		h.closers = append(h.closers, l)
		go h.serveTCP(l)
		ok := true
		for _, a := range addrs {
			hp := net.JoinHostPort(a, strconv.Itoa(h.port))
			if a != "127.0.0.1" {
				tl, err := net.Listen("tcp", hp)
				if err != nil {
					ok = false
					break
				}
				h.closers = append(h.closers, tl)
				go h.serveTCP(tl)
			}
			ul, err := net.ListenPacket("udp", hp)
			if err != nil {
				ok = false
				break
			}
			h.closers = append(h.closers, ul)
			go h.serveUDP(ul)
		}
		if ok {
			return h, nil
		}
		h.close()
	}
	return nil, errors.New("cannot find a port free on every host address for the host canaries")
}

func (h *hostCanaries) logf(format string, a ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, time.Now().UTC().Format(time.RFC3339Nano)+" "+fmt.Sprintf(format, a...))
}

func (h *hostCanaries) serveTCP(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			h.logf("host tcp connect to=%s from=%s", c.LocalAddr(), c.RemoteAddr())
			buf := make([]byte, 4096)
			n, _ := c.Read(buf)
			h.logf("host tcp data to=%s from=%s data=%q", c.LocalAddr(), c.RemoteAddr(), buf[:n])
			_, _ = c.Write(buf[:n])
		}()
	}
}

func (h *hostCanaries) serveUDP(pc net.PacketConn) {
	buf := make([]byte, 65535)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		h.logf("host udp datagram to=%s from=%s data=%q", pc.LocalAddr(), from, buf[:n])
		_, _ = pc.WriteTo(buf[:n], from)
	}
}

func (h *hostCanaries) text() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.lines, "\n")
}

func (h *hostCanaries) close() {
	for _, c := range h.closers {
		_ = c.Close()
	}
}

// logText returns one log's content; "fake" is the harness's fake.
func (e *secEnv) logText(name string) string {
	switch name {
	case "fake":
		return fakeLog()
	case "host canaries":
		return e.host.text()
	}
	b, _ := os.ReadFile(e.logs[name])
	return string(b)
}

// needle is what the logs are searched for: the first 16 characters of a
// nonce, all that the sniffer and ping's pad pattern keep. Nonces are
// lowercase; resolvers may change case, so the search ignores it.
func needle(nonce string) string {
	n := strings.ToLower(nonce)
	if len(n) > 16 {
		n = n[:16]
	}
	return n
}

// seen returns "log: line" for every line in every log holding the nonce.
func (e *secEnv) seen(nonce string) []string {
	var out []string
	nd := needle(nonce)
	for _, name := range e.logNames() {
		for _, line := range strings.Split(e.logText(name), "\n") {
			if strings.Contains(strings.ToLower(line), nd) {
				out = append(out, name+": "+line)
			}
		}
	}
	return out
}

// marks are the logs' sizes at one moment, to look at what came after.
type marks map[string]int

func (e *secEnv) mark() marks {
	m := marks{}
	for _, name := range e.logNames() {
		m[name] = len(e.logText(name))
	}
	return m
}

// listenerLinesSince is what the canaries' listeners (not the sniffer)
// logged after m, ready lines and the markers' lines aside.
func (e *secEnv) listenerLinesSince(m marks, names ...string) []string {
	var out []string
	for _, name := range names {
		s := e.logText(name)
		if m[name] < len(s) {
			s = s[m[name]:]
		} else {
			s = ""
		}
		for _, line := range strings.Split(s, "\n") {
			if line == "" || strings.Contains(line, " sniff ") || strings.Contains(line, " ready dns=") || e.markers.caused(line) {
				continue
			}
			out = append(out, name+": "+line)
		}
	}
	return out
}

func (e *secEnv) canaryNames() []string {
	var out []string
	for _, c := range secCanaries {
		out = append(out, c.name)
	}
	return append(out, "gateway", "host canaries")
}
