package main

import (
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// fdSize is the size of this process's descriptor table, as the kernel
// reports it.
func fdSize(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "FDSize:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no FDSize in /proc/self/status")
	return 0
}

func TestReserveFDsGrowsTheTableOnceForALongList(t *testing.T) {
	before := fdSize(t)
	reserveFDs(10)
	if got := fdSize(t); got != before {
		t.Errorf("a short list grew the table from %d to %d: it should pay no growth", before, got)
	}
	reserveFDs(400)
	if got := fdSize(t); got < 2*400+64 {
		t.Errorf("after reserving for 400 listeners the table holds %d descriptors, want at least %d", got, 2*400+64)
	}
	// The reserved descriptor was given back.
	if err := syscall.FcntlFlock(uintptr(2*400+63), syscall.F_GETLK, &syscall.Flock_t{}); err != syscall.EBADF {
		t.Errorf("descriptor %d still open after the reservation (fcntl: %v)", 2*400+63, err)
	}
}

func TestListenersArePlainTCP(t *testing.T) {
	ln, err := listen(forward{listen: netip.MustParseAddrPort("127.0.0.1:0")})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	raw, err := ln.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var proto int
	var serr error
	if err := raw.Control(func(fd uintptr) {
		proto, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_PROTOCOL)
	}); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	if proto != syscall.IPPROTO_TCP {
		t.Errorf("listener's protocol is %d, want TCP (%d): MPTCP left on", proto, syscall.IPPROTO_TCP)
	}
}
