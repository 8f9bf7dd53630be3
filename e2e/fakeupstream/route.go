package main

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"syscall"
)

// Unreachable routes keep traffic to an address range inside the network
// namespace the fake runs in. In podman's rootless network namespace, an
// address of a session network has no route (the session bridge has no
// address there), so a packet to it would follow the default route out
// through slirp4netns or pasta and leave the machine; with an unreachable
// route for the session pool it is refused there instead. Bridges that
// have an address keep their own, more specific, routes.

// addUnreachable adds an unreachable route for p to the main table, or
// makes the route for p one (a fake that was killed leaves its route).
func addUnreachable(p netip.Prefix) error {
	return routeRequest(syscall.RTM_NEWROUTE, syscall.NLM_F_CREATE|syscall.NLM_F_REPLACE, p)
}

// delUnreachable removes the route addUnreachable added.
func delUnreachable(p netip.Prefix) error {
	return routeRequest(syscall.RTM_DELROUTE, 0, p)
}

func routeRequest(typ, flags uint16, p netip.Prefix) error {
	if !p.Addr().Is4() {
		return fmt.Errorf("unreachable route %s: IPv4 only", p)
	}
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, syscall.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink bind: %w", err)
	}
	dst := p.Masked().Addr().As4()
	// nlmsghdr (16), rtmsg (12), RTA_DST (4 + 4).
	msg := make([]byte, 16+12+8)
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], typ)
	ne.PutUint16(msg[6:], syscall.NLM_F_REQUEST|syscall.NLM_F_ACK|flags)
	ne.PutUint32(msg[8:], 1) // sequence
	copy(msg[16:], []byte{syscall.AF_INET, byte(p.Bits()), 0, 0,
		syscall.RT_TABLE_MAIN, syscall.RTPROT_STATIC, syscall.RT_SCOPE_UNIVERSE, syscall.RTN_UNREACHABLE})
	ne.PutUint16(msg[28:], 8)
	ne.PutUint16(msg[30:], syscall.RTA_DST)
	copy(msg[32:], dst[:])
	if err := syscall.Sendto(fd, msg, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink send: %w", err)
	}
	buf := make([]byte, 4096)
	n, _, err := syscall.Recvfrom(fd, buf, 0)
	if err != nil {
		return fmt.Errorf("netlink receive: %w", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return fmt.Errorf("netlink reply: %w", err)
	}
	for _, m := range msgs {
		if m.Header.Type == syscall.NLMSG_ERROR && len(m.Data) >= 4 {
			if e := int32(ne.Uint32(m.Data)); e != 0 {
				return fmt.Errorf("unreachable route %s: %w", p, syscall.Errno(-e))
			}
			return nil
		}
	}
	return fmt.Errorf("unreachable route %s: no acknowledgement from the kernel", p)
}
