package main

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// nonceLike matches the first 16 characters of the suite's nonces ("n" and
// 16 hex digits); 16 is all that ping's pad pattern can carry.
var nonceLike = regexp.MustCompile(`(?i)n[0-9a-f]{15}`)

// sniffer sees every frame in its network namespace. Run in podman's
// rootless network namespace, that is every container's veth and every
// bridge, whether or not the bridge has an address there (a session
// network's has none: it is internal and has no gateway), and the link
// to the host (slirp4netns's tap0 under podman 4, pasta's interface under
// podman 5): whatever left a router, a pod, a fake or a canary, and
// anything that would leave the machine. It logs every frame that carries
// a nonce, with the interface it was seen on, except two kinds:
//   - frames whose source and destination both lie in one of ignore
//     (-sniff-ignore);
//   - a session's own traffic (-sniff-sessions POOL): session networks are
//     /24s of POOL with the router at .2, and a frame between the .2 of a
//     /24 and another address of the same /24 is an agent talking to its
//     router, which carries blocked nonces by design. A frame between two
//     session networks, or between two other addresses of one, is logged.
//
// IPv6 frames are logged whatever their addresses: no test traffic uses
// IPv6, so any IPv6 frame with a nonce is a path the suite must see.
type sniffer struct {
	log      *eventLog
	ignore   []netip.Prefix
	sessions []netip.Prefix
	fd       int
	stopped  atomic.Bool
	done     chan struct{}

	mu    sync.Mutex
	names map[int]string
}

// startSniffer starts logging; ignore and sessions are the two kinds of
// frames it leaves out (see sniffer). Each of sessions must be /24 or wider.
func startSniffer(log *eventLog, ignore, sessions []netip.Prefix) (*sniffer, error) {
	for _, p := range sessions {
		if !p.Addr().Is4() || p.Bits() > 24 {
			return nil, fmt.Errorf("session pool %s: want an IPv4 prefix of /24 or wider", p)
		}
	}
	fd, err := syscall.Socket(syscall.AF_PACKET, syscall.SOCK_RAW, int(htons(syscall.ETH_P_ALL)))
	if err != nil {
		return nil, fmt.Errorf("packet socket: %w (the sniffer needs CAP_NET_RAW: run it as root of the namespace, e.g. under podman unshare)", err)
	}
	// A timeout lets the loop notice Close, which does not wake recvfrom.
	tv := syscall.Timeval{Sec: 0, Usec: 200000}
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
		_ = syscall.Close(fd)
		return nil, err
	}
	_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<20)
	s := &sniffer{log: log, ignore: ignore, sessions: sessions, fd: fd, done: make(chan struct{})}
	s.refresh()
	go s.loop()
	return s, nil
}

func (s *sniffer) Close() error {
	if s.stopped.Swap(true) {
		return nil
	}
	<-s.done
	return syscall.Close(s.fd)
}

func (s *sniffer) loop() {
	defer close(s.done)
	buf := make([]byte, 65536+64)
	for !s.stopped.Load() {
		n, from, err := syscall.Recvfrom(s.fd, buf, 0)
		if err != nil || n < 14 {
			continue
		}
		ifindex := 0
		if ll, ok := from.(*syscall.SockaddrLinklayer); ok {
			ifindex = ll.Ifindex
		}
		s.frame(ifindex, buf[:n])
	}
}

func (s *sniffer) frame(ifindex int, f []byte) {
	matches := nonceLike.FindAll(f[14:], -1)
	if len(matches) == 0 {
		return
	}
	src, dst, proto, ok := ipHeader(binary.BigEndian.Uint16(f[12:14]), f[14:])
	if !ok {
		src, dst = netip.Addr{}, netip.Addr{}
	}
	if ok && s.ignored(src, dst) {
		return
	}
	seen := map[string]bool{}
	var found []string
	for _, m := range matches {
		if k := strings.ToLower(string(m)); !seen[k] {
			seen[k] = true
			found = append(found, k)
		}
	}
	sort.Strings(found)
	s.log.printf("sniff if=%s src=%s dst=%s proto=%d bytes=%d nonces=%s", s.ifname(ifindex), src, dst, proto, len(f), strings.Join(found, ","))
}

// ipHeader reads the addresses and protocol of an IPv4 or IPv6 packet.
func ipHeader(ethertype uint16, p []byte) (src, dst netip.Addr, proto int, ok bool) {
	switch {
	case ethertype == 0x0800 && len(p) >= 20:
		return netip.AddrFrom4([4]byte(p[12:16])), netip.AddrFrom4([4]byte(p[16:20])), int(p[9]), true
	case ethertype == 0x86dd && len(p) >= 40:
		return netip.AddrFrom16([16]byte(p[8:24])), netip.AddrFrom16([16]byte(p[24:40])), int(p[6]), true
	}
	return netip.Addr{}, netip.Addr{}, 0, false
}

// ignored says whether a frame from src to dst is one the sniffer leaves
// out: inside an -sniff-ignore range, or a session's own traffic between
// its router (.2 of its /24) and another address of that /24.
func (s *sniffer) ignored(src, dst netip.Addr) bool {
	for _, p := range s.ignore {
		if p.Contains(src) && p.Contains(dst) {
			return true
		}
	}
	for _, pool := range s.sessions {
		if !pool.Contains(src) || !pool.Contains(dst) {
			continue
		}
		lan, _ := src.Prefix(24)
		if !lan.Contains(dst) {
			continue
		}
		router := lan.Addr().Next().Next()
		if src == router || dst == router {
			return true
		}
	}
	return false
}

// refresh rereads the interfaces' names: bridges and veths come and go
// with networks and containers.
func (s *sniffer) refresh() {
	names := map[int]string{}
	ifaces, _ := net.Interfaces()
	for _, ifc := range ifaces {
		names[ifc.Index] = ifc.Name
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.names = names
}

func (s *sniffer) ifname(index int) string {
	s.mu.Lock()
	name, ok := s.names[index]
	s.mu.Unlock()
	if !ok {
		s.refresh()
		s.mu.Lock()
		name = s.names[index]
		s.mu.Unlock()
	}
	if name == "" {
		return fmt.Sprintf("#%d", index)
	}
	return name
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
