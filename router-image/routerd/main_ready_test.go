package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/testnet"
)

func TestAnnounceReadyWaitsForEveryListener(t *testing.T) {
	first, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	// The second listener's port, held without a listener until later.
	secondAddr, listenSecond := testnet.HoldPort(t)

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

func TestAnnounceReadyGivesUpOnCancel(t *testing.T) {
	addr, _ := testnet.HoldPort(t) // nothing listens there
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
