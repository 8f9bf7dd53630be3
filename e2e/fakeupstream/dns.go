package main

import (
	"net"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/agent-sandbox/agent-sandbox/internal/dnsserve"
)

// dnsServer is authoritative for its zone only and never recurses, so a query
// that reaches it can only have been forwarded by whoever asked.
type dnsServer struct {
	zone *zone
	log  *eventLog
}

// serve answers on both transports until they are closed.
func (s *dnsServer) serve(pc net.PacketConn, l net.Listener) {
	go dnsserve.UDP(pc, s.answer)
	go dnsserve.TCP(l, 30*time.Second, s.answer, func(from net.Addr, partial []byte) {
		s.log.printf("dns tcp truncated from=%s data=%q", from, partial)
	})
}

// answer logs every question and builds the reply; nil means "drop".
func (s *dnsServer) answer(req []byte, transport string, fromAddr net.Addr) []byte {
	from := fromAddr.String()
	var p dnsmessage.Parser
	hdr, err := p.Start(req)
	if err != nil {
		s.log.printf("dns %s malformed from=%s data=%q", transport, from, req)
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil {
		s.log.printf("dns %s malformed from=%s id=%d data=%q", transport, from, hdr.ID, req)
		return reply(hdr, nil, dnsmessage.RCodeFormatError, nil)
	}
	rcode := dnsmessage.RCodeSuccess
	var answers []dnsmessage.Resource
	for i, q := range qs {
		ip, known := s.zone.lookup(q.Name.String())
		s.log.printf("dns %s query name=%q type=%s from=%s known=%t", transport, q.Name.String(), typeName(q.Type), from, known)
		if _, isIP, refused := s.zone.ipName(canonical(q.Name.String())); isIP && refused {
			s.log.printf("dns ip-name refused name=%q: not in -ip-allow", q.Name.String())
		}
		if i > 0 {
			continue // one question per message is all real resolvers send
		}
		switch {
		case !known:
			rcode = dnsmessage.RCodeNameError
		case q.Type == dnsmessage.TypeA && q.Class == dnsmessage.ClassINET:
			var a [4]byte
			copy(a[:], ip)
			answers = append(answers, dnsmessage.Resource{
				Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 5},
				Body:   &dnsmessage.AResource{A: a},
			})
		case (q.Type == dnsmessage.TypeHTTPS || q.Type == dnsmessage.TypeSVCB) && q.Class == dnsmessage.ClassINET:
			// Real fronts publish ECH keys here; the router must never pass
			// them on, and the suite's controls show they exist upstream.
			answers = append(answers, dnsmessage.Resource{
				Header: dnsmessage.ResourceHeader{Name: q.Name, Type: q.Type, Class: dnsmessage.ClassINET, TTL: 5},
				Body:   echRecord(q.Type),
			})
		}
		// A known name asked for another type gets NODATA: an NXDOMAIN there
		// would let a caching resolver forget the A record too.
	}
	return reply(hdr, qs, rcode, answers)
}

func reply(req dnsmessage.Header, qs []dnsmessage.Question, rcode dnsmessage.RCode, answers []dnsmessage.Resource) []byte {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{
		ID:               req.ID,
		Response:         true,
		OpCode:           req.OpCode,
		Authoritative:    true,
		RecursionDesired: req.RecursionDesired,
		RCode:            rcode,
	})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil
	}
	for _, q := range qs {
		if err := b.Question(q); err != nil {
			return nil
		}
	}
	if err := b.StartAnswers(); err != nil {
		return nil
	}
	for _, a := range answers {
		var err error
		switch body := a.Body.(type) {
		case *dnsmessage.AResource:
			err = b.AResource(a.Header, *body)
		case *dnsmessage.HTTPSResource:
			err = b.HTTPSResource(a.Header, *body)
		case *dnsmessage.SVCBResource:
			err = b.SVCBResource(a.Header, *body)
		}
		if err != nil {
			return nil
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// typeName drops the "Type" prefix dnsmessage puts on its names.
func typeName(t dnsmessage.Type) string {
	s := t.String()
	if len(s) > 4 && s[:4] == "Type" {
		return s[4:]
	}
	return s
}

// echConfig is what the fake publishes as ECH keys: not a usable config,
// only bytes a test can recognise in an answer.
const echConfig = "asb-e2e-fake-ech-config"

func echRecord(t dnsmessage.Type) dnsmessage.ResourceBody {
	svcb := dnsmessage.SVCBResource{Priority: 1, Target: dnsmessage.MustNewName(".")}
	svcb.SetParam(dnsmessage.SVCParamALPN, []byte("\x02h2"))
	svcb.SetParam(dnsmessage.SVCParamECH, []byte(echConfig))
	if t == dnsmessage.TypeHTTPS {
		return &dnsmessage.HTTPSResource{SVCBResource: svcb}
	}
	return &svcb
}
