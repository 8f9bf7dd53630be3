package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func (v helloVerdict) String() string {
	return [...]string{"incomplete", "plain", "ech", "other"}[v]
}

// echExt is an encrypted_client_hello extension as a client sends it in
// its outer hello: type outer, a cipher suite, config id, enc, payload.
func echExt(payload string) ext {
	d := []byte{0, 0, 1, 0, 1, 7, 0, 32}
	d = append(d, make([]byte, 32)...)
	d = binary.BigEndian.AppendUint16(d, uint16(len(payload)))
	return ext{extECH, append(d, payload...)}
}

func TestJudgeHello(t *testing.T) {
	plain := helloMessage(sniExt("allowed.test"), alpnExt("h2"))
	withECH := helloMessage(sniExt("allowed.test"), echExt("inner"), alpnExt("h2"))
	echLast := helloMessage(sniExt("allowed.test"), alpnExt("h2"), echExt("inner"))
	// 0xfe0d where an extension's data is, not its type, is no ECH.
	echInData := helloMessage(sniExt("allowed.test"), ext{16, []byte{0xfe, 0x0d, 0xfe, 0x0d}})
	bigECH := helloMessage(sniExt("allowed.test"), ext{21, make([]byte, 30000)}, echExt("inner"))
	tooBig := []byte{1, 0x01, 0x00, 0x01} // declares 64 KiB + 1

	// malformed returns msg with its body edited, in one record.
	malformed := func(msg []byte, edit func(body []byte) []byte) []byte {
		body := edit(bytes.Clone(msg[4:]))
		return records(append([]byte{1, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}, body...), 1<<14)
	}
	noExtensions := malformed(helloMessage(), func(b []byte) []byte { return b[:len(b)-2] })[5:]
	oneExt := helloMessage(ext{16, []byte("abc")})
	// Offsets into the body of helloMessage's hellos.
	const sidLen, suitesLen, extsLen = 34, 34 + 1 + 32, 34 + 1 + 32 + 8 + 2

	for _, tc := range []struct {
		name string
		in   []byte
		want helloVerdict
	}{
		{"no ECH", records(plain, 1<<14), helloPlain},
		{"ECH", records(withECH, 1<<14), helloECH},
		{"ECH as the last extension", records(echLast, 1<<14), helloECH},
		{"a browser's hello", browserHello(), helloPlain},
		{"a browser's hello with ECH", browserHello(echExt("inner")), helloECH},
		{"0xfe0d in an extension's data", records(echInData, 1<<14), helloPlain},
		{"no extensions at all", records(noExtensions, 1<<14), helloPlain},
		{"split across two records", records(withECH, 40), helloECH},
		{"split across two records, no ECH", records(plain, len(plain)-3), helloPlain},
		{"split in the handshake header", records(withECH, 2), helloECH},
		{"split, ECH in the second record only", records(echLast, len(echLast)-10), helloECH},
		{"30 kB over two full records, ECH last", records(bigECH, 1<<14), helloECH},
		{"an empty record first", append([]byte{0x16, 3, 1, 0, 0}, records(withECH, 1<<14)...), helloECH},
		{"nothing yet", nil, helloIncomplete},
		{"a record header only", records(withECH, 1<<14)[:5], helloIncomplete},
		{"truncated hello", records(withECH, 1<<14)[:60], helloIncomplete},
		{"truncated before the ECH", records(echLast, 1<<14)[:len(echLast)-5], helloIncomplete},
		{"truncated second record", records(echLast, 100)[:150], helloIncomplete},
		{"oversize", records(tooBig, 1<<14), helloOther},
		{"oversize record", []byte{0x16, 3, 1, 0x40, 0x01, 1}, helloOther},
		{"http", []byte("GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n"), helloOther},
		{"ssh", []byte("SSH-2.0-OpenSSH_9.6\r\n"), helloOther},
		{"one byte, not TLS", []byte{'G'}, helloOther},
		{"SSL 2 hello", []byte{0x80, 0x2e, 0x01, 0x03, 0x01}, helloOther},
		{"not a ClientHello", records(append([]byte{2}, plain[1:]...), 1<<14), helloOther},
		{"not a ClientHello, split", records(append([]byte{2}, plain[1:]...), 1), helloOther},
		{"an alert record second", append(records(withECH, 20)[:25], 0x15, 3, 3, 0, 2, 2, 40), helloOther},
		{"session id past the end", malformed(plain, func(b []byte) []byte { b[sidLen] = 200; return b }), helloOther},
		{"cipher suites past the end", malformed(plain, func(b []byte) []byte { b[suitesLen] = 0xff; return b }), helloOther},
		{"extensions shorter than their length", malformed(plain, func(b []byte) []byte { b[extsLen+1]++; return b }), helloOther},
		{"bytes after the extensions", malformed(plain, func(b []byte) []byte { b[extsLen+1]--; return b }), helloOther},
		{"an extension past the end", malformed(oneExt, func(b []byte) []byte { b[len(b)-4] = 9; return b }), helloOther},
		{"half an extension header", malformed(oneExt, func(b []byte) []byte { return append(b[:len(b)-7], 0, 2, 0, 16) }), helloOther},
		{"a hello body cut short", malformed(plain, func(b []byte) []byte { return b[:20] }), helloOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, typ := judgeHello(tc.in)
			if got != tc.want {
				t.Errorf("judgeHello = %v, want %v", got, tc.want)
			}
			if got == helloECH && typ != extECH {
				t.Errorf("judgeHello found 0x%04x, want 0x%04x", typ, extECH)
			}
		})
	}
}

