package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncLog collects a forwarder's log lines from several goroutines.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
	// wrote is closed, and replaced, on every write.
	wrote chan struct{}
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.wrote != nil {
		close(l.wrote)
		l.wrote = nil
	}
	return l.b.Write(p)
}

// waitFor returns once the log holds want, or fails the test after
// timeout; it wakes on each write rather than polling.
func (l *syncLog) waitFor(t *testing.T, want string, timeout time.Duration) {
	t.Helper()
	expire := time.After(timeout)
	for {
		l.mu.Lock()
		if strings.Contains(l.b.String(), want) {
			l.mu.Unlock()
			return
		}
		if l.wrote == nil {
			l.wrote = make(chan struct{})
		}
		wrote := l.wrote
		l.mu.Unlock()
		select {
		case <-wrote:
		case <-expire:
			t.Fatalf("no %q in the log within %v:\n%s", want, timeout, l)
		}
	}
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// freeAddr is a loopback address whose port was just free.
func freeAddr(t *testing.T) netip.AddrPort {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	a := addrOf(ln)
	_ = ln.Close()
	return key(a)
}

// writeForwards replaces path by rename, as the launcher does.
func writeForwards(t *testing.T, path string, pairs ...string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(pairs, " ")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func pair(listen, target netip.AddrPort) string { return listen.String() + "=" + target.String() }

// followForwards serves a forwards file as serveWatching does, but
// polling faster and logging to the returned log.
func followForwards(t *testing.T, pairs ...string) (path string, log *syncLog) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "forwards")
	writeForwards(t, path, pairs...)
	f := &forwardsFile{path: path, every: 20 * time.Millisecond}
	fs, _, err := f.read()
	if err != nil {
		t.Fatal(err)
	}
	ls, err := listenAll(fs)
	if err != nil {
		t.Fatal(err)
	}
	log = &syncLog{}
	serveInBackground(t, ls, f, log)
	return path, log
}

// waitDial waits until addr accepts, or fails the test.
func waitDial(t *testing.T, addr netip.AddrPort) *net.TCPConn {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr.String(), time.Second)
		if err == nil {
			t.Cleanup(func() { _ = c.Close() })
			return c.(*net.TCPConn)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not accept within a second: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitRefused waits until addr refuses connections, or fails the test.
func waitRefused(t *testing.T, addr netip.AddrPort) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr.String(), time.Second)
		if err != nil {
			return
		}
		_ = c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("%s still accepts a second after its pair was removed", addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// says reads one line from an upstream that greets with its name.
func says(t *testing.T, c *net.TCPConn, want string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != want+"\n" {
		t.Fatalf("upstream said %q, %v; want %q", line, err, want)
	}
}

func named(name string) func(*net.TCPConn) {
	return func(c *net.TCPConn) {
		_, _ = fmt.Fprintln(c, name)
		_ = c.CloseWrite()
	}
}

// cutWithin is how soon a relay through a removed pair must stop.
const cutWithin = 2 * time.Second

// closedWithin waits for the relay c to be closed by the forwarder: a read
// that ends in EOF or a reset, not in the deadline.
func closedWithin(t *testing.T, c *net.TCPConn, d time.Duration, what string) {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(d))
	for {
		_, err := c.Read(make([]byte, 64))
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s still open %v after its pair was removed", what, d)
		}
		t.Logf("%s closed %v after the change (%v)", what, time.Since(start).Round(time.Millisecond), err)
		return
	}
}

