package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

const (
	// upstreamTimeout bounds each attempt at one upstream server, so that a
	// dead first server still leaves time for the next within nginx's
	// resolver timeout.
	upstreamTimeout = 2 * time.Second
	// tcpIdleTimeout closes client connections that stop asking.
	tcpIdleTimeout = 10 * time.Second
	// maxInFlight bounds concurrent UDP queries and TCP connections, and
	// maxPipelined the queries in flight on one connection, so that a flood
	// cannot exhaust memory.
	maxInFlight  = 256
	maxPipelined = 16
)

// filter answers queries by asking the upstream servers and removing every
// address the router must not connect to.
type filter struct {
	upstreams []netip.AddrPort
	allow     []netip.Prefix
	timeout   time.Duration
	log       *log.Logger
}

// answerer replies to one DNS query; nil means no reply at all.
type answerer interface {
	answer(ctx context.Context, query []byte, overTCP bool) []byte
}

// dnsServer is an answerer (the filter, or the front before dnsmasq)
// bound to one UDP and one TCP socket on the same port.
type dnsServer struct {
	f   answerer
	udp net.PacketConn
	tcp net.Listener
}

// listenDNS binds UDP and TCP on addr. With port 0 both get the same
// ephemeral port, as a resolver expects TCP where it got a truncated UDP answer.
func listenDNS(f answerer, addr string) (*dnsServer, error) {
	for attempt := 0; ; attempt++ {
		tcp, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("cannot listen on %s/tcp: %w", addr, err)
		}
		udp, err := net.ListenPacket("udp", tcp.Addr().String())
		if err == nil {
			return &dnsServer{f: f, udp: udp, tcp: tcp}, nil
		}
		_ = tcp.Close()
		if !strings.HasSuffix(addr, ":0") || attempt == 10 {
			return nil, fmt.Errorf("cannot listen on %s/udp: %w", tcp.Addr(), err)
		}
	}
}

// serve answers until ctx ends. An error means the filter stopped on its own.
func (s *dnsServer) serve(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() {
		_ = s.udp.Close()
		_ = s.tcp.Close()
	})
	defer stop()
	errc := make(chan error, 2)
	wg.Go(func() { errc <- s.serveUDP(ctx, &wg) })
	wg.Go(func() { errc <- s.serveTCP(ctx, &wg) })
	err := <-errc
	if ctx.Err() != nil {
		return nil
	}
	_ = s.udp.Close()
	_ = s.tcp.Close()
	return err
}

func (s *dnsServer) serveUDP(ctx context.Context, wg *sync.WaitGroup) error {
	sem := make(chan struct{}, maxInFlight)
	buf := make([]byte, 65535)
	for {
		n, from, err := s.udp.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("udp: %w", err)
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		q := append([]byte(nil), buf[:n]...)
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if resp := s.f.answer(ctx, q, false); resp != nil {
				_, _ = s.udp.WriteTo(resp, from)
			}
		})
	}
}

func (s *dnsServer) serveTCP(ctx context.Context, wg *sync.WaitGroup) error {
	sem := make(chan struct{}, maxInFlight)
	for {
		c, err := s.tcp.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("tcp: %w", err)
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			s.serveConn(ctx, c)
		})
	}
}

// serveConn answers pipelined queries on one connection concurrently
// (RFC 7766), each reply written whole.
func (s *dnsServer) serveConn(ctx context.Context, c net.Conn) {
	defer func() { _ = c.Close() }()
	defer context.AfterFunc(ctx, func() { _ = c.Close() })()
	var (
		wg  sync.WaitGroup
		wmu sync.Mutex
		sem = make(chan struct{}, maxPipelined)
	)
	defer wg.Wait()
	for {
		_ = c.SetReadDeadline(time.Now().Add(tcpIdleTimeout))
		q, err := readTCPMsg(c)
		if err != nil {
			return
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			resp := s.f.answer(ctx, q, true)
			if resp == nil {
				return
			}
			wmu.Lock()
			defer wmu.Unlock()
			_ = c.SetWriteDeadline(time.Now().Add(tcpIdleTimeout))
			_, _ = c.Write(tcpMsg(resp))
		})
	}
}

func readTCPMsg(r io.Reader) ([]byte, error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	msg := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(r, msg); err != nil {
		return nil, err
	}
	return msg, nil
}

