package main

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// The fake upstream and the filter both live on 127.0.0.1. The addresses
// in the fake answers are data only: nothing ever connects to them.

type fakeUpstream struct {
	udp  net.PacketConn
	tcp  net.Listener
	addr netip.AddrPort

	mu   sync.Mutex
	seen []string // "udp A mixed.test." per query received
}

// zone maps a question name to the records the fake answers it with.
type record struct {
	name string
	body dnsmessage.ResourceBody
}

func a(s string) dnsmessage.ResourceBody {
	return &dnsmessage.AResource{A: netip.MustParseAddr(s).As4()}
}

func aaaa(s string) dnsmessage.ResourceBody {
	return &dnsmessage.AAAAResource{AAAA: netip.MustParseAddr(s).As16()}
}

func cname(s string) dnsmessage.ResourceBody {
	return &dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName(s)}
}

// answerFor is the fake upstream's zone.
func answerFor(q dnsmessage.Question, overTCP bool) (h dnsmessage.Header, answers, additionals []record, drop bool) {
	h.RCode = dnsmessage.RCodeSuccess
	switch name := strings.ToLower(q.Name.String()); {
	case name == "mixed.test." && q.Type == dnsmessage.TypeA:
		answers = []record{
			{"mixed.test.", cname("real.mixed.test.")},
			{"real.mixed.test.", a("192.0.2.1")},
			{"real.mixed.test.", a("127.0.0.1")},
			{"real.mixed.test.", a("10.0.0.5")},
			{"real.mixed.test.", a("169.254.169.254")},
			{"real.mixed.test.", a("198.51.100.7")},
			{"real.mixed.test.", aaaa("2001:db8::1")},
		}
		additionals = []record{{"ns.mixed.test.", a("100.64.0.1")}, {"ns.mixed.test.", a("203.0.113.53")}}
	case name == "mixed.test." && q.Type == dnsmessage.TypeAAAA:
		answers = []record{
			{"mixed.test.", cname("real.mixed.test.")},
			{"real.mixed.test.", aaaa("2001:db8::1")},
			{"real.mixed.test.", aaaa("::1")},
			{"real.mixed.test.", aaaa("::ffff:192.0.2.1")},
		}
	case name == "big.test.":
		if !overTCP {
			h.Truncated = true
			return
		}
		for i := range 60 {
			answers = append(answers, record{"big.test.", a(netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}).String())})
		}
	case name == "nx.test.":
		h.RCode = dnsmessage.RCodeNameError
	case name == "servfail.test.":
		h.RCode = dnsmessage.RCodeServerFailure
	case name == "silent.test.":
		drop = true
	case name == "spoofed.test.":
		answers = []record{{"spoofed.test.", a("192.0.2.80")}}
	default:
		h.RCode = dnsmessage.RCodeNameError
	}
	return
}

func build(h dnsmessage.Header, q dnsmessage.Question, answers, additionals []record) []byte {
	b := dnsmessage.NewBuilder(nil, h)
	b.EnableCompression()
	must(b.StartQuestions())
	must(b.Question(q))
	must(b.StartAnswers())
	add := func(rs []record) {
		for _, r := range rs {
			rh := dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName(r.name), Class: dnsmessage.ClassINET, TTL: 60}
			switch body := r.body.(type) {
			case *dnsmessage.AResource:
				must(b.AResource(rh, *body))
			case *dnsmessage.AAAAResource:
				must(b.AAAAResource(rh, *body))
			case *dnsmessage.CNAMEResource:
				must(b.CNAMEResource(rh, *body))
			}
		}
	}
	add(answers)
	must(b.StartAdditionals())
	add(additionals)
	out, err := b.Finish()
	must(err)
	return out
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// respond is the fake upstream's handler; spoof sends a wrong-ID copy first.
func (u *fakeUpstream) respond(query []byte, overTCP bool) (replies [][]byte) {
	var m dnsmessage.Message
	if err := m.Unpack(query); err != nil || len(m.Questions) != 1 {
		return nil
	}
	q := m.Questions[0]
	proto := "udp"
	if overTCP {
		proto = "tcp"
	}
	u.mu.Lock()
	u.seen = append(u.seen, proto+" "+q.Type.String()+" "+q.Name.String())
	u.mu.Unlock()
	h, answers, additionals, drop := answerFor(q, overTCP)
	if drop {
		return nil
	}
	h.ID, h.Response, h.RecursionDesired, h.RecursionAvailable = m.ID, true, m.RecursionDesired, true
	if q.Name.String() == "spoofed.test." {
		fake := h
		fake.ID++
		replies = append(replies, build(fake, q, []record{{"spoofed.test.", a("127.0.0.1")}}, nil))
	}
	return append(replies, build(h, q, answers, additionals))
}

