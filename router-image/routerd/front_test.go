package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// startFront serves a front for backend on an ephemeral loopback port.
func startFront(t *testing.T, backend netip.AddrPort, patience time.Duration) string {
	t.Helper()
	srv, err := listenDNS(&front{backend: backend, attempt: 100 * time.Millisecond, patience: patience}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		_ = srv.serve(ctx)
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return srv.tcp.Addr().String()
}

func TestFrontRelays(t *testing.T) {
	up := startFakeUpstream(t)
	addr := startFront(t, up.addr, time.Second)
	for _, overTCP := range []bool{false, true} {
		m, err := ask(addr, newQuery(7, "mixed.test.", dnsmessage.TypeA, 0), overTCP)
		if err != nil {
			t.Fatalf("tcp=%v: %v", overTCP, err)
		}
		// Unfiltered: the front passes dnsmasq's answer as it is.
		if m.ID != 7 || len(m.Answers) != 7 {
			t.Errorf("tcp=%v: id %d answers %v", overTCP, m.ID, summary(m.Answers))
		}
		m, err = ask(addr, newQuery(8, "nx.test.", dnsmessage.TypeA, 0), overTCP)
		if err != nil || m.RCode != dnsmessage.RCodeNameError {
			t.Errorf("tcp=%v: nx.test gave %v, %v", overTCP, m, err)
		}
	}
	// A reply with another ID (a stray or forged one) is not passed on.
	m, err := ask(addr, newQuery(9, "spoofed.test.", dnsmessage.TypeA, 0), false)
	if err != nil || m.ID != 9 || len(m.Answers) != 1 || summary(m.Answers)[0] != "A 192.0.2.80" {
		t.Errorf("spoofed.test gave %v, %v", m, err)
	}
	if want := []string{"udp TypeA mixed.test.", "udp TypeA nx.test.", "tcp TypeA mixed.test.", "tcp TypeA nx.test.", "udp TypeA spoofed.test."}; strings.Join(up.queries(), ",") != strings.Join(want, ",") {
		t.Errorf("backend saw %v, want %v", up.queries(), want)
	}
}

// TestFrontWaitsForBackend: a query that arrives while dnsmasq is
// restarting is answered once it is back, not refused.
func TestFrontWaitsForBackend(t *testing.T) {
	for _, overTCP := range []bool{false, true} {
		// The old dnsmasq takes the query and dies without an answer:
		// once it has the query, the query is in flight at the front.
		old, err := listenDNS(nil, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		backend := netip.MustParseAddrPort(old.tcp.Addr().String())
		addr := startFront(t, backend, 3*time.Second)
		type result struct {
			m   *dnsmessage.Message
			err error
		}
		got := make(chan result, 1)
		go func() {
			m, err := ask(addr, newQuery(1, "mixed.test.", dnsmessage.TypeA, 0), overTCP)
			got <- result{m, err}
		}()
		if overTCP {
			_ = old.tcp.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
			c, err := old.tcp.Accept()
			if err != nil {
				t.Fatalf("tcp=%v: the query never reached the backend: %v", overTCP, err)
			}
			_ = c.Close()
		} else {
			_ = old.udp.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, _, err := old.udp.ReadFrom(make([]byte, 512)); err != nil {
				t.Fatalf("tcp=%v: the query never reached the backend: %v", overTCP, err)
			}
		}
		_ = old.udp.Close()
		_ = old.tcp.Close()
		// The restart's gap, in which the front's tries are refused: the
		// outage under test, not a wait for something to happen.
		time.Sleep(300 * time.Millisecond)
		select {
		case r := <-got:
			t.Fatalf("tcp=%v: answered while the backend was away: %v, %v", overTCP, r.m, r.err)
		default:
		}
		up := startFakeUpstreamOn(t, backend.String())
		back := time.Now()
		r := <-got
		if r.err != nil || r.m.RCode != dnsmessage.RCodeSuccess || len(r.m.Answers) != 7 {
			t.Fatalf("tcp=%v: %v, %v", overTCP, r.m, r.err)
		}
		if d := time.Since(back); d > time.Second {
			t.Errorf("tcp=%v: answered %v after the backend came back, want soon after", overTCP, d)
		}
		_ = up.udp.Close()
		_ = up.tcp.Close()
	}
}

func TestFrontServfailWhenBackendStaysAway(t *testing.T) {
	addr := startFront(t, deadAddr(t), 300*time.Millisecond)
	start := time.Now()
	m, err := ask(addr, newQuery(42, "mixed.test.", dnsmessage.TypeA, 0), false)
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != 42 || m.RCode != dnsmessage.RCodeServerFailure || len(m.Questions) != 1 {
		t.Errorf("got %+v, want SERVFAIL for the query", m.Header)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 2*time.Second {
		t.Errorf("SERVFAIL after %v, want after the 300ms patience", d)
	}
}

// dnsmasqBin finds dnsmasq: on PATH, or in /usr/sbin, where Debian's
// dnsmasq-base puts it and which a user's PATH often lacks. Without it the
// test skips on a developer's machine and fails in CI (CI is set there).
func dnsmasqBin(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"dnsmasq", "/usr/sbin/dnsmasq"} {
		if bin, err := exec.LookPath(name); err == nil {
			return bin
		}
	}
	const fix = "install dnsmasq-base (hack/setup-test-host does)"
	if os.Getenv("CI") != "" {
		t.Fatalf("dnsmasq is not installed: %s", fix)
	}
	t.Skipf("dnsmasq is not installed here: %s to run this test", fix)
	return ""
}

// waitUntil polls cond until it holds, or fails the test after
// waitLimit: long, because a machine busy with other work (CI beside an
// e2e run) starves these processes for seconds, and only a failure waits
// that long.
const waitLimit = 30 * time.Second

func waitUntil(t *testing.T, cond func() bool, format string, args ...any) {
	t.Helper()
	for deadline := time.Now().Add(waitLimit); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf(format, args...)
		}
	}
}

