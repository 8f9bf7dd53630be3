package main

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestAnnounceReadyWaitsForEveryListener(t *testing.T) {
	first, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	// The second listener's port, held without a listener until later.
	secondAddr, listenSecond := holdPort(t)

	out := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		announceReady(ctx, []readyTarget{{"tcp", first.Addr().String()}, {"tcp", secondAddr.String()}}, out)
		close(done)
	}()
	// announceReady has connected to the first listener: it is on to the
	// second, which refuses.
	_ = first.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
	c, err := first.Accept()
	if err != nil {
		t.Fatalf("announceReady never tried the first listener: %v", err)
	}
	_ = c.Close()
	if out.String() != "" {
		t.Fatalf("announced %q before every listener was up", out.String())
	}
	late := listenSecond()
	defer late.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("not announced after every listener came up")
	}
	if strings.TrimSpace(out.String()) != readyLine {
		t.Fatalf("output %q, want %q", out.String(), readyLine)
	}
}

// holdPort binds a loopback TCP port without listening on it: connections
// to it are refused. No other socket can take the port meanwhile (it is
// bound without SO_REUSEADDR, and connect never picks a bound port as its
// ephemeral one), so listen, which makes this very socket the listener,
// cannot fail the way listening on a closed port again can.
func holdPort(t *testing.T) (addr netip.AddrPort, listen func() *net.TCPListener) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.CloseOnExec(fd)
	f := os.NewFile(uintptr(fd), "held port")
	t.Cleanup(func() { _ = f.Close() })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	in4 := sa.(*syscall.SockaddrInet4)
	addr = netip.AddrPortFrom(netip.AddrFrom4(in4.Addr), uint16(in4.Port))
	return addr, func() *net.TCPListener {
		t.Helper()
		if err := syscall.Listen(fd, syscall.SOMAXCONN); err != nil {
			t.Fatalf("listen on the held port %s: %v", addr, err)
		}
		ln, err := net.FileListener(f) // a copy of fd, in the netpoller
		if err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
		return ln.(*net.TCPListener)
	}
}

func TestAnnounceReadyGivesUpOnCancel(t *testing.T) {
	addr, _ := holdPort(t) // nothing listens there
	out := &syncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	announceReady(ctx, []readyTarget{{"tcp", addr.String()}}, out)
	if out.String() != "" {
		t.Fatalf("announced %q with nothing listening", out.String())
	}
}

func TestAnnounceReadyOpensTheTLSSocketToTheForwarder(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "tls.sock")
	old := syscall.Umask(0o022)
	ln, err := net.Listen("unix", sock)
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	out := &syncBuffer{}
	announceReady(context.Background(), []readyTarget{{"unix", sock}}, out)
	if strings.TrimSpace(out.String()) != readyLine {
		t.Fatalf("output %q, want %q", out.String(), readyLine)
	}
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o666 {
		t.Errorf("socket mode %v, want 0666: the forwarder connects as another uid", fi.Mode().Perm())
	}
}