func tcpMsg(msg []byte) []byte {
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(msg))), msg...)
}

// answer returns the reply to one query, or nil when the query is too
// broken to reply to.
func (f *filter) answer(ctx context.Context, query []byte, overTCP bool) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return reply(h, nil, dnsmessage.RCodeFormatError)
	}
	if h.OpCode != 0 {
		return reply(h, qs, dnsmessage.RCodeNotImplemented)
	}
	q := qs[0]
	resp, err := f.exchange(ctx, query, q, overTCP)
	if err != nil {
		if ctx.Err() == nil { // shutting down is no upstream failure
			f.log.Printf("upstream DNS failed for %s: %v", hostname(q.Name), err)
		}
		return reply(h, qs, dnsmessage.RCodeServerFailure)
	}
	m, err := f.clean(resp, hostname(q.Name))
	if err != nil {
		f.log.Printf("bad upstream answer for %s: %v", hostname(q.Name), err)
		return reply(h, qs, dnsmessage.RCodeServerFailure)
	}
	m.ID = h.ID
	out, err := m.Pack()
	if err != nil {
		f.log.Printf("cannot repack answer for %s: %v", hostname(q.Name), err)
		return reply(h, qs, dnsmessage.RCodeServerFailure)
	}
	if !overTCP && len(out) > udpLimit(&p) {
		// The full answer came over TCP; tell the client to ask that way too.
		m.Truncated = true
		m.Answers, m.Authorities, m.Additionals = nil, nil, nil
		if out, err = m.Pack(); err != nil {
			return reply(h, qs, dnsmessage.RCodeServerFailure)
		}
	}
	return out
}

// udpLimit is the largest UDP reply the client accepts: 512 bytes unless
// its EDNS OPT record says more. p must be positioned after the questions.
func udpLimit(p *dnsmessage.Parser) int {
	if p.SkipAllAnswers() != nil || p.SkipAllAuthorities() != nil {
		return 512
	}
	for {
		h, err := p.AdditionalHeader()
		if err != nil {
			return 512
		}
		if h.Type == dnsmessage.TypeOPT {
			return max(512, int(h.Class))
		}
		if p.SkipAdditional() != nil {
			return 512
		}
	}
}

// reply builds an answerless reply to the query with header h.
func reply(h dnsmessage.Header, qs []dnsmessage.Question, rcode dnsmessage.RCode) []byte {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{
		ID:                 h.ID,
		Response:           true,
		OpCode:             h.OpCode,
		RecursionDesired:   h.RecursionDesired,
		RecursionAvailable: true,
		RCode:              rcode,
	})
	b.EnableCompression()
	_ = b.StartQuestions()
	for _, q := range qs {
		_ = b.Question(q)
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// hostname renders a name for the log; odd bytes are escaped as in zone
// files so that a name cannot forge log lines.
func hostname(n dnsmessage.Name) string {
	s := strings.TrimSuffix(n.String(), ".")
	if s == "" {
		return "."
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c > ' ' && c < 0x7f {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "\\%03d", c)
		}
	}
	return b.String()
}

// clean removes every refused A record and every AAAA record from all
// sections of the upstream answer, logging each one.
func (f *filter) clean(resp []byte, qname string) (*dnsmessage.Message, error) {
	var m dnsmessage.Message
	if err := m.Unpack(resp); err != nil {
		return nil, err
	}
	removed := false
	keep := func(rs []dnsmessage.Resource) []dnsmessage.Resource {
		out := rs[:0]
		for _, r := range rs {
			if ip, ok := recordAddr(r); ok {
				ok, reason := allowed(ip, f.allow)
				if ip.Is6() && ok {
					// The router's egress is IPv4 only.
					ok, reason = false, "ipv6"
				}
				if !ok {
					f.log.Printf("refused upstream address %s for %s: %s", ip, qname, reason)
					removed = true
					continue
				}
			}
			out = append(out, r)
		}
		return out
	}
	m.Answers = keep(m.Answers)
	m.Authorities = keep(m.Authorities)
	m.Additionals = keep(m.Additionals)
	if removed {
		// What is left is no longer the signed answer.
		m.AuthenticData = false
	}
	return &m, nil
}