// TestFrontKeepsAnsweringThroughDnsmasqRestarts runs the real dnsmasq
// behind the front and restarts it as a reload does, while a client asks
// without pause: not one query may fail.
func TestFrontKeepsAnsweringThroughDnsmasqRestarts(t *testing.T) {
	bin := dnsmasqBin(t)
	backend := portBelowEphemeral(t)
	conf := filepath.Join(t.TempDir(), "dnsmasq.conf")
	// As the launcher writes it, moved behind the front as routerd does.
	launcher := "listen-address=10.89.3.2\nbind-interfaces\nport=53\nno-resolv\nno-hosts\nlog-facility=-\naddress=/#/\nhost-record=a.test,127.0.0.2\n"
	if err := os.WriteFile(conf, behindFront([]byte(launcher), backend), 0o644); err != nil {
		t.Fatal(err)
	}
	argv := []string{bin, "--keep-in-foreground", "--conf-file=" + conf, "--pid-file="}
	logs := &syncBuffer{}
	s := newSupervisor(logs, child{"dnsmasq", argv})
	reloads := make(chan reload)
	s.reloads = reloads
	stop, done := runSupervisor(t, s)
	addr := startFront(t, backend, frontPatience)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := ask(backend.String(), newQuery(1, "a.test.", dnsmessage.TypeA, 0), false); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dnsmasq never answered:\n%s", logs)
		}
	}

	var (
		asked, answered, failed atomic.Int64
		slowest                 atomic.Int64
		wg                      sync.WaitGroup
		stopAsking              = make(chan struct{})
		failures                = make(chan string, 100)
	)
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stopAsking:
					return
				default:
				}
				start := time.Now()
				m, err := ask(addr, newQuery(uint16(w<<12|i&0xfff), "a.test.", dnsmessage.TypeA, 0), i%5 == 0)
				d := time.Since(start)
				for old := slowest.Load(); int64(d) > old && !slowest.CompareAndSwap(old, int64(d)); old = slowest.Load() {
				}
				asked.Add(1)
				if err != nil || m.RCode != dnsmessage.RCodeSuccess || len(m.Answers) != 1 {
					failed.Add(1)
					select {
					case failures <- fmt.Sprintf("%v %v", m, err):
					default:
					}
					continue
				}
				answered.Add(1)
			}
		})
	}
	// Every dnsmasq, the first and each restarted one, answers a good
	// number of queries before the next restart or the end of the test.
	answerMore := func(which string) {
		t.Helper()
		n := answered.Load()
		waitUntil(t, func() bool { return answered.Load() >= n+50 }, "%s dnsmasq did not answer 50 queries within %s:\n%s", which, waitLimit, logs)
	}
	answerMore("the first")
	for i := 1; i <= 5; i++ {
		reloads <- reload{child: "dnsmasq", file: "dnsmasq.conf"}
		waitUntil(t, func() bool { return strings.Count(logs.String(), "reloaded dnsmasq.conf") == i }, "restart %d never finished:\n%s", i, logs)
		answerMore(fmt.Sprintf("restart %d's", i))
	}
	close(stopAsking)
	wg.Wait()
	if n := strings.Count(logs.String(), "reloaded dnsmasq.conf"); n != 5 {
		t.Errorf("dnsmasq restarted %d times, want 5:\n%s", n, logs)
	}
	t.Logf("%d queries during 5 restarts, %d failed, slowest %v", asked.Load(), failed.Load(), time.Duration(slowest.Load()))
	if failed.Load() > 0 {
		t.Errorf("%d of %d queries failed during restarts, e.g. %s", failed.Load(), asked.Load(), <-failures)
	}
	if d := time.Duration(slowest.Load()); d > time.Second {
		t.Errorf("the slowest query took %v, want under a second", d)
	}
	select {
	case code := <-done:
		t.Fatalf("the supervisor stopped (%d):\n%s", code, logs)
	default:
	}
	if code := stop(); code != 0 {
		t.Errorf("run = %d after cancel, want 0", code)
	}
}

