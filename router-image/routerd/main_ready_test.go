package main

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestAnnounceReadyWaitsForEveryListener(t *testing.T) {
	first, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	// Reserve a port for the second listener, then free it until later.
	second, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	secondAddr := second.Addr().String()
	second.Close()

	out := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		announceReady(ctx, []netip.AddrPort{netip.MustParseAddrPort(first.Addr().String()), netip.MustParseAddrPort(secondAddr)}, out)
		close(done)
	}()
	time.Sleep(200 * time.Millisecond)
	if out.String() != "" {
		t.Fatalf("announced %q before every listener was up", out.String())
	}
	late, err := net.Listen("tcp", secondAddr)
	if err != nil {
		t.Fatal(err)
	}
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

func TestAnnounceReadyGivesUpOnCancel(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	out := &syncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	announceReady(ctx, []netip.AddrPort{netip.MustParseAddrPort(addr)}, out)
	if out.String() != "" {
		t.Fatalf("announced %q with nothing listening", out.String())
	}
}
