// Package dnsserve carries DNS messages for the project's fake DNS servers
// (the e2e suite's upstream and the benchmark's): datagrams over UDP and
// length-prefixed messages over TCP, each handed to an answerer.
package dnsserve

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"time"
)

// Answer builds the reply to one message; nil drops it (over TCP, it also
// ends the connection).
type Answer func(msg []byte, transport string, from net.Addr) []byte

// UDP answers datagrams on pc until it is closed.
func UDP(pc net.PacketConn, answer Answer) {
	buf := make([]byte, 65535)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if resp := answer(buf[:n], "udp", from); resp != nil {
			_, _ = pc.WriteTo(resp, from)
		}
	}
}

// TCP answers connections on l until it is closed. A connection idle for
// longer than idle is dropped; truncated, if set, hears of a message cut
// short.
func TCP(l net.Listener, idle time.Duration, answer Answer, truncated func(from net.Addr, partial []byte)) {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go serveConn(c, idle, answer, truncated)
	}
}

func serveConn(c net.Conn, idle time.Duration, answer Answer, truncated func(net.Addr, []byte)) {
	defer c.Close()
	for {
		_ = c.SetDeadline(time.Now().Add(idle))
		var size [2]byte
		if _, err := io.ReadFull(c, size[:]); err != nil {
			return
		}
		msg := make([]byte, binary.BigEndian.Uint16(size[:]))
		if n, err := io.ReadFull(c, msg); err != nil {
			if truncated != nil {
				truncated(c.RemoteAddr(), msg[:n])
			}
			return
		}
		resp := answer(msg, "tcp", c.RemoteAddr())
		if resp == nil {
			return
		}
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(resp))), resp...)); err != nil {
			return
		}
	}
}