func (u *fakeUpstream) queries() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.seen)
}

func startFakeUpstream(t *testing.T) *fakeUpstream {
	t.Helper()
	return startFakeUpstreamOn(t, "127.0.0.1:0")
}

// startFakeUpstreamOn serves the fake upstream on addr, UDP and TCP.
func startFakeUpstreamOn(t *testing.T, addr string) *fakeUpstream {
	t.Helper()
	srv, err := listenDNS(nil, addr)
	if err != nil {
		t.Fatal(err)
	}
	u := &fakeUpstream{udp: srv.udp, tcp: srv.tcp, addr: netip.MustParseAddrPort(srv.tcp.Addr().String())}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = u.udp.Close()
		_ = u.tcp.Close()
		wg.Wait()
	})
	wg.Go(func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := u.udp.ReadFrom(buf)
			if err != nil {
				return
			}
			for _, r := range u.respond(buf[:n], false) {
				_, _ = u.udp.WriteTo(r, from)
			}
		}
	})
	wg.Go(func() {
		for {
			c, err := u.tcp.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer func() { _ = c.Close() }()
				for {
					q, err := readTCPMsg(c)
					if err != nil {
						return
					}
					for _, r := range u.respond(q, true) {
						_, _ = c.Write(tcpMsg(r))
					}
				}
			})
		}
	})
	return u
}

// deadAddr returns a loopback address where nothing listens, UDP or TCP.
func deadAddr(t *testing.T) netip.AddrPort {
	srv, err := listenDNS(nil, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.MustParseAddrPort(srv.tcp.Addr().String())
	_ = srv.udp.Close()
	_ = srv.tcp.Close()
	return addr
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startFilter runs the filter on an ephemeral loopback port and returns its
// address and its log.
func startFilter(t *testing.T, allow []netip.Prefix, upstreams ...netip.AddrPort) (string, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	f := &filter{upstreams: upstreams, allow: allow, timeout: 300 * time.Millisecond, log: log.New(logs, "routerd: ", 0)}
	srv, err := listenDNS(f, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("serve did not return after cancel")
		}
	})
	return srv.tcp.Addr().String(), logs
}

func newQuery(id uint16, name string, typ dnsmessage.Type, ednsSize int) []byte {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
	must(b.StartQuestions())
	must(b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}))
	if ednsSize > 0 {
		must(b.StartAdditionals())
		var rh dnsmessage.ResourceHeader
		must(rh.SetEDNS0(ednsSize, dnsmessage.RCodeSuccess, false))
		must(b.OPTResource(rh, dnsmessage.OPTResource{}))
	}
	out, err := b.Finish()
	must(err)
	return out
}

// ask sends one query over UDP or TCP and returns the parsed reply.
func ask(server string, query []byte, overTCP bool) (*dnsmessage.Message, error) {
	proto := "udp"
	if overTCP {
		proto = "tcp"
	}
	c, err := net.Dial(proto, server)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var resp []byte
	if overTCP {
		if _, err := c.Write(tcpMsg(query)); err != nil {
			return nil, err
		}
		if resp, err = readTCPMsg(c); err != nil {
			return nil, err
		}
	} else {
		if _, err := c.Write(query); err != nil {
			return nil, err
		}
		buf := make([]byte, 65535)
		n, err := c.Read(buf)
		if err != nil {
			return nil, err
		}
		resp = buf[:n]
	}
	var m dnsmessage.Message
	if err := m.Unpack(resp); err != nil {
		return nil, fmt.Errorf("client cannot parse the filter's answer: %w", err)
	}
	return &m, nil
}