func TestReloadClosesRemovedPairsWithTheirRelays(t *testing.T) {
	echoA := addrOf(startUpstream(t, echo))
	echoB := addrOf(startUpstream(t, echo))
	b := addrOf(startUpstream(t, named("b")))
	l1, l2, l3 := freeAddr(t), freeAddr(t), freeAddr(t)
	path, log := followForwards(t, pair(l1, echoA), pair(l2, echoB))

	// Relays open before the change: two through a pair that goes away,
	// one through a pair that stays.
	gone1, gone2 := dial(t, l1.String()), dial(t, l1.String())
	kept := dial(t, l2.String())
	for _, c := range []*net.TCPConn{gone1, gone2, kept} {
		if err := exchange(c, "before"); err != nil {
			t.Fatal(err)
		}
	}

	writeForwards(t, path, pair(l2, echoB), pair(l3, b))
	closedWithin(t, gone1, cutWithin, "a relay through "+l1.String())
	closedWithin(t, gone2, cutWithin, "a second relay through "+l1.String())
	log.waitFor(t, "reloaded "+path, 5*time.Second)
	says(t, dial(t, l3.String()), "b")
	if c, err := net.DialTimeout("tcp", l1.String(), time.Second); err == nil {
		_ = c.Close()
		t.Errorf("%s still accepts after its pair was removed", l1)
	}
	// The relay through the unchanged pair carries on, both ways.
	if err := exchange(kept, "after"); err != nil {
		t.Fatalf("relay through the unchanged pair %s: %v", l2, err)
	}
	if strings.Contains(log.String(), "stopped listening on "+l2.String()) {
		t.Errorf("the unchanged pair %s was reopened:\n%s", l2, log)
	}

	// A listen address that now points elsewhere is reopened there, and
	// its relays to the old target end.
	writeForwards(t, path, pair(l2, b), pair(l3, b))
	closedWithin(t, kept, cutWithin, "a relay through "+l2.String()+" after it was pointed elsewhere")
	log.waitFor(t, "listening on "+l2.String()+", forwarding to "+b.String(), 5*time.Second)
	says(t, dial(t, l2.String()), "b")

	for _, want := range []string{
		"forwarder: stopped listening on " + l1.String() + "; closed 2 open relays\n",
		"forwarder: stopped listening on " + l2.String() + "; closed 1 open relay\n",
		"listening on " + l3.String(),
	} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

// A TLS pair removed while a client is still sending its ClientHello: the
// client is closed too.
func TestReloadClosesARelayWaitingForItsHello(t *testing.T) {
	up, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = up.Close() }()
	l1, l2 := freeAddr(t), freeAddr(t)
	path, log := followForwards(t, pair(l1, addrOf(up))+"/tls")
	c := dial(t, l1.String())
	hello := browserHello()
	if _, err := c.Write(hello[:100]); err != nil {
		t.Fatal(err)
	}
	writeForwards(t, path, pair(l2, addrOf(up))+"/tls")
	closedWithin(t, c, cutWithin, "a client half-way through its hello on "+l1.String())
	log.waitFor(t, "stopped listening on "+l1.String()+"; closed 1 open relay", 5*time.Second)
	noAccept(t, up)
}

// noAccept fails the test if anything connected to ln: the forwarder
// dials before it passes a byte on, so by the time its client is closed
// a connection it made would be waiting here.
func noAccept(t *testing.T, ln *net.TCPListener) {
	t.Helper()
	_ = ln.SetDeadline(time.Now())
	c, err := ln.AcceptTCP()
	if err == nil {
		_ = c.Close()
		t.Fatal("the upstream accepted a connection")
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("accept: %v, want a timeout", err)
	}
}

// exchange sends one line through an echo relay and reads it back.
func exchange(c *net.TCPConn, msg string) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintln(c, msg); err != nil {
		return err
	}
	buf := make([]byte, len(msg)+1)
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != msg+"\n" {
		return fmt.Errorf("echo %q, want %q", buf, msg+"\n")
	}
	return nil
}

// waitLogged waits until the log says s, or fails the test.
func waitLogged(t *testing.T, log *syncLog, s string) {
	t.Helper()
	for deadline := time.Now().Add(time.Second); !strings.Contains(log.String(), s); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("log lacks %q after a second:\n%s", s, log)
		}
	}
}

// busyAddr is a listen address held by a listener of the test's own: the
// forwarder tries it again at each look at its file, so once the test
// frees it, the forwarder listening there shows that a look happened.
func busyAddr(t *testing.T) (netip.AddrPort, *net.TCPListener) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return key(addrOf(ln)), ln
}

func TestReloadBadFileKeepsListeners(t *testing.T) {
	a := addrOf(startUpstream(t, named("a")))
	l1, l2 := freeAddr(t), freeAddr(t)
	probe, probeLn := busyAddr(t)
	path, log := followForwards(t, pair(l1, a))
	says(t, waitDial(t, l1), "a")
	writeForwards(t, path, pair(l1, a), pair(probe, a))
	waitLogged(t, log, "cannot listen on "+probe.String())
	writeForwards(t, path, pair(l1, a), "10.0.0.1:80=10.89.0.2:80", pair(l2, a))
	waitLogged(t, log, "keeping the current listeners")
	// A later look at the unchanged bad file.
	_ = probeLn.Close()
	says(t, waitDial(t, probe), "a")
	says(t, waitDial(t, l1), "a")
	if c, err := net.DialTimeout("tcp", l2.String(), time.Second); err == nil {
		_ = c.Close()
		t.Errorf("%s from the bad file was opened", l2)
	}
	got := log.String()
	if n := strings.Count(got, "keeping the current listeners"); n != 1 {
		t.Errorf("the bad file was reported %d times, want once:\n%s", n, got)
	}
	for _, want := range []string{path, `bad FORWARDS pair "10.0.0.1:80=10.89.0.2:80"`} {
		if !strings.Contains(got, want) {
			t.Errorf("log lacks %q:\n%s", want, got)
		}
	}
}

