package inspect

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// lookupTimeout bounds one lookup: routerd's filter tries each upstream
// server for two seconds.
const lookupTimeout = 10 * time.Second

// lookupA asks server, and only server, for the IPv4 addresses of host.
// Not net.Resolver: Go's resolver reads /etc/hosts and resolv.conf's search
// list first, and an upstream name must resolve through routerd's filter
// alone, which drops the addresses the router must not reach.
func lookupA(ctx context.Context, server, host string) ([]netip.Addr, error) {
	name, err := dnsmessage.NewName(host + ".")
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	q := dnsmessage.Question{Name: name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}
	id := uint16(rand.Uint32())
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
	_ = b.StartQuestions()
	_ = b.Question(q)
	query, err := b.Finish()
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	resp, err := exchange(ctx, "udp", server, query)
	if err == nil && truncated(resp) {
		resp, err = exchange(ctx, "tcp", server, query)
	}
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	addrs, err := answerA(resp, id, q)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	return addrs, nil
}

// exchange sends one query and reads one reply.
func exchange(ctx context.Context, network, server string, query []byte) ([]byte, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, server)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Close() }()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	if network == "udp" {
		if _, err := c.Write(query); err != nil {
			return nil, err
		}
		buf := make([]byte, 65535)
		n, err := c.Read(buf)
		return buf[:n], err
	}
	if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(query))), query...)); err != nil {
		return nil, err
	}
	var size [2]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		return nil, err
	}
	resp := make([]byte, binary.BigEndian.Uint16(size[:]))
	_, err = io.ReadFull(c, resp)
	return resp, err
}

func truncated(resp []byte) bool {
	var p dnsmessage.Parser
	h, err := p.Start(resp)
	return err == nil && h.Truncated
}

// answerA reads the A records of a reply to q.
func answerA(resp []byte, id uint16, q dnsmessage.Question) ([]netip.Addr, error) {
	var p dnsmessage.Parser
	h, err := p.Start(resp)
	if err != nil {
		return nil, err
	}
	if h.ID != id || !h.Response {
		return nil, errors.New("reply does not match the query")
	}
	if h.RCode != dnsmessage.RCodeSuccess {
		return nil, fmt.Errorf("server answered %v", h.RCode)
	}
	qs, err := p.AllQuestions()
	if err != nil {
		return nil, err
	}
	if len(qs) != 1 || qs[0].Type != q.Type || !equalNames(qs[0].Name, q.Name) {
		return nil, errors.New("reply does not match the query")
	}
	var addrs []netip.Addr
	for {
		ah, err := p.AnswerHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			break
		}
		if err != nil {
			return nil, err
		}
		if ah.Type != dnsmessage.TypeA || ah.Class != dnsmessage.ClassINET {
			if err := p.SkipAnswer(); err != nil {
				return nil, err
			}
			continue
		}
		a, err := p.AResource()
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, netip.AddrFrom4(a.A))
	}
	if len(addrs) == 0 {
		return nil, errors.New("no IPv4 address")
	}
	return addrs, nil
}

func equalNames(a, b dnsmessage.Name) bool {
	if a.Length != b.Length {
		return false
	}
	for i := range int(a.Length) {
		x, y := a.Data[i], b.Data[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
