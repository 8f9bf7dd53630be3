package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/testnet"
)

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func TestParseForwards(t *testing.T) {
	good := []struct {
		in   string
		want []forward
	}{
		{"", nil},
		{" \t\n ", nil},
		{"127.0.0.1:443=10.89.0.2:443", []forward{{listen: ap("127.0.0.1:443"), target: ap("10.89.0.2:443")}}},
		{"127.0.0.1:443=10.89.0.2:443 127.0.0.2:22=10.89.0.2:10001\n\t127.0.0.2:443=10.89.0.2:443", []forward{
			{listen: ap("127.0.0.1:443"), target: ap("10.89.0.2:443")},
			{listen: ap("127.0.0.2:22"), target: ap("10.89.0.2:10001")},
			{listen: ap("127.0.0.2:443"), target: ap("10.89.0.2:443")},
		}},
		{"[::1]:8080=[fd00::2]:443", []forward{{listen: ap("[::1]:8080"), target: ap("[fd00::2]:443")}}},
		{"[::ffff:127.0.0.1]:443=10.89.0.2:443", []forward{{listen: ap("[::ffff:127.0.0.1]:443"), target: ap("10.89.0.2:443")}}},
		{"127.255.255.254:65535=10.0.0.1:1", []forward{{listen: ap("127.255.255.254:65535"), target: ap("10.0.0.1:1")}}},
		// A TLS pair; the mark is optional, so a file from before it
		// reads as it did.
		{"127.0.0.1:443=10.89.0.2:443/tls 127.0.0.2:22=10.89.0.2:10001 [::1]:443=[fd00::2]:443/tls", []forward{
			{listen: ap("127.0.0.1:443"), target: ap("10.89.0.2:443"), tls: true},
			{listen: ap("127.0.0.2:22"), target: ap("10.89.0.2:10001")},
			{listen: ap("[::1]:443"), target: ap("[fd00::2]:443"), tls: true},
		}},
		// The router's TLS server on a unix socket.
		{"127.0.0.1:443=unix:/run/agent-sandbox-tls/tls.sock/tls 127.0.0.2:443=unix:/run/x.sock", []forward{
			{listen: ap("127.0.0.1:443"), socket: "/run/agent-sandbox-tls/tls.sock", tls: true},
			{listen: ap("127.0.0.2:443"), socket: "/run/x.sock"},
		}},
		// A published port: the pod's own address, to loopback.
		{"10.89.7.3:61000=127.0.0.1:8000/publish=proj.localhost:18000 127.0.0.1:443=10.89.0.2:443", []forward{
			{listen: ap("10.89.7.3:61000"), target: ap("127.0.0.1:8000"), published: true, publishedAs: "proj.localhost:18000"},
			{listen: ap("127.0.0.1:443"), target: ap("10.89.0.2:443")},
		}},
		// The same target behind two listen addresses is fine.
		{"127.0.0.1:80=10.89.0.2:443 127.0.0.1:443=10.89.0.2:443", []forward{
			{listen: ap("127.0.0.1:80"), target: ap("10.89.0.2:443")},
			{listen: ap("127.0.0.1:443"), target: ap("10.89.0.2:443")},
		}},
	}
	for _, tc := range good {
		got, err := parseForwards(tc.in)
		if err != nil {
			t.Errorf("parseForwards(%q): %v", tc.in, err)
			continue
		}
		if len(got) != len(tc.want) {
			t.Errorf("parseForwards(%q) = %v, want %v", tc.in, got, tc.want)
			continue
		}
		for i := range got {
			if !reflect.DeepEqual(got[i], tc.want[i]) {
				t.Errorf("parseForwards(%q)[%d] = %v, want %v", tc.in, i, got[i], tc.want[i])
			}
		}
	}

	bad := []struct {
		in   string
		want []string // substrings of the error
	}{
		{"127.0.0.1:443", []string{`"127.0.0.1:443"`, "missing '='"}},
		{"127.0.0.1:443=", []string{"bad target address"}},
		{"=10.89.0.2:443", []string{"bad listen address"}},
		{"127.0.0.1=10.89.0.2:443", []string{"bad listen address", "IP:PORT"}},
		{"localhost:443=10.89.0.2:443", []string{"bad listen IP", `"localhost"`}},
		{"127.0.0.1:443=router.test:443", []string{"bad target IP", `"router.test"`}},
		{"127.0.0.256:443=10.89.0.2:443", []string{"bad listen IP"}},
		{"[fe80::1%eth0]:443=10.89.0.2:443", []string{"bad listen IP"}},
		{"127.0.0.1:0=10.89.0.2:443", []string{"bad listen port", `"0"`}},
		{"127.0.0.1:65536=10.89.0.2:443", []string{"bad listen port"}},
		{"127.0.0.1:https=10.89.0.2:443", []string{"bad listen port"}},
		{"127.0.0.1:-1=10.89.0.2:443", []string{"bad listen port"}},
		{"127.0.0.1:443=10.89.0.2:0", []string{"bad target port"}},
		{"127.0.0.1:443=10.89.0.2:", []string{"bad target port"}},
		{"127.0.0.1:443=10.89.0.2:+443", []string{"bad target port"}},
		{"127.0.0.1:443=10.89.0.2:443=1", []string{"bad target port"}},
		{"10.89.0.5:443=10.89.0.2:443", []string{"10.89.0.5", "not loopback"}},
		{"0.0.0.0:443=10.89.0.2:443", []string{"not loopback"}},
		{"[::]:443=10.89.0.2:443", []string{"not loopback"}},
		{"127.0.0.1:443=10.89.0.2:443 127.0.0.2:22=10.89.0.2:10001 127.0.0.1:443=10.89.0.3:443",
			[]string{`"127.0.0.1:443=10.89.0.3:443"`, "duplicate listen address 127.0.0.1:443"}},
		{"127.0.0.1:443=10.89.0.2:443 garbage", []string{`"garbage"`}},
		{"127.0.0.1:443=10.89.0.2:443/ssl", []string{`unknown option "/ssl"`, "/tls"}},
		{"127.0.0.1:443=10.89.0.2:443/tls/tls", []string{`unknown option "/tls"`}},
		{"127.0.0.1:443=10.89.0.2:443/", []string{`unknown option "/"`}},
		{"127.0.0.1:443/tls=10.89.0.2:443", []string{"bad listen"}},
		{"127.0.0.1:443=/tls", []string{"bad target address"}},
		{"127.0.0.1:443=unix:run/tls.sock", []string{"bad target socket", "unix:/ABSOLUTE/PATH"}},
		{"127.0.0.1:443=unix:/run/../tls.sock/tls", []string{"bad target socket"}},
		{"10.0.0.1:443=unix:/run/tls.sock", []string{"not loopback"}},
		// A published port never relays out of the pod, and listens only
		// on the pod's address.
		{"10.89.7.3:61000=10.89.7.2:53/publish=p.localhost:1", []string{"published target 10.89.7.2:53 is not loopback"}},
		{"127.0.0.1:61000=127.0.0.1:8000/publish=p.localhost:1", []string{"not the pod's own address"}},
		{"0.0.0.0:61000=127.0.0.1:8000/publish=p.localhost:1", []string{"not the pod's own address"}},
		{"10.89.7.3:61000=unix:/run/tls.sock/publish=p.localhost:1", []string{"bad target"}},
		{"10.89.7.3:61000=127.0.0.1:8000/tls/publish=p.localhost:1", []string{"bad target"}},
		{"10.89.7.3:61000=127.0.0.1:8000/publish=evil.test:1", []string{"not NAME.localhost:PORT"}},
		{"10.89.7.3:61000=127.0.0.1:8000/publish=p.localhost", []string{"not NAME.localhost:PORT"}},
		{"10.89.7.3:61000=127.0.0.1:8000/publish", []string{"unknown option"}},
	}
	for _, tc := range bad {
		got, err := parseForwards(tc.in)
		if err == nil {
			t.Errorf("parseForwards(%q) = %v, want an error", tc.in, got)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("parseForwards(%q) error %q does not mention %q", tc.in, err, w)
			}
		}
	}
}