func recordAddr(r dnsmessage.Resource) (netip.Addr, bool) {
	switch b := r.Body.(type) {
	case *dnsmessage.AResource:
		return netip.AddrFrom4(b.A), true
	case *dnsmessage.AAAAResource:
		return netip.AddrFrom16(b.AAAA), true
	}
	return netip.Addr{}, false
}

// exchange asks each upstream server in turn until one answers usefully.
// The query goes out under a fresh random ID so that an answer cannot be
// forged by anyone who merely saw the client's query.
func (f *filter) exchange(ctx context.Context, query []byte, q dnsmessage.Question, overTCP bool) ([]byte, error) {
	if len(f.upstreams) == 0 {
		return nil, errors.New("no upstream servers")
	}
	id := uint16(rand.Uint32())
	query = append([]byte(nil), query...)
	binary.BigEndian.PutUint16(query, id)
	var errs []string // one log line for all servers
	for _, server := range f.upstreams {
		resp, err := f.exchangeOne(ctx, server, query, id, q, overTCP)
		if err == nil {
			return resp, nil
		}
		errs = append(errs, fmt.Sprintf("%s: %v", server, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.New(strings.Join(errs, "; "))
}

func (f *filter) exchangeOne(ctx context.Context, server netip.AddrPort, query []byte, id uint16, q dnsmessage.Question, overTCP bool) ([]byte, error) {
	if !overTCP {
		resp, h, err := f.exchangeUDP(ctx, server, query, id, q)
		if err != nil {
			return nil, err
		}
		if !h.Truncated {
			return resp, usable(h)
		}
	}
	resp, h, err := f.exchangeTCP(ctx, server, query, id, q)
	if err != nil {
		return nil, err
	}
	return resp, usable(h)
}

// usable rejects the answers that mean "ask someone else".
func usable(h dnsmessage.Header) error {
	switch h.RCode {
	case dnsmessage.RCodeServerFailure, dnsmessage.RCodeRefused, dnsmessage.RCodeNotImplemented, dnsmessage.RCodeFormatError:
		return fmt.Errorf("answered %s", strings.TrimPrefix(h.RCode.String(), "RCode"))
	}
	if h.Truncated {
		return errors.New("truncated answer over tcp")
	}
	return nil
}

func (f *filter) exchangeUDP(ctx context.Context, server netip.AddrPort, query []byte, id uint16, q dnsmessage.Question) ([]byte, dnsmessage.Header, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "udp", server.String())
	if err != nil {
		return nil, dnsmessage.Header{}, err
	}
	defer func() { _ = c.Close() }()
	defer context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })()
	if _, err := c.Write(query); err != nil {
		return nil, dnsmessage.Header{}, err
	}
	buf := make([]byte, 65535)
	for {
		n, err := c.Read(buf)
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return nil, dnsmessage.Header{}, err
		}
		// Stray datagrams on our port are ignored, not trusted.
		if h, err := matchAnswer(buf[:n], id, q); err == nil {
			return append([]byte(nil), buf[:n]...), h, nil
		}
	}
}

func (f *filter) exchangeTCP(ctx context.Context, server netip.AddrPort, query []byte, id uint16, q dnsmessage.Question) ([]byte, dnsmessage.Header, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", server.String())
	if err != nil {
		return nil, dnsmessage.Header{}, err
	}
	defer func() { _ = c.Close() }()
	defer context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })()
	if _, err := c.Write(tcpMsg(query)); err != nil {
		return nil, dnsmessage.Header{}, err
	}
	resp, err := readTCPMsg(c)
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, dnsmessage.Header{}, err
	}
	h, err := matchAnswer(resp, id, q)
	return resp, h, err
}

// matchAnswer checks that resp answers our query: same ID, same question.
func matchAnswer(resp []byte, id uint16, q dnsmessage.Question) (dnsmessage.Header, error) {
	var p dnsmessage.Parser
	h, err := p.Start(resp)
	if err != nil {
		return h, err
	}
	if !h.Response || h.ID != id {
		return h, errors.New("answer does not match the query")
	}
	qs, err := p.AllQuestions()
	if err != nil {
		return h, err
	}
	if len(qs) != 1 || qs[0].Type != q.Type || qs[0].Class != q.Class || !strings.EqualFold(qs[0].Name.String(), q.Name.String()) {
		return h, errors.New("answer is for another question")
	}
	return h, nil
}