// TestFrontReusesSockets: queries in a row share one socket to dnsmasq,
// and a socket whose query failed is not kept.
func TestFrontReusesSockets(t *testing.T) {
	up := startFakeUpstream(t)
	f := &front{backend: up.addr, attempt: 100 * time.Millisecond, patience: time.Second}
	for id := range uint16(5) {
		m := unpack(t, f.answer(context.Background(), newQuery(id+1, "mixed.test.", dnsmessage.TypeA, 0), false))
		if m.ID != id+1 || len(m.Answers) != 7 {
			t.Fatalf("query %d: id %d answers %v", id+1, m.ID, summary(m.Answers))
		}
	}
	if len(f.idle) != 1 {
		t.Errorf("%d idle sockets after queries in a row, want 1", len(f.idle))
	}

	dead := &front{backend: deadAddr(t), attempt: 50 * time.Millisecond, patience: 200 * time.Millisecond}
	m := unpack(t, dead.answer(context.Background(), newQuery(3, "mixed.test.", dnsmessage.TypeA, 0), false))
	if m.RCode != dnsmessage.RCodeServerFailure || len(dead.idle) != 0 {
		t.Errorf("dead backend: rcode %v, %d idle sockets; want SERVFAIL and none kept", m.RCode, len(dead.idle))
	}
}

// portBelowEphemeral is a free loopback port (UDP and TCP) below the
// kernel's ephemeral range, as routerd's own 5354 is: while dnsmasq
// restarts its port is free, and under load one of the test's many client
// sockets took it as its source port (dnsmasq then failed with "Address
// already in use"). Ports below the range are never picked that way.
func portBelowEphemeral(t *testing.T) netip.AddrPort {
	t.Helper()
	start := 20000 + rand.IntN(10000)
	for p := start; p < start+2000; p++ {
		addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(p))
		srv, err := listenDNS(nil, addr.String())
		if err != nil {
			continue
		}
		_ = srv.udp.Close()
		_ = srv.tcp.Close()
		return addr
	}
	t.Fatalf("no free loopback port from %d", start)
	return netip.AddrPort{}
}
