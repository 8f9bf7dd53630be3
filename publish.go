package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Published ports (--publish [HOST_PORT:]PORT): a server the agent runs
// on PORT is reachable at 127.0.0.1:HOST_PORT on the host, and nowhere
// else. The pod publishes an inner port on 127.0.0.1 of the host (podman's
// rootlessport carries it into the pod's network); the forwarder listens
// on the pod's own address at that inner port and relays to the server on
// the pod's loopback, so a server bound to 127.0.0.1 works. Nothing new
// leads out: the host's connection is the only new path, and the relay's
// target is inside the pod. A browser must open it by the session's own
// name, NAME.localhost:HOST_PORT, from that origin (forwarder/publish.go):
// no other page the user has open can read it or hand it the cookies of
// the user's other local apps.

// publishedPort is one --publish.
type publishedPort struct {
	host, sandbox uint16
}

// maxPublished bounds --publish per session: each takes an inner port.
const maxPublished = 32

// firstInnerPort is the first inner port the pod publishes: above the
// kernel's default ephemeral range, where servers inside seldom listen.
const firstInnerPort = 61000

// inner is the i-th published port's inner port.
func innerPort(i int) uint16 { return uint16(firstInnerPort + i) }

// authority is the name and port a browser opens a published port by:
// NAME.localhost, which browsers resolve to loopback and keep apart
// from 127.0.0.1 (cookies, storage, service workers).
func (p publishedPort) authority(name string) string {
	return fmt.Sprintf("%s.localhost:%d", name, p.host)
}

// url is how the session's start names a published port.
func (p publishedPort) url(name string) string { return "http://" + p.authority(name) }

// String is the port as ps shows it.
func (p publishedPort) String() string { return fmt.Sprintf("127.0.0.1:%d->%d", p.host, p.sandbox) }

// publishedName is the session's name under .localhost: the launch dir's
// base name as a DNS label, so that a project keeps its URL (and its
// cookies) from one session to the next.
func publishedName(launchDir string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(filepath.Base(launchDir)) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	name := strings.Trim(b.String(), "-")
	if len(name) > 40 {
		name = strings.Trim(name[:40], "-")
	}
	if name == "" {
		return "sandbox"
	}
	return name
}

// parsePublishedPort reads --publish's value: PORT, or HOST_PORT:PORT.
func parsePublishedPort(v string) (publishedPort, error) {
	bad := func(why string) (publishedPort, error) {
		return publishedPort{}, fmt.Errorf("--publish %s: %s; give [HOST_PORT:]PORT, as in --publish 8000 or --publish 8080:8000", v, why)
	}
	parts := strings.Split(v, ":")
	if len(parts) > 2 {
		return bad("a published port is only ever on the host's 127.0.0.1, so no address goes with it")
	}
	var ports []uint16
	for _, s := range parts {
		n, err := strconv.ParseUint(s, 10, 16)
		if err != nil || n == 0 {
			return bad(fmt.Sprintf("%q is not a port (1-65535)", s))
		}
		ports = append(ports, uint16(n))
	}
	p := publishedPort{host: ports[0], sandbox: ports[0]}
	if len(ports) == 2 {
		p.sandbox = ports[1]
	}
	// The forwarder's own listeners in the pod: the router's TLS on 443,
	// and the inner ports, which would relay into each other.
	if p.sandbox == 443 || (p.sandbox >= firstInnerPort && p.sandbox < firstInnerPort+maxPublished) {
		return bad(fmt.Sprintf("port %d in the sandbox is the forwarder's own (443 and %d-%d are)", p.sandbox, firstInnerPort, firstInnerPort+maxPublished-1))
	}
	return p, nil
}

// checkPublished refuses a list that publishes one host port twice or
// too many, and a host port that is taken: before anything is created.
func checkPublished(ports []publishedPort, listen func(addr string) (net.Listener, error)) error {
	if len(ports) > maxPublished {
		return fmt.Errorf("--publish: %d ports, at most %d a session", len(ports), maxPublished)
	}
	seen := map[uint16]bool{}
	for _, p := range ports {
		if seen[p.host] {
			return fmt.Errorf("--publish: host port %d is given twice", p.host)
		}
		seen[p.host] = true
		ln, err := listen(fmt.Sprintf("127.0.0.1:%d", p.host))
		if errors.Is(err, syscall.EACCES) {
			return fmt.Errorf("--publish %d:%d: port %d on this host is privileged (below 1024); pick another, as in --publish %d:%d", p.host, p.sandbox, p.host, 8000+int(p.host)%1000, p.sandbox)
		}
		if err != nil {
			return fmt.Errorf("--publish %d:%d: port %d on this host is taken: another program listens on it (ss -ltnp 'sport = :%d' says which)", p.host, p.sandbox, p.host, p.host)
		}
		ln.Close()
		// Browsers try NAME.localhost at ::1 first: a program there would
		// get the requests meant for the sandbox. (No IPv6: nothing there.)
		if ln, err := listen(fmt.Sprintf("[::1]:%d", p.host)); errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("--publish %d:%d: port %d on this host's [::1] is taken: browsers would reach that program instead (ss -ltnp 'sport = :%d' says which)", p.host, p.sandbox, p.host, p.host)
		} else if err == nil {
			ln.Close()
		}
	}
	return nil
}

// podAddress is the pod's address on the session network when it
// publishes ports (.3; the router is .2): the forwarder's published
// listeners bind it.
func podAddress(routerIP netip.Addr) netip.Addr { return routerIP.Next() }

// publishedForwards are the forwarder's pairs for ports: the pod's
// address at each inner port, to the server on loopback, with the name a
// browser must use.
func publishedForwards(ports []publishedPort, pod netip.Addr, name string) []string {
	var pairs []string
	for i, p := range ports {
		pairs = append(pairs, fmt.Sprintf("%s:%d=127.0.0.1:%d/publish=%s", pod, innerPort(i), p.sandbox, p.authority(name)))
	}
	return pairs
}
