package main

import (
	"errors"
	"net"
	"time"
)

// echoServer logs every chunk it receives and sends it straight back, so a
// client proves a two-way path and the log proves what arrived.
type echoServer struct {
	log *eventLog
}

func (s *echoServer) serve(l net.Listener) {
	port := l.Addr().(*net.TCPAddr).Port
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go s.echo(c, port)
	}
}

func (s *echoServer) echo(c net.Conn, port int) {
	defer c.Close()
	s.log.printf("tcp connect port=%d from=%s", port, c.RemoteAddr())
	buf := make([]byte, 4096)
	total := 0
	for {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		n, err := c.Read(buf)
		if n > 0 {
			total += n
			s.log.printf("tcp payload port=%d from=%s data=%q", port, c.RemoteAddr(), buf[:n])
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			s.log.printf("tcp close port=%d from=%s bytes=%d", port, c.RemoteAddr(), total)
			return
		}
	}
}
