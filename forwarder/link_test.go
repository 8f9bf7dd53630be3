package main

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The agent's forwarder sends the link key first on its TCP pairs; a front
// lets that through to the server behind it and refuses, with a line that
// says why, every client without the key: none of their bytes reach the
// server.
func TestTheLinkKeyLetsTheAgentsForwarderAloneThrough(t *testing.T) {
	key := strings.Repeat("5a", 32)
	preamble, err := parseLinkKey(key)
	if err != nil {
		t.Fatal(err)
	}
	refusals.Store(0) // each of this test's refusals is logged
	var reached atomic.Int32
	up := addrOf(startUpstream(t, func(c *net.TCPConn) { reached.Add(1); echo(c) }))
	frontAddrs, log := startRelays(t, forward{listen: ap("127.0.0.1:0"), target: up, wantLink: preamble})
	agentAddrs, _ := startRelays(t, linked([]forward{{listen: ap("127.0.0.1:0"), target: ap(frontAddrs[0])}}, preamble)...)

	echoed(t, agentAddrs[0], []byte("through the agent's forwarder"))
	if reached.Load() != 1 {
		t.Fatalf("the server behind the front took %d connections, want 1", reached.Load())
	}

	wrong := "agent-sandbox-link " + strings.Repeat("5b", 32) + "\n"
	for _, tc := range []struct{ name, send string }{
		{"no key", "GET / HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n"},
		{"another key", wrong + "GET / HTTP/1.1\r\n\r\n"},
		{"the prefix alone, then nothing", "agent-sandbox-link "},
		{"a TLS hello", string(browserHello())},
	} {
		c := dial(t, frontAddrs[0])
		_ = c.SetDeadline(time.Now().Add(linkTimeout + 5*time.Second))
		start := time.Now()
		if _, err := io.WriteString(c, tc.send); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		_ = c.CloseWrite()
		got, _ := io.ReadAll(c)
		if string(got) != linkRefusal {
			t.Errorf("%s: the client read %q, want the refusal %q", tc.name, got, linkRefusal)
		}
		if d := time.Since(start); d > linkTimeout/2 {
			t.Errorf("%s: refused after %v: a client that cannot carry the key is refused without waiting", tc.name, d)
		}
	}
	log.waitFor(t, "no link key", 5*time.Second)
	if n := strings.Count(log.String(), "no link key (refusal "); n != 4 {
		t.Errorf("the front logged %d refusals, want 4:\n%s", n, log.String())
	}
	if reached.Load() != 1 {
		t.Errorf("the server behind the front took %d connections, want only the agent forwarder's", reached.Load())
	}
}

// LINK_KEY reaches every TCP pair of an agent's forwarder, from FORWARDS
// and from FORWARDS_FILE, but not the local router's unix socket or a
// published port.
func TestLinkKeyOnTheAgentsTCPPairs(t *testing.T) {
	key := strings.Repeat("0a", 32)
	env := map[string]string{"LINK_KEY": key,
		"FORWARDS": "127.0.0.1:443=10.96.0.9:443/tls 127.0.0.2:22=10.96.0.9:10001 127.0.0.1:444=unix:/run/tls.sock/tls 10.89.0.3:61000=127.0.0.1:8000/publish=app.localhost:8000"}
	fs, _, err := forwardsFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		want := f.socket == "" && !f.published
		if got := string(f.sendLink) == linkPrefix+key+"\n"; got != want || f.wantLink != nil {
			t.Errorf("pair %s: sends the key %v, want %v (wantLink %q)", f.listen, got, want, f.wantLink)
		}
	}
	dir := t.TempDir()
	file := writeForwardsFile(t, dir, "127.0.0.2:22=10.96.0.9:10001\n")
	env = map[string]string{"LINK_KEY": key, "FORWARDS_FILE": file}
	fs, ff, err := forwardsFromEnv(func(k string) string { return env[k] })
	if err != nil || ff == nil || len(fs) != 1 || fs[0].sendLink == nil {
		t.Fatalf("FORWARDS_FILE with LINK_KEY: %+v %v", fs, err)
	}
	writeForwardsFile(t, dir, "127.0.0.2:22=10.96.0.9:10001 127.0.0.3:22=10.96.0.9:10002\n")
	time.Sleep(10 * time.Millisecond)
	fs, changed, err := ff.read()
	if err != nil || !changed || len(fs) != 2 || fs[1].sendLink == nil {
		t.Errorf("the file's next read: %+v %v %v", fs, changed, err)
	}
}

func writeForwardsFile(t *testing.T, dir, body string) string {
	t.Helper()
	path := filepath.Join(dir, "forwards")
	if err := os.WriteFile(path+".tmp", []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
	return path
}

// A front holds at most maxPendingLinks connections waiting for their
// preamble: past that, a new one is closed at once, and the key's holder
// gets through as soon as the waiting ones are gone.
func TestTheFrontBoundsConnectionsWaitingForTheKey(t *testing.T) {
	preamble, err := parseLinkKey(strings.Repeat("5c", 32))
	if err != nil {
		t.Fatal(err)
	}
	up := addrOf(startUpstream(t, echo))
	frontAddrs, log := startRelays(t, forward{listen: ap("127.0.0.1:0"), target: up, wantLink: preamble})
	var silent []*net.TCPConn
	for range maxPendingLinks {
		silent = append(silent, dial(t, frontAddrs[0]))
	}
	log.waitFor(t, "forwarder: ready", time.Second)
	// The one past the bound: closed without waiting for anything.
	deadline := time.Now().Add(2 * time.Second)
	for !strings.Contains(log.String(), "already wait for their link key") {
		c := dial(t, frontAddrs[0])
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		if n, _ := c.Read(make([]byte, 1)); n != 0 {
			t.Fatal("a connection past the bound was answered")
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection was refused past %d waiting:\n%s", maxPendingLinks, log.String())
		}
	}
	for _, c := range silent {
		_ = c.Close()
	}
	agent := linked([]forward{{listen: ap("127.0.0.1:0"), target: ap(frontAddrs[0])}}, preamble)
	agentAddrs, _ := startRelays(t, agent...)
	for start := time.Now(); ; {
		c := dial(t, agentAddrs[0])
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		go func() { _, _ = c.Write([]byte("ping")); _ = c.CloseWrite() }()
		if got, _ := io.ReadAll(c); string(got) == "ping" {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("the key's holder did not get through once the waiting connections closed")
		}
	}
}