func askUDP(t *testing.T, server string, query []byte) *dnsmessage.Message {
	t.Helper()
	m, err := ask(server, query, false)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func askTCP(t *testing.T, server string, query []byte) *dnsmessage.Message {
	t.Helper()
	m, err := ask(server, query, true)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func unpack(t *testing.T, b []byte) *dnsmessage.Message {
	t.Helper()
	var m dnsmessage.Message
	if err := m.Unpack(b); err != nil {
		t.Fatalf("client cannot parse the filter's answer: %v", err)
	}
	return &m
}

type asker func(*testing.T, string, []byte) *dnsmessage.Message

var transports = []struct {
	name string
	ask  asker
}{{"udp", askUDP}, {"tcp", askTCP}}

// summary renders the records of a section as "TYPE value" strings.
func summary(rs []dnsmessage.Resource) []string {
	var out []string
	for _, r := range rs {
		switch b := r.Body.(type) {
		case *dnsmessage.AResource:
			out = append(out, "A "+netip.AddrFrom4(b.A).String())
		case *dnsmessage.AAAAResource:
			out = append(out, "AAAA "+netip.AddrFrom16(b.AAAA).String())
		case *dnsmessage.CNAMEResource:
			out = append(out, "CNAME "+b.CNAME.String())
		case *dnsmessage.OPTResource:
			out = append(out, "OPT")
		default:
			out = append(out, r.Header.Type.String())
		}
	}
	return out
}

func logLines(s string) []string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return nil
	}
	slices.Sort(lines)
	return lines
}

func TestFilterA(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			up := startFakeUpstream(t)
			addr, logs := startFilter(t, nil, up.addr)
			m := tr.ask(t, addr, newQuery(0x1234, "mixed.test.", dnsmessage.TypeA, 0))
			if m.ID != 0x1234 || !m.Response || m.RCode != dnsmessage.RCodeSuccess {
				t.Fatalf("header %+v, want a NOERROR response with ID 0x1234", m.Header)
			}
			if len(m.Questions) != 1 || m.Questions[0].Name.String() != "mixed.test." {
				t.Errorf("questions %v", m.Questions)
			}
			want := []string{"CNAME real.mixed.test.", "A 192.0.2.1", "A 198.51.100.7"}
			if got := summary(m.Answers); !slices.Equal(got, want) {
				t.Errorf("answers %v, want %v", got, want)
			}
			if got, want := summary(m.Additionals), []string{"A 203.0.113.53"}; !slices.Equal(got, want) {
				t.Errorf("additionals %v, want %v", got, want)
			}
			wantLog := []string{
				"routerd: refused upstream address 10.0.0.5 for mixed.test: private",
				"routerd: refused upstream address 100.64.0.1 for mixed.test: shared (CGNAT)",
				"routerd: refused upstream address 127.0.0.1 for mixed.test: loopback",
				"routerd: refused upstream address 169.254.169.254 for mixed.test: link-local",
				"routerd: refused upstream address 2001:db8::1 for mixed.test: ipv6",
			}
			if got := logLines(logs.String()); !slices.Equal(got, wantLog) {
				t.Errorf("log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantLog, "\n"))
			}
			if got, want := up.queries(), []string{tr.name + " TypeA mixed.test."}; !slices.Equal(got, want) {
				t.Errorf("upstream saw %v, want %v", got, want)
			}
		})
	}
}

func TestFilterAllowList(t *testing.T) {
	up := startFakeUpstream(t)
	allow := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("169.254.0.0/16")}
	addr, logs := startFilter(t, allow, up.addr)
	m := askUDP(t, addr, newQuery(1, "mixed.test.", dnsmessage.TypeA, 0))
	want := []string{"CNAME real.mixed.test.", "A 192.0.2.1", "A 10.0.0.5", "A 198.51.100.7"}
	if got := summary(m.Answers); !slices.Equal(got, want) {
		t.Errorf("answers %v, want %v", got, want)
	}
	if !strings.Contains(logs.String(), "127.0.0.1 for mixed.test: loopback") {
		t.Errorf("loopback not refused despite the allowlist; log:\n%s", logs)
	}
}

func TestFilterAAAA(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			up := startFakeUpstream(t)
			addr, logs := startFilter(t, nil, up.addr)
			m := tr.ask(t, addr, newQuery(7, "mixed.test.", dnsmessage.TypeAAAA, 0))
			if m.RCode != dnsmessage.RCodeSuccess {
				t.Fatalf("rcode %v", m.RCode)
			}
			if got, want := summary(m.Answers), []string{"CNAME real.mixed.test."}; !slices.Equal(got, want) {
				t.Errorf("answers %v, want %v", got, want)
			}
			wantLog := []string{
				"routerd: refused upstream address 2001:db8::1 for mixed.test: ipv6",
				"routerd: refused upstream address ::1 for mixed.test: loopback",
				"routerd: refused upstream address ::ffff:192.0.2.1 for mixed.test: ipv6",
			}
			if got := logLines(logs.String()); !slices.Equal(got, wantLog) {
				t.Errorf("log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantLog, "\n"))
			}
		})
	}
}

