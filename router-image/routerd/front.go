package main

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

const (
	// frontAttempt bounds one try at dnsmasq: it answers from its config
	// alone, in well under a millisecond.
	frontAttempt = 250 * time.Millisecond
	// frontPatience is how long a query waits for dnsmasq to come back
	// from a restart before the agent gets SERVFAIL.
	frontPatience = 3 * time.Second
	// maxIdleSockets bounds the UDP sockets to dnsmasq kept between
	// queries.
	maxIdleSockets = 8
)

// front owns the router's DNS address and passes each query unchanged to
// dnsmasq behind it. dnsmasq must be restarted to take a new allowlist;
// while it is, queries wait here and are sent again, so that the agent
// sees a short delay instead of a refused or lost query (which would cost
// it a failed lookup, or glibc's five-second timeout).
type front struct {
	backend  netip.AddrPort
	attempt  time.Duration
	patience time.Duration

	// idle holds UDP sockets connected to the backend whose last query
	// got its reply, so none has a reply still to come. Reusing them
	// spares each query a socket's set-up and teardown, which is most of
	// what the front costs on a machine where syscalls are dear.
	mu   sync.Mutex
	idle []*udpSock
}

// udpSock is a socket to the backend with the buffer its replies are read
// into.
type udpSock struct {
	net.Conn
	buf []byte
}

func (f *front) answer(ctx context.Context, query []byte, overTCP bool) []byte {
	if len(query) < 12 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, f.patience)
	defer cancel()
	for {
		resp, err := f.try(ctx, query, overTCP)
		if err == nil {
			return resp
		}
		select {
		case <-ctx.Done():
			return servfail(query)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// try sends the query to dnsmasq once and returns its reply.
func (f *front) try(ctx context.Context, query []byte, overTCP bool) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, f.attempt)
	defer cancel()
	if !overTCP {
		return f.tryUDP(ctx, query)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", f.backend.String())
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Close() }()
	defer context.AfterFunc(ctx, func() { _ = c.Close() })()
	if _, err := c.Write(tcpMsg(query)); err != nil {
		return nil, err
	}
	return readTCPMsg(c)
}

// tryUDP asks over a connected socket: a dnsmasq that is gone shows as a
// refusal at once, and only its replies come back. The socket is kept for
// the next query only when this one got its reply.
func (f *front) tryUDP(ctx context.Context, query []byte) ([]byte, error) {
	c, err := f.udpConn(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := c.exchange(ctx, query)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	f.release(c)
	return resp, nil
}

func (c *udpSock) exchange(ctx context.Context, query []byte) ([]byte, error) {
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := c.Write(query); err != nil {
		return nil, err
	}
	for {
		n, err := c.Read(c.buf)
		if err != nil {
			return nil, err
		}
		if n >= 2 && bytes.Equal(c.buf[:2], query[:2]) {
			if !stop() {
				// The deadline was set after all: the socket must not
				// go back to the pool with it.
				return nil, ctx.Err()
			}
			return append([]byte(nil), c.buf[:n]...), nil
		}
	}
}

func (f *front) udpConn(ctx context.Context) (*udpSock, error) {
	f.mu.Lock()
	if n := len(f.idle); n > 0 {
		c := f.idle[n-1]
		f.idle = f.idle[:n-1]
		f.mu.Unlock()
		return c, nil
	}
	f.mu.Unlock()
	var d net.Dialer
	c, err := d.DialContext(ctx, "udp", f.backend.String())
	if err != nil {
		return nil, err
	}
	return &udpSock{Conn: c, buf: make([]byte, 65535)}, nil
}

func (f *front) release(c *udpSock) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.idle) < maxIdleSockets {
		f.idle = append(f.idle, c)
		return
	}
	_ = c.Close()
}

// servfail tells the agent at once that no answer is coming.
func servfail(query []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil {
		qs = nil
	}
	return reply(h, qs, dnsmessage.RCodeServerFailure)
}