// TestJudgeHelloOlderECH: ESNI's type and those ECH drafts -07 to -12
// gave encrypted_client_hello are refused too; their neighbours are not.
func TestJudgeHelloOlderECH(t *testing.T) {
	for _, tc := range []struct {
		typ  uint16
		want helloVerdict
	}{
		{0xffce, helloECH}, // ESNI drafts
		{0xfe08, helloECH}, // ECH drafts -07 and -08
		{0xfe09, helloECH},
		{0xfe0a, helloECH},
		{0xfe0b, helloECH},
		{0xfe0c, helloECH}, // draft -12
		{0xfe0d, helloECH}, // draft -13 on, RFC 9849
		{0xfe07, helloPlain},
		{0xfe0e, helloPlain},
		{0xffcd, helloPlain},
		{0xfd00, helloPlain}, // ech_outer_extensions: only ever inside the encrypted hello
	} {
		t.Run(fmt.Sprintf("0x%04x", tc.typ), func(t *testing.T) {
			v, typ := judgeHello(browserHello(ext{tc.typ, []byte("nonce")}))
			if v != tc.want || v == helloECH && typ != tc.typ {
				t.Errorf("judgeHello = %v, 0x%04x; want %v", v, typ, tc.want)
			}
		})
	}
}

// startRelays serves fs (listen addresses 127.0.0.1:0) and returns where
// each listens and the log.
func startRelays(t *testing.T, fs ...forward) ([]string, *syncLog) {
	t.Helper()
	ls, err := listenAll(fs)
	if err != nil {
		t.Fatal(err)
	}
	log := &syncLog{}
	serveInBackground(t, ls, nil, log)
	var addrs []string
	for _, l := range ls {
		addrs = append(addrs, l.ln.Addr().String())
	}
	return addrs, log
}

// quietUpstream listens and never accepts.
func quietUpstream(t *testing.T) *net.TCPListener {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

func TestRelayRefusesECH(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hello []byte
	}{
		{"a browser's hello", browserHello(echExt("nonce-in-ech"))},
		// Larger than the first read's buffer: read in several steps.
		{"20 kB, ECH last", records(helloMessage(sniExt("allowed.test"), ext{21, make([]byte, 20000)}, echExt("nonce-in-ech")), 1<<14)},
		{"one byte a record", records(helloMessage(sniExt("allowed.test"), echExt("nonce-in-ech")), 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := quietUpstream(t)
			addrs, log := startRelays(t, forward{listen: ap("127.0.0.1:0"), target: addrOf(up), tls: true})
			c := dial(t, addrs[0])
			if _, err := c.Write(tc.hello); err != nil {
				t.Fatal(err)
			}
			closedWithin(t, c, 5*time.Second, "a client that sent ECH")
			noAccept(t, up)
			log.waitFor(t, "forwarder: refused a TLS ClientHello with encrypted_client_hello (0xfe0d) on "+addrs[0]+"\n", 5*time.Second)
		})
	}
}

// TestRelayRefusesOlderECH: ESNI and the ECH drafts' types in a first
// hello are refused before the upstream is dialled.
func TestRelayRefusesOlderECH(t *testing.T) {
	up := quietUpstream(t)
	addrs, log := startRelays(t, forward{listen: ap("127.0.0.1:0"), target: addrOf(up), tls: true})
	for _, typ := range []uint16{extESNI, 0xfe08, 0xfe0c} {
		t.Run(fmt.Sprintf("0x%04x", typ), func(t *testing.T) {
			c := dial(t, addrs[0])
			if _, err := c.Write(browserHello(ext{typ, []byte("nonce")})); err != nil {
				t.Fatal(err)
			}
			closedWithin(t, c, 5*time.Second, "a client that sent ESNI or a draft's ECH")
			noAccept(t, up)
			log.waitFor(t, fmt.Sprintf("forwarder: refused a TLS ClientHello with %s (0x%04x) on %s\n", extName(typ), typ, addrs[0]), 5*time.Second)
		})
	}
}