func TestFilterPassesRCodes(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			up := startFakeUpstream(t)
			addr, logs := startFilter(t, nil, up.addr)
			m := tr.ask(t, addr, newQuery(9, "nx.test.", dnsmessage.TypeA, 0))
			if m.RCode != dnsmessage.RCodeNameError || m.ID != 9 {
				t.Errorf("header %+v, want NXDOMAIN with ID 9", m.Header)
			}
			if logs.String() != "" {
				t.Errorf("unexpected log: %s", logs)
			}
		})
	}
}

func TestFilterUpstreamDown(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			addr, logs := startFilter(t, nil, deadAddr(t), deadAddr(t))
			start := time.Now()
			m := tr.ask(t, addr, newQuery(42, "mixed.test.", dnsmessage.TypeA, 0))
			if m.RCode != dnsmessage.RCodeServerFailure || m.ID != 42 || len(m.Answers) != 0 {
				t.Errorf("got %+v with %d answers, want SERVFAIL with ID 42 and no answers", m.Header, len(m.Answers))
			}
			if len(m.Questions) != 1 || m.Questions[0].Name.String() != "mixed.test." {
				t.Errorf("SERVFAIL questions %v", m.Questions)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("SERVFAIL took %v", d)
			}
			if got := logs.String(); !strings.HasPrefix(got, "routerd: upstream DNS failed for mixed.test: ") || strings.Count(got, "\n") != 1 {
				t.Errorf("log %q, want one line reporting the failure", got)
			}
		})
	}
}

func TestFilterUpstreamSilent(t *testing.T) {
	up := startFakeUpstream(t)
	addr, _ := startFilter(t, nil, up.addr)
	start := time.Now()
	m := askUDP(t, addr, newQuery(5, "silent.test.", dnsmessage.TypeA, 0))
	if m.RCode != dnsmessage.RCodeServerFailure {
		t.Errorf("rcode %v, want SERVFAIL", m.RCode)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 2*time.Second {
		t.Errorf("SERVFAIL after %v, want after the 300ms upstream timeout", d)
	}
}

func TestFilterTriesEachServer(t *testing.T) {
	bad := startFakeUpstream(t) // answers servfail.test with SERVFAIL...
	good := startFakeUpstream(t)
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			addr, _ := startFilter(t, nil, deadAddr(t), good.addr)
			m := tr.ask(t, addr, newQuery(3, "mixed.test.", dnsmessage.TypeA, 0))
			if got := summary(m.Answers); len(got) != 3 {
				t.Errorf("answers %v, want the good server's answer", got)
			}
		})
	}
	// ...so a SERVFAIL from one server sends the query on to the next.
	addr, _ := startFilter(t, nil, bad.addr, bad.addr)
	if m := askUDP(t, addr, newQuery(4, "servfail.test.", dnsmessage.TypeA, 0)); m.RCode != dnsmessage.RCodeServerFailure {
		t.Errorf("rcode %v, want SERVFAIL", m.RCode)
	}
	if got := bad.queries(); len(got) != 2 {
		t.Errorf("upstream saw %v, want the query twice", got)
	}
}

func TestFilterTruncatedRetriesOverTCP(t *testing.T) {
	up := startFakeUpstream(t)
	addr, _ := startFilter(t, nil, up.addr)

	// A client with room for the answer gets it over UDP.
	m := askUDP(t, addr, newQuery(11, "big.test.", dnsmessage.TypeA, 4096))
	if m.Truncated || len(m.Answers) != 60 {
		t.Errorf("EDNS client: truncated=%v, %d answers; want 60", m.Truncated, len(m.Answers))
	}
	if got, want := up.queries(), []string{"udp TypeA big.test.", "tcp TypeA big.test."}; !slices.Equal(got, want) {
		t.Errorf("upstream saw %v, want %v", got, want)
	}

	// A plain 512-byte client is told to come back over TCP.
	m = askUDP(t, addr, newQuery(12, "big.test.", dnsmessage.TypeA, 0))
	if !m.Truncated || len(m.Answers) != 0 || m.ID != 12 || len(m.Questions) != 1 {
		t.Errorf("plain client: %+v, %d answers; want an empty truncated answer", m.Header, len(m.Answers))
	}
	m = askTCP(t, addr, newQuery(13, "big.test.", dnsmessage.TypeA, 0))
	if m.Truncated || len(m.Answers) != 60 {
		t.Errorf("over TCP: truncated=%v, %d answers; want 60", m.Truncated, len(m.Answers))
	}
}

