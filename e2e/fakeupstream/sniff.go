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
	"time"
)

// nonceLike matches the first 16 characters of the suite's nonces ("n" and
// 16 hex digits); 16 is all that ping's pad pattern can carry.
var nonceLike = regexp.MustCompile(`(?i)n[0-9a-f]{15}`)

// sniffer sees every frame in its network namespace. Run in podman's
// rootless network namespace, that is every bridge and the slirp4netns
// link to the host: whatever left a router, a fake or a canary, and
// anything that would leave the machine. It logs only frames that carry a
// nonce and touch a watched subnet: those of interfaces with an IPv4
// address here (the egress and canary bridges, slirp4netns, loopback). A
// session network's bridge has no address, so the agent's own traffic to
// its router, which carries blocked nonces by design, is not logged.
// IPv6 frames are logged whatever their addresses: no test traffic uses
// IPv6, so any IPv6 frame with a nonce is a path the suite must see.
type sniffer struct {
	log     *eventLog
	ignore  []netip.Prefix
	fd      int
	stopped atomic.Bool
	done    chan struct{}

	mu       sync.Mutex
	watched  []netip.Prefix
	names    map[int]string
	refreshd time.Time
}

func startSniffer(log *eventLog, ignore ...netip.Prefix) (*sniffer, error) {
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
	s := &sniffer{log: log, ignore: ignore, fd: fd, done: make(chan struct{})}
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
	if ok && src.Is4() && !s.watches(src) && !s.watches(dst) {
		return
	}
	for _, p := range s.ignore {
		if ok && p.Contains(src) && p.Contains(dst) {
			return
		}
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

func (s *sniffer) watches(a netip.Addr) bool {
	s.mu.Lock()
	stale := time.Since(s.refreshd) > time.Second
	s.mu.Unlock()
	if stale {
		s.refresh()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.watched {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// refresh rereads the interfaces: bridges come and go with networks.
func (s *sniffer) refresh() {
	var watched []netip.Prefix
	names := map[int]string{}
	ifaces, _ := net.Interfaces()
	for _, ifc := range ifaces {
		names[ifc.Index] = ifc.Name
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || ipn.IP.To4() == nil {
				continue
			}
			ones, _ := ipn.Mask.Size()
			addr, _ := netip.AddrFromSlice(ipn.IP.To4())
			watched = append(watched, netip.PrefixFrom(addr, ones).Masked())
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watched, s.names, s.refreshd = watched, names, time.Now()
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