// echoed sends b through the relay at addr to an echo, half-closes, and
// checks that exactly b comes back.
func echoed(t *testing.T, addr string, b []byte) {
	t.Helper()
	c := dial(t, addr)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	echoedAfter(t, c, b)
}

func TestRelayPassesOtherBytesOn(t *testing.T) {
	up := addrOf(startUpstream(t, echo))
	addrs, log := startRelays(t,
		forward{listen: ap("127.0.0.1:0"), target: up, tls: true},
		// A raw pair is opaque: not even a hello with ECH is looked at.
		forward{listen: ap("127.0.0.1:0"), target: up})
	tlsPair, rawPair := addrs[0], addrs[1]
	big := records(helloMessage(sniExt("allowed.test"), ext{21, make([]byte, 20000)}, alpnExt("h2")), 1<<14)
	tooBig := append(records([]byte{1, 0x01, 0x00, 0x01}, 1<<14), bytes.Repeat([]byte{0x16, 3, 1, 0x40, 0}, 20000)...)
	for _, tc := range []struct {
		name string
		addr string
		in   []byte
	}{
		{"a browser's hello and then data", tlsPair, append(browserHello(), "application data"...)},
		{"20 kB hello", tlsPair, big},
		{"a hello split in records of one byte", tlsPair, records(helloMessage(sniExt("allowed.test")), 1)},
		{"http", tlsPair, []byte("GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")},
		{"ssh", tlsPair, []byte("SSH-2.0-OpenSSH_9.6\r\n")},
		{"malformed", tlsPair, records(append(helloMessage(sniExt("allowed.test"), echExt("x"))[:40], make([]byte, 3)...), 1<<14)[:30]},
		{"over the bound", tlsPair, tooBig},
		{"half a hello, then the client's EOF", tlsPair, browserHello()[:300]},
		{"ECH on a raw pair", rawPair, browserHello(echExt("x"))},
	} {
		t.Run(tc.name, func(t *testing.T) { echoed(t, tc.addr, tc.in) })
	}
	if strings.Contains(log.String(), "forwarder: refused") {
		t.Errorf("something was refused:\n%s", log)
	}
}

func TestRelayClosesASlowHello(t *testing.T) {
	// Put back once the relays, cleaned up before, are gone.
	saved := helloTimeout
	t.Cleanup(func() { helloTimeout = saved })
	helloTimeout = 100 * time.Millisecond
	up := quietUpstream(t)
	addrs, _ := startRelays(t, forward{listen: ap("127.0.0.1:0"), target: addrOf(up), tls: true})
	for _, sent := range [][]byte{nil, browserHello()[:300]} {
		c := dial(t, addrs[0])
		if _, err := c.Write(sent); err != nil {
			t.Fatal(err)
		}
		closedWithin(t, c, 5*time.Second, "a client that stopped sending")
		noAccept(t, up)
	}
}

// unixUpstream is a unix socket listener, as nginx's TLS server is in the
// router, counting what it accepts and echoing it back.
func unixUpstream(t *testing.T) (string, *atomic.Int32) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tls.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
				_ = c.(*net.UnixConn).CloseWrite()
			}()
		}
	}()
	return path, &accepted
}

func TestRelayToAUnixSocketChecksTheHello(t *testing.T) {
	path, accepted := unixUpstream(t)
	addrs, log := startRelays(t, forward{listen: ap("127.0.0.1:0"), socket: path, tls: true})
	echoed(t, addrs[0], append(browserHello(), "application data"...))
	if accepted.Load() != 1 {
		t.Fatalf("the socket accepted %d connections, want 1", accepted.Load())
	}
	c := dial(t, addrs[0])
	if _, err := c.Write(browserHello(echExt("nonce-in-ech"))); err != nil {
		t.Fatal(err)
	}
	closedWithin(t, c, 5*time.Second, "a client that sent ECH")
	log.waitFor(t, "forwarder: refused a TLS ClientHello with encrypted_client_hello (0xfe0d) on "+addrs[0]+"\n", 5*time.Second)
	if accepted.Load() != 1 {
		t.Errorf("the ECH hello reached the socket (%d connections)", accepted.Load())
	}
}