// startUpstream runs handle for each connection to a fresh loopback listener.
func startUpstream(t *testing.T, handle func(*net.TCPConn)) *net.TCPListener {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	acceptAll(t, ln, handle)
	return ln
}

func acceptAll(t *testing.T, ln *net.TCPListener, handle func(*net.TCPConn)) {
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer func() { _ = c.Close() }()
				handle(c)
			})
		}
	})
}

func echo(c *net.TCPConn) {
	_, _ = io.Copy(c, c)
	_ = c.CloseWrite()
}

// startForwarder relays an ephemeral loopback port to each target and
// returns the listen addresses.
func startForwarder(t *testing.T, targets ...netip.AddrPort) []string {
	t.Helper()
	var fs []forward
	for _, tg := range targets {
		fs = append(fs, forward{listen: ap("127.0.0.1:0"), target: tg})
	}
	ls, err := listenAll(fs)
	if err != nil {
		t.Fatal(err)
	}
	serveInBackground(t, ls, nil, io.Discard)
	var addrs []string
	for _, l := range ls {
		addrs = append(addrs, l.ln.Addr().String())
	}
	return addrs
}

// serveInBackground serves ls as serveWatching does, following file when
// there is one, until the test ends.
func serveInBackground(tb testing.TB, ls []listener, file *forwardsFile, log io.Writer) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		serveListeners(ctx, ls, file, log)
		close(done)
	}()
	tb.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			tb.Error("serveListeners did not return after cancel")
		}
	})
}