func TestFilterIgnoresSpoofedAnswer(t *testing.T) {
	up := startFakeUpstream(t)
	addr, _ := startFilter(t, nil, up.addr)
	m := askUDP(t, addr, newQuery(21, "spoofed.test.", dnsmessage.TypeA, 0))
	if got, want := summary(m.Answers), []string{"A 192.0.2.80"}; !slices.Equal(got, want) {
		t.Errorf("answers %v, want %v", got, want)
	}
}

func TestFilterKeepsEDNS(t *testing.T) {
	up := startFakeUpstream(t)
	addr, _ := startFilter(t, nil, up.addr)
	m := askUDP(t, addr, newQuery(22, "spoofed.test.", dnsmessage.TypeA, 1232))
	if m.RCode != dnsmessage.RCodeSuccess || len(m.Answers) != 1 {
		t.Errorf("EDNS query: %+v, %v", m.Header, summary(m.Answers))
	}
}

func TestFilterBadQueries(t *testing.T) {
	up := startFakeUpstream(t)
	addr, _ := startFilter(t, nil, up.addr)

	// Two questions: FORMERR.
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 31})
	must(b.StartQuestions())
	for _, n := range []string{"a.test.", "b.test."} {
		must(b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(n), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}))
	}
	q, _ := b.Finish()
	if m := askUDP(t, addr, q); m.RCode != dnsmessage.RCodeFormatError || m.ID != 31 {
		t.Errorf("two questions: %+v, want FORMERR", m.Header)
	}

	// Not a QUERY: NOTIMP.
	q = newQuery(32, "mixed.test.", dnsmessage.TypeA, 0)
	q[2] |= 5 << 3 // opcode UPDATE
	if m := askTCP(t, addr, q); m.RCode != dnsmessage.RCodeNotImplemented || m.ID != 32 {
		t.Errorf("UPDATE: %+v, want NOTIMP", m.Header)
	}

	// Garbage and responses get no reply at all; the server keeps serving.
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	resp := newQuery(33, "mixed.test.", dnsmessage.TypeA, 0)
	resp[2] |= 0x80
	for _, junk := range [][]byte{{1, 2, 3}, resp} {
		_, _ = c.Write(junk)
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := c.Read(make([]byte, 512)); err == nil {
		t.Errorf("got a %d-byte reply to junk", n)
	}
	if got := up.queries(); len(got) != 0 {
		t.Errorf("bad queries reached the upstream: %v", got)
	}
	if m := askUDP(t, addr, newQuery(34, "nx.test.", dnsmessage.TypeA, 0)); m.RCode != dnsmessage.RCodeNameError {
		t.Errorf("after junk: %+v", m.Header)
	}
}

func TestFilterTCPPipelining(t *testing.T) {
	up := startFakeUpstream(t)
	addr, _ := startFilter(t, nil, up.addr)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var batch []byte
	for id := range uint16(5) {
		batch = append(batch, tcpMsg(newQuery(100+id, "mixed.test.", dnsmessage.TypeA, 0))...)
	}
	if _, err := c.Write(batch); err != nil {
		t.Fatal(err)
	}
	var ids []int
	for range 5 {
		resp, err := readTCPMsg(c)
		if err != nil {
			t.Fatal(err)
		}
		m := unpack(t, resp)
		ids = append(ids, int(m.ID))
		if len(m.Answers) != 3 {
			t.Errorf("ID %d: answers %v", m.ID, summary(m.Answers))
		}
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []int{100, 101, 102, 103, 104}) {
		t.Errorf("IDs %v", ids)
	}
}

func TestFilterConcurrent(t *testing.T) {
	up := startFakeUpstream(t)
	addr, _ := startFilter(t, nil, up.addr)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			m, err := ask(addr, newQuery(uint16(i), "mixed.test.", dnsmessage.TypeA, 0), i%2 == 1)
			if err != nil {
				t.Error(err)
				return
			}
			if m.ID != uint16(i) || len(m.Answers) != 3 {
				t.Errorf("query %d: %+v %v", i, m.Header, summary(m.Answers))
			}
		})
	}
	wg.Wait()
}

func TestHostname(t *testing.T) {
	for in, want := range map[string]string{
		"allowed.test.":    "allowed.test",
		".":                ".",
		"a\nb.test.":       `a\010b.test`,
		"sp ace.test.":     `sp\032ace.test`,
		"Mixed.Case.test.": "Mixed.Case.test",
	} {
		if got := hostname(dnsmessage.MustNewName(in)); got != want {
			t.Errorf("hostname(%q) = %q, want %q", in, got, want)
		}
	}
}