func TestReloadRetriesABusyAddress(t *testing.T) {
	a := addrOf(startUpstream(t, named("a")))
	busy, busyLn := busyAddr(t)
	probe, probeLn := busyAddr(t)
	l1 := freeAddr(t)
	path, log := followForwards(t, pair(l1, a))
	writeForwards(t, path, pair(l1, a), pair(busy, a), pair(probe, a))
	waitLogged(t, log, "cannot listen on "+probe.String())
	// A later look tries busy again, then probe, now free.
	_ = probeLn.Close()
	says(t, waitDial(t, probe), "a")
	_ = busyLn.Close()
	says(t, waitDial(t, busy), "a")
	if n := strings.Count(log.String(), "cannot listen on "+busy.String()); n != 1 {
		t.Errorf("the busy address was reported %d times, want once:\n%s", n, log)
	}
}

func TestForwardsFromEnv(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("127.0.0.1:443=10.89.0.2:443\n127.0.0.2:22=10.89.0.2:10001\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("127.0.0.1:443\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	fs, file, err := forwardsFromEnv(env("FORWARDS", "127.0.0.1:443=10.89.0.2:443"))
	if err != nil || file != nil || len(fs) != 1 {
		t.Errorf("FORWARDS alone: %v %v %v", fs, file, err)
	}
	fs, file, err = forwardsFromEnv(env("FORWARDS_FILE", good))
	if err != nil || file == nil || len(fs) != 2 || !reflect.DeepEqual(fs[1], forward{listen: ap("127.0.0.2:22"), target: ap("10.89.0.2:10001")}) {
		t.Errorf("FORWARDS_FILE alone: %v %v %v", fs, file, err)
	}
	for _, tc := range []struct {
		env  func(string) string
		want []string
	}{
		{env("FORWARDS_FILE", good, "FORWARDS", "127.0.0.1:443=10.89.0.2:443"), []string{"both FORWARDS and FORWARDS_FILE are set"}},
		{env("FORWARDS_FILE", filepath.Join(dir, "missing")), []string{"cannot read FORWARDS_FILE", "missing"}},
		{env("FORWARDS_FILE", bad), []string{bad, `bad FORWARDS pair "127.0.0.1:443"`}},
	} {
		_, _, err := forwardsFromEnv(tc.env)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("error %v, want one containing %q", err, w)
			}
		}
	}
}

// TestMainFollowsForwardsFile runs the real main with FORWARDS_FILE.
func TestMainFollowsForwardsFile(t *testing.T) {
	a := addrOf(startUpstream(t, named("a")))
	b := addrOf(startUpstream(t, named("b")))
	l1, l2 := freeAddr(t), freeAddr(t)
	path := filepath.Join(t.TempDir(), "forwards")
	writeForwards(t, path, pair(l1, a))

	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := mainCmd("")
	cmd.Env = append(cmd.Env, "FORWARDS_FILE="+path)
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = pw.Close()
	defer func() { _ = pr.Close() }()
	log := &syncLog{}
	go func() { _, _ = io.Copy(log, pr) }()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(log.String(), readyLine) {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("no ready line:\n%s", log)
		}
		time.Sleep(10 * time.Millisecond)
	}
	says(t, waitDial(t, l1), "a")

	start := time.Now()
	writeForwards(t, path, pair(l2, b))
	says(t, waitDial(t, l2), "b")
	t.Logf("new listener up %v after the rename", time.Since(start))
	waitRefused(t, l1)

	_ = cmd.Process.Signal(os.Interrupt)
	if err := cmd.Wait(); err != nil {
		t.Errorf("after SIGINT: %v, want exit 0", err)
	}
	if !strings.Contains(log.String(), "forwarder: reloaded "+path) {
		t.Errorf("log lacks the reload:\n%s", log)
	}
}
