package main

import (
	"bytes"
	"context"
	"net"
	"net/netip"
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
	network := "udp"
	if overTCP {
		network = "tcp"
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, f.backend.String())
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Close() }()
	defer context.AfterFunc(ctx, func() { _ = c.Close() })()
	if !overTCP {
		// A connected socket: a dnsmasq that is gone shows as a refusal
		// at once, and only its replies come back.
		if _, err := c.Write(query); err != nil {
			return nil, err
		}
		buf := make([]byte, 65535)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return nil, err
			}
			if n >= 2 && bytes.Equal(buf[:2], query[:2]) {
				return buf[:n], nil
			}
		}
	}
	if _, err := c.Write(tcpMsg(query)); err != nil {
		return nil, err
	}
	return readTCPMsg(c)
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
