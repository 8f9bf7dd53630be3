// Package testnet holds network helpers for the tests of several packages.
package testnet

import (
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
)

// HoldPort binds a loopback TCP port without listening on it: connections
// to it are refused, as to a dead upstream. No other socket can take the
// port meanwhile (it is bound without SO_REUSEADDR, and connect never picks
// a bound port as its ephemeral one), so listen, which makes this very
// socket the listener, cannot fail the way listening on a closed port
// again can.
func HoldPort(t *testing.T) (addr netip.AddrPort, listen func() *net.TCPListener) {
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