func addrOf(ln *net.TCPListener) netip.AddrPort {
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

func dial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c.(*net.TCPConn)
}

// roundTrip sends size pseudo-random bytes through an echo and checks that
// the same bytes come back.
func roundTrip(c *net.TCPConn, size int64, seed uint64) error {
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	src := io.LimitReader(rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}), size)
	sent := sha256.New()
	errc := make(chan error, 1)
	go func() {
		_, err := io.Copy(c, io.TeeReader(src, sent))
		if err == nil {
			err = c.CloseWrite()
		}
		errc <- err
	}()
	got := sha256.New()
	n, err := io.Copy(got, c)
	if werr := <-errc; werr != nil {
		return werr
	}
	if err != nil {
		return err
	}
	if n != size {
		return errors.New("short echo")
	}
	if !bytes.Equal(sent.Sum(nil), got.Sum(nil)) {
		return errors.New("echoed bytes differ from sent bytes")
	}
	return nil
}

func TestLargeStream(t *testing.T) {
	up := startUpstream(t, echo)
	addrs := startForwarder(t, addrOf(up))
	if err := roundTrip(dial(t, addrs[0]), 64<<20, 1); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentStreams(t *testing.T) {
	up := startUpstream(t, echo)
	addrs := startForwarder(t, addrOf(up))
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := range 50 {
		c := dial(t, addrs[0])
		wg.Go(func() {
			// Sizes differ so that streams end at different times.
			errs <- roundTrip(c, int64(256<<10+i*7919), uint64(i))
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func TestSeveralListeners(t *testing.T) {
	a := startUpstream(t, func(c *net.TCPConn) { _, _ = c.Write([]byte("a")) })
	b := startUpstream(t, func(c *net.TCPConn) { _, _ = c.Write([]byte("b")) })
	addrs := startForwarder(t, addrOf(a), addrOf(b))
	for i, want := range []string{"a", "b"} {
		c := dial(t, addrs[i])
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(c)
		if err != nil || string(got) != want {
			t.Errorf("listener %d: got %q, %v; want %q", i, got, err, want)
		}
	}
}

func TestHalfClose(t *testing.T) {
	up := startUpstream(t, func(c *net.TCPConn) {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		req, err := io.ReadAll(c) // returns only at the client's EOF
		if err != nil {
			return
		}
		// Upstream still writes after it has seen EOF.
		_, _ = c.Write([]byte("reply to " + string(req)))
	})
	addrs := startForwarder(t, addrOf(up))
	c := dial(t, addrs[0])
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "reply to request" {
		t.Fatalf("got %q, want %q", got, "reply to request")
	}
}

// TestUpstreamHalfClose checks the other direction: the upstream finishes
// first and the client can keep sending.
func TestUpstreamHalfClose(t *testing.T) {
	up := startUpstream(t, func(c *net.TCPConn) {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = c.Write([]byte("banner"))
		_ = c.CloseWrite()
		req, _ := io.ReadAll(c)
		if string(req) != "late request" {
			_ = c.SetLinger(0)
		}
	})
	addrs := startForwarder(t, addrOf(up))
	c := dial(t, addrs[0])
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "banner" {
		t.Fatalf("got %q, %v; want banner then EOF", got, err)
	}
	if _, err := c.Write([]byte("late request")); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	// Once both directions are done the forwarder closes; a reset here
	// would mean the upstream did not get the late request.
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("final read: %v, want EOF", err)
	}
}

func TestDeadUpstream(t *testing.T) {
	// A port with nobody listening, held so that the upstream comes back
	// on it later.
	dead, comeBack := testnet.HoldPort(t)
	addrs := startForwarder(t, dead)

	for range 3 {
		start := time.Now()
		if err := expectClosed(addrs[0]); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("close took %v", d)
		}
	}

	// The forwarder keeps serving: once the upstream is back, relays work.
	acceptAll(t, comeBack(), echo)
	if err := roundTrip(dial(t, addrs[0]), 1<<20, 7); err != nil {
		t.Fatal(err)
	}
}

// expectClosed connects to addr and wants the connection closed or reset
// without any data. On loopback the reset can even beat connect's return.
func expectClosed(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		if errors.Is(err, syscall.ECONNRESET) {
			return nil
		}
		return err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = c.Write([]byte("hello"))
	n, err := c.Read(make([]byte, 10))
	if n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("read from relay to a dead upstream: %d, %v; want a close", n, err)
	}
	return nil
}

func TestUpstreamReset(t *testing.T) {
	up := startUpstream(t, func(c *net.TCPConn) {
		_, _ = c.Read(make([]byte, 1))
		_ = c.SetLinger(0) // close sends RST
	})
	addrs := startForwarder(t, addrOf(up))
	c := dial(t, addrs[0])
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = c.Write([]byte("x"))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after upstream reset: %v, want a close", err)
	}
}

func TestShutdownClosesRelays(t *testing.T) {
	up := startUpstream(t, echo)
	ls, err := listenAll([]forward{{listen: ap("127.0.0.1:0"), target: addrOf(up)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		serveListeners(ctx, ls, nil, io.Discard)
		close(done)
	}()
	addr := ls[0].ln.Addr().String()
	c := dial(t, addr)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("serveListeners did not return with a relay open")
	}
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("relay still open after shutdown: %v", err)
	}
	if c2, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		_ = c2.Close()
		t.Fatal("listener still accepting after shutdown")
	}
}

func TestEmptyForwardsBlocksUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveWatching(ctx, nil, nil) }()
	select {
	case err := <-done:
		t.Fatalf("serveWatching returned before cancel: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("serveWatching did not return after cancel")
	}
}

func TestListenFailureClosesOthers(t *testing.T) {
	busy, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = busy.Close() }()
	free, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	freeAddr := addrOf(free)
	_ = free.Close()

	target := ap("127.0.0.1:9")
	_, err = listenAll([]forward{{listen: freeAddr, target: target}, {listen: addrOf(busy), target: target}})
	if err == nil || !strings.Contains(err.Error(), addrOf(busy).String()) {
		t.Fatalf("listenAll error = %v, want one naming %s", err, addrOf(busy))
	}
	// The first listener must have been released.
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(freeAddr))
	if err != nil {
		t.Fatalf("first listen address still held: %v", err)
	}
	_ = ln.Close()
}

// The tests below run the real binary's main as a child process.

func TestMain(m *testing.M) {
	if os.Getenv("FORWARDER_TEST_MAIN") == "1" {
		main()
	}
	os.Exit(m.Run())
}

func mainCmd(forwards string) *exec.Cmd {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "FORWARDER_TEST_MAIN=1", "FORWARDS="+forwards)
	return cmd
}

func TestMainBadConfig(t *testing.T) {
	var stderr bytes.Buffer
	cmd := mainCmd("127.0.0.1:443=10.89.0.2:443 10.0.0.1:80=10.89.0.2:80")
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("exit: %v, want status 2", err)
	}
	if !strings.Contains(stderr.String(), `forwarder: bad FORWARDS pair "10.0.0.1:80=10.89.0.2:80"`) {
		t.Fatalf("stderr %q does not name the bad pair", stderr.String())
	}
}

func TestMainSignal(t *testing.T) {
	up := startUpstream(t, echo)
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	_ = ln.Close()

	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd := mainCmd(listen + "=" + addrOf(up).String())
		cmd.Stderr = pw
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		_ = pw.Close()
		_ = pr.SetReadDeadline(time.Now().Add(10 * time.Second))
		lines := bufio.NewReader(pr)
		first, _ := lines.ReadString('\n')
		second, _ := lines.ReadString('\n')
		want := "forwarder: listening on " + listen + ", forwarding to " + addrOf(up).String() + "\n"
		if first != readyLine+"\n" || second != want {
			t.Errorf("log %q %q, want the ready line then %q", first, second, want)
		}
		if err := roundTrip(dial(t, listen), 1<<16, 3); err != nil {
			t.Error(err)
		}
		_ = cmd.Process.Signal(sig)
		if err := cmd.Wait(); err != nil {
			t.Errorf("after %v: %v, want exit 0", sig, err)
		}
		_ = pr.Close()
	}
}

func TestPublishedRelaysToTheServerInsideOnLoopbackOrItsOwnAddress(t *testing.T) {
	srv := startUpstream(t, func(c *net.TCPConn) {
		head := make([]byte, 200)
		n, _ := c.Read(head)
		_, _ = c.Write([]byte("inside:" + strings.Split(string(head[:n]), "\r\n")[0]))
	})
	port := addrOf(srv).Port()
	for name, target := range map[string]netip.AddrPort{
		"loopback": netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port),
		// Nothing on 127.0.0.2: the server listens on the listener's own
		// address (here 127.0.0.1, as the pod's address in a session).
		"own address": netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), port),
	} {
		ls, err := listenAll([]forward{{listen: ap("127.0.0.1:0"), target: target, published: true, publishedAs: "proj.localhost:18000"}})
		if err != nil {
			t.Fatal(err)
		}
		serveInBackground(t, ls, nil, io.Discard)
		c := dial(t, ls[0].ln.Addr().String())
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = c.Write([]byte("GET /x HTTP/1.1\r\nHost: proj.localhost:18000\r\n\r\n"))
		if got, err := io.ReadAll(c); err != nil || string(got) != "inside:GET /x HTTP/1.1" {
			t.Errorf("%s: got %q, %v", name, got, err)
		}
	}
}
