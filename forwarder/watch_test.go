package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func (v watchVerdict) String() string {
	return [...]string{"on", "end", "refused"}[v]
}

// ccs is a change_cipher_spec record, as a TLS 1.3 client in middlebox
// compatibility mode sends it before its second ClientHello.
var ccs = []byte{0x14, 3, 3, 0, 1, 1}

// appRecords is n bytes of application_data records of at most 16 KiB.
func appRecords(n int) []byte {
	var out []byte
	for n > 0 {
		k := min(n, 1<<14)
		out = append(out, 0x17, 3, 3, byte(k>>8), byte(k))
		out = append(out, bytes.Repeat([]byte{0xaa}, k)...)
		n -= k
	}
	return out
}

// record is one record of type typ around body.
func record(typ byte, body []byte) []byte {
	return append([]byte{typ, 3, 3, byte(len(body) >> 8), byte(len(body))}, body...)
}

// secondHello is a ClientHello as a client sends it after a
// HelloRetryRequest, with exts after its key share.
func secondHello(exts ...ext) []byte {
	return helloMessage(append([]ext{sniExt("allowed.test"), {51, keyShares()}, {43, []byte{2, 3, 4}}}, exts...)...)
}

// bigSuites is msg, a ClientHello from helloMessage, with n more bytes
// of cipher suites.
func bigSuites(msg []byte, n int) []byte {
	const suites = 4 + 2 + 32 + 1 + 32 // where the cipher suites' length is
	body := bytes.Clone(msg[4:suites])
	old := int(binary.BigEndian.Uint16(msg[suites:]))
	body = binary.BigEndian.AppendUint16(body, uint16(old+n))
	body = append(body, msg[suites+2:suites+2+old]...)
	body = append(body, bytes.Repeat([]byte{0x13, 0x01}, n/2)...)
	body = append(body, msg[suites+2+old:]...)
	return append([]byte{1, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}, body...)
}

// splitAt wraps msg in two handshake records, split at i.
func splitAt(msg []byte, i int) []byte {
	return append(records(msg[:i], len(msg)), records(msg[i:], len(msg))...)
}

// extOffset is where the extension of type typ starts in msg, a
// handshake message.
func extOffset(t *testing.T, msg []byte, typ uint16) int {
	t.Helper()
	i := bytes.Index(msg, binary.BigEndian.AppendUint16(nil, typ))
	if i < 0 {
		t.Fatalf("no extension 0x%04x", typ)
	}
	return i
}

func TestWatch(t *testing.T) {
	first := browserHello()
	plain2 := secondHello(alpnExt("h2"))
	ech2 := secondHello(echExt("nonce-in-ech"), alpnExt("h2"))
	echLast := secondHello(alpnExt("h2"), ext{21, make([]byte, 3000)}, echExt("nonce-in-ech"))
	at := extOffset(t, echLast, extECH)
	// 40,000 bytes of cipher suites and 30,000 of padding: larger than
	// any client's hello, and than maxHello.
	huge := bigSuites(secondHello(ext{21, make([]byte, 30000)}), 40000)
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	// A TLS 1.2 client's Finished after a resumption: encrypted, so any
	// bytes, here the look of a ClientHello's header that declares more
	// than the record holds.
	finished12 := record(0x16, append([]byte{1, 0x7f, 0x12, 0x34}, bytes.Repeat([]byte{0x5a}, 28)...))

	for _, tc := range []struct {
		name string
		in   []byte
		want watchVerdict
		// passed is how many bytes are passed on before the verdict;
		// -1 for all of them, -2 for any number.
		passed  int
		refused uint16
	}{
		{"the first hello alone", first, watchOn, -1, 0},
		{"a second hello without ECH", cat(first, ccs, records(plain2, 1<<14)), watchOn, -1, 0},
		{"a second hello with ECH", cat(first, ccs, records(ech2, 1<<14)), watchRefused, len(first) + len(ccs), extECH},
		{"a second hello with ESNI", cat(first, ccs, records(secondHello(ext{extESNI, []byte("x")}), 1<<14)), watchRefused, len(first) + len(ccs), extESNI},
		{"a second hello with draft-10's ECH", cat(first, ccs, records(secondHello(ext{0xfe0a, []byte("x")}), 1<<14)), watchRefused, len(first) + len(ccs), 0xfe0a},
		{"0xfe07 is no ECH", cat(first, ccs, records(secondHello(ext{0xfe07, []byte("x")}), 1<<14)), watchOn, -1, 0},
		{"a second hello without a change_cipher_spec", cat(first, records(ech2, 1<<14)), watchRefused, len(first), extECH},
		{"a second hello in the first one's record", records(cat(first[5:], ech2), 1<<15), watchRefused, 0, extECH},
		{"a second hello split, ECH in its second record", cat(first, ccs, splitAt(echLast, at-10)), watchRefused, len(first) + len(ccs) + recordHeader + at - 10, extECH},
		{"a second hello split, ECH's type across the records", cat(first, ccs, splitAt(echLast, at+1)), watchRefused, len(first) + len(ccs) + recordHeader + at + 1, extECH},
		{"a second hello in records of one byte", cat(first, ccs, records(ech2, 1)), watchRefused, len(first) + len(ccs) + 6*(extOffset(t, ech2, extECH)+1), extECH},
		{"a second hello split, no ECH", cat(first, ccs, splitAt(plain2, 100), appRecords(100)), watchOn, -1, 0},
		{"a third hello with ECH", cat(first, ccs, records(plain2, 1<<14), records(ech2, 1<<14)), watchRefused, len(first) + len(ccs) + recordHeader + len(plain2), extECH},
		{"a second hello over 64 KiB", cat(first, ccs, records(huge, 1<<14)), watchRefused, -2, 0},
		// Application data does not end the looking: a server skips a
		// client's early data while it waits for the second hello.
		{"early data, then a second hello with ECH", cat(first, appRecords(3000), ccs, records(ech2, 1<<14)), watchRefused, len(first) + 3005 + len(ccs), extECH},
		{"an alert, then a second hello with ECH", cat(first, record(0x15, []byte{1, 90}), records(ech2, 1<<14)), watchRefused, len(first) + 7, extECH},
		{"application data after the first hello", cat(first, appRecords(20000)), watchOn, -1, 0},
		{"64 KiB of application data end it", cat(first, appRecords(watchBudget), records(ech2, 1<<14)), watchEnd, -1, 0},
		{"not TLS after the first hello", cat(first, []byte("GET / HTTP/1.1\r\n\r\n"), records(ech2, 1<<14)), watchEnd, -1, 0},
		{"a record too large after the first hello", cat(first, []byte{0x17, 3, 3, 0x48, 1}), watchEnd, -1, 0},
		{"TLS 1.2: the client's key exchange ends it", cat(first, records([]byte{16, 0, 0, 33, 32}, 1<<14), records(ech2, 1<<14)), watchEnd, -1, 0},
		{"TLS 1.2: an encrypted Finished that looks like a hello", cat(first, ccs, finished12, appRecords(1000)), watchOn, -1, 0},
		{"a malformed second hello is passed on", cat(first, ccs, records(append([]byte{1, 0, 0, 10}, make([]byte, 10)...), 1<<14), appRecords(10)), watchOn, -1, 0},
	} {
		for _, chunk := range []int{1 << 20, 1, 7, 1500} {
			t.Run(fmt.Sprintf("%s/chunks of %d", tc.name, chunk), func(t *testing.T) {
				passed, v, w := feedWatch(tc.in, chunk)
				if v != tc.want {
					t.Fatalf("verdict %v, want %v (after %d bytes of %d passed on)", v, tc.want, len(passed), len(tc.in))
				}
				if !bytes.HasPrefix(tc.in, passed) {
					t.Fatalf("passed on bytes that are not what came")
				}
				switch want := tc.passed; {
				case want == -1 && len(passed) != len(tc.in):
					t.Errorf("passed on %d bytes of %d, want all", len(passed), len(tc.in))
				case want >= 0 && len(passed) != want:
					t.Errorf("passed on %d bytes, want %d", len(passed), want)
				}
				if v == watchRefused && w.refused != tc.refused {
					t.Errorf("refused for 0x%04x, want 0x%04x", w.refused, tc.refused)
				}
				if v == watchRefused && bytes.Contains(passed, []byte("nonce-in-ech")) {
					t.Errorf("the ECH extension was passed on")
				}
			})
		}
	}
}

// feedWatch gives a watch in as the relay would, chunk bytes a read,
// and returns what it passed on and its last verdict.
func feedWatch(in []byte, chunk int) ([]byte, watchVerdict, *watch) {
	w := newWatch()
	var passed, held []byte
	for len(in) > 0 {
		k := min(chunk, len(in))
		held = append(held, in[:k]...)
		in = in[k:]
		n, v := w.scan(held)
		switch v {
		case watchEnd:
			return append(append(passed, held...), in...), v, w
		case watchRefused:
			return append(passed, held[:n]...), v, w
		}
		passed = append(passed, held[:n]...)
		held = held[n:]
	}
	return passed, watchOn, w
}

// recorder is an upstream that echoes what it reads and, once the
// relay closes, sends all of it on got.
func recorder(got chan<- []byte) func(*net.TCPConn) {
	return func(c *net.TCPConn) {
		var all []byte
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			all = append(all, buf[:n]...)
			if n > 0 {
				if _, werr := c.Write(buf[:n]); werr != nil {
					err = werr
				}
			}
			if err != nil {
				got <- all
				return
			}
		}
	}
}

// upstreamGot waits for what the recorder behind a closed relay read.
func upstreamGot(t *testing.T, got <-chan []byte) []byte {
	t.Helper()
	select {
	case b := <-got:
		return b
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream's connection was not closed")
		return nil
	}
}

// TestRelayWatchesLaterHellos sends a first ClientHello without ECH and
// waits for its echo, as a client waits for the HelloRetryRequest, then
// sends the rest.
func TestRelayWatchesLaterHellos(t *testing.T) {
	first := browserHello()
	plain2 := secondHello(alpnExt("h2"))
	ech2 := secondHello(echExt("nonce-in-ech"), alpnExt("h2"))
	echLast := secondHello(alpnExt("h2"), ext{21, make([]byte, 3000)}, echExt("nonce-in-ech"))
	at := extOffset(t, echLast, extECH)
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	// More than watchBudget of application data, then what would be
	// refused if it were still looked at: spliced unread.
	late := cat(appRecords(watchBudget+1000), records(ech2, 1<<14))

	for _, tc := range []struct {
		name string
		rest []byte
		// refused is the extension type logged, 0 for none: the relay
		// then echoes everything intact.
		refused uint16
		// upTo is what the upstream may have got of rest before the
		// close: at most the part before the refused hello.
		upTo int
	}{
		{"a second hello with ECH", cat(ccs, records(ech2, 1<<14)), extECH, len(ccs)},
		{"a second hello with ESNI", cat(ccs, records(secondHello(ext{extESNI, []byte("nonce-in-ech")}), 1<<14)), extESNI, len(ccs)},
		{"a second hello without ECH, then application data", cat(ccs, records(plain2, 1<<14), appRecords(1<<20)), 0, 0},
		{"a second hello split, ECH in its second record", cat(ccs, splitAt(echLast, at-10)), extECH, len(ccs) + recordHeader + at - 10},
		{"a second hello in records of one byte, ECH", cat(ccs, records(ech2, 1)), extECH, len(ccs) + 6*(extOffset(t, ech2, extECH)+1)},
		{"a second hello split, no ECH", cat(ccs, splitAt(plain2, 50), appRecords(1000)), 0, 0},
		{"early data, then a second hello with ECH", cat(appRecords(5000), ccs, records(ech2, 1<<14)), extECH, 5005 + len(ccs)},
		{"application data, spliced past the bound", late, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan []byte, 1)
			up := addrOf(startUpstream(t, recorder(got)))
			addrs, log := startRelays(t, forward{listen: ap("127.0.0.1:0"), target: up, tls: true})
			c := dial(t, addrs[0])
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Write(first); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, make([]byte, len(first))); err != nil {
				t.Fatalf("the first hello's echo: %v", err)
			}
			if tc.refused == 0 {
				echoedAfter(t, c, tc.rest)
				if strings.Contains(log.String(), "forwarder: refused") {
					t.Errorf("something was refused:\n%s", log)
				}
				return
			}
			go func() { _, _ = c.Write(tc.rest) }()
			closedWithin(t, c, 5*time.Second, "a client that sent ECH in a later hello")
			log.waitFor(t, fmt.Sprintf("forwarder: refused a later TLS ClientHello with %s (0x%04x) on %s\n", extName(tc.refused), tc.refused, addrs[0]), 5*time.Second)
			b := upstreamGot(t, got)
			if !bytes.HasPrefix(b, first) || !bytes.HasPrefix(tc.rest, b[len(first):]) {
				t.Fatalf("the upstream got %d bytes that are not the client's", len(b))
			}
			if n := len(b) - len(first); n > tc.upTo {
				t.Errorf("the upstream got %d bytes after the first hello, want at most %d", n, tc.upTo)
			}
			if bytes.Contains(b, []byte("nonce-in-ech")) {
				t.Error("the upstream got the ECH extension")
			}
		})
	}
}

// echoedAfter sends b on c, half-closes, and checks that exactly b
// comes back.
func echoedAfter(t *testing.T, c *net.TCPConn, b []byte) {
	t.Helper()
	go func() {
		_, _ = c.Write(b)
		_ = c.CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("reading the echo: %v", err)
	}
	if !bytes.Equal(got, b) {
		t.Fatalf("the echo differs: %d bytes back of %d sent", len(got), len(b))
	}
}

// TestRelayWatchPassesBytesIntact: what follows a first hello comes back
// from an echo exactly as it was sent, in one write with the hello.
func TestRelayWatchPassesBytesIntact(t *testing.T) {
	up := addrOf(startUpstream(t, echo))
	addrs, log := startRelays(t, forward{listen: ap("127.0.0.1:0"), target: up, tls: true})
	first := browserHello()
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"application data right after the first hello", cat(first, appRecords(3<<20))},
		{"a second hello without ECH, pipelined", cat(first, ccs, records(secondHello(), 1<<14), appRecords(100<<10))},
		{"TLS 1.2, full", cat(first, records([]byte{16, 0, 0, 3, 2, 0xab, 0xcd}, 1<<14), ccs, record(0x16, make([]byte, 40)), appRecords(1<<20))},
		{"TLS 1.2, resumed, a Finished that looks like a hello", cat(first, ccs, record(0x16, append([]byte{1, 0x7f, 0x12, 0x34}, make([]byte, 28)...)), appRecords(1<<20))},
		{"the client's EOF inside a handshake record", cat(first, ccs, records(secondHello(), 1<<14)[:100])},
	} {
		t.Run(tc.name, func(t *testing.T) { echoed(t, addrs[0], tc.in) })
	}
	if strings.Contains(log.String(), "forwarder: refused") {
		t.Errorf("something was refused:\n%s", log)
	}
}

// TestRelayClosesASlowLaterHello: a record of a second hello that does
// not come whole within helloTimeout closes the relay; what came before
// it was passed on.
func TestRelayClosesASlowLaterHello(t *testing.T) {
	saved := helloTimeout
	t.Cleanup(func() { helloTimeout = saved })
	helloTimeout = 100 * time.Millisecond
	got := make(chan []byte, 1)
	up := addrOf(startUpstream(t, recorder(got)))
	addrs, _ := startRelays(t, forward{listen: ap("127.0.0.1:0"), target: up, tls: true})
	first := browserHello()
	second := records(secondHello(echExt("nonce-in-ech")), 1<<14)
	c := dial(t, addrs[0])
	sent := append(append(bytes.Clone(first), ccs...), second[:len(second)/2]...)
	if _, err := c.Write(sent); err != nil {
		t.Fatal(err)
	}
	closedWithin(t, c, 5*time.Second, "a client whose second hello stopped half-way")
	want := append(bytes.Clone(first), ccs...)
	if b := upstreamGot(t, got); !bytes.Equal(b, want) {
		t.Errorf("the upstream got %d bytes, want the first hello and the change_cipher_spec (%d)", len(b), len(want))
	}
}

// TestRelayWatchOverAUnixSocket: the watch passes bytes on to a unix
// socket as to TCP.
func TestRelayWatchOverAUnixSocket(t *testing.T) {
	path, _ := unixUpstream(t)
	addrs, log := startRelays(t, forward{listen: ap("127.0.0.1:0"), socket: path, tls: true})
	first := browserHello()
	echoed(t, addrs[0], append(append(bytes.Clone(first), ccs...), appRecords(200<<10)...))
	c := dial(t, addrs[0])
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(first); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, len(first))); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(append(bytes.Clone(ccs), records(secondHello(echExt("x")), 1<<14)...)); err != nil {
		t.Fatal(err)
	}
	closedWithin(t, c, 5*time.Second, "a client that sent ECH in its second hello")
	log.waitFor(t, "refused a later TLS ClientHello with encrypted_client_hello (0xfe0d)", 5*time.Second)
}

// TestRelayRealTLS: Go's TLS client and server through a TLS pair, with a
// HelloRetryRequest (the server takes only P-256, the client's key shares
// are X25519MLKEM768 and X25519) and in TLS 1.2, full and resumed, whose
// Finished is encrypted in a handshake record. Each connection moves
// 200 KiB each way, past the watch's bound.
func TestRelayRealTLS(t *testing.T) {
	cert := selfSigned(t)
	tlsServer := func(cfg *tls.Config) netip.AddrPort {
		return addrOf(startUpstream(t, func(c *net.TCPConn) {
			s := tls.Server(c, cfg)
			_ = s.SetDeadline(time.Now().Add(10 * time.Second))
			_, _ = io.Copy(s, s)
			_ = s.CloseWrite()
		}))
	}
	for _, tc := range []struct {
		name    string
		server  *tls.Config
		client  *tls.Config
		resumes bool
		// hellos is how many ClientHellos the client sends on each
		// connection; version is what it gets.
		hellos  int
		version uint16
	}{
		{"TLS 1.3", &tls.Config{}, &tls.Config{}, false, 1, tls.VersionTLS13},
		{"TLS 1.3 after a HelloRetryRequest", &tls.Config{CurvePreferences: []tls.CurveID{tls.CurveP256}}, &tls.Config{}, false, 2, tls.VersionTLS13},
		{"TLS 1.3 after a HelloRetryRequest, resumed", &tls.Config{CurvePreferences: []tls.CurveID{tls.CurveP256}}, &tls.Config{}, true, 2, tls.VersionTLS13},
		{"TLS 1.2, ChaCha20", &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305}}, &tls.Config{}, true, 1, tls.VersionTLS12},
		{"TLS 1.2, AES-CBC", &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA}}, &tls.Config{CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA}}, true, 1, tls.VersionTLS12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := tc.server.Clone()
			srv.Certificates = []tls.Certificate{cert}
			addrs, log := startRelays(t, forward{listen: ap("127.0.0.1:0"), target: tlsServer(srv), tls: true})
			cli := tc.client.Clone()
			cli.RootCAs = x509.NewCertPool()
			cli.RootCAs.AddCert(cert.Leaf)
			cli.ServerName = "allowed.test"
			cli.ClientSessionCache = tls.NewLRUClientSessionCache(4)
			rounds := 1
			if tc.resumes {
				rounds = 2
			}
			for i := range rounds {
				raw := &helloCounter{TCPConn: dial(t, addrs[0])}
				c := tls.Client(raw, cli)
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				want := bytes.Repeat([]byte{byte(i)}, 200<<10)
				go func() {
					_, _ = c.Write(want)
					_ = c.CloseWrite()
				}()
				got, err := io.ReadAll(c)
				if err != nil {
					t.Fatalf("connection %d: %v", i, err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("connection %d: %d bytes back of %d", i, len(got), len(want))
				}
				st := c.ConnectionState()
				if i > 0 && !st.DidResume {
					t.Errorf("connection %d did not resume", i)
				}
				if st.Version != tc.version || raw.hellos != tc.hellos {
					t.Errorf("connection %d: version 0x%04x after %d ClientHellos, want 0x%04x after %d", i, st.Version, raw.hellos, tc.version, tc.hellos)
				}
			}
			if strings.Contains(log.String(), "forwarder: refused") {
				t.Errorf("something was refused:\n%s", log)
			}
		})
	}
}

// helloCounter counts the ClientHellos a TLS client writes: Go's client
// writes each handshake record with a write of its own.
type helloCounter struct {
	*net.TCPConn
	hellos int
}

func (c *helloCounter) Write(b []byte) (int, error) {
	if len(b) > recordHeader && b[0] == recordHandshake && b[recordHeader] == typeClientHello {
		c.hellos++
	}
	return c.TCPConn.Write(b)
}

// selfSigned is a certificate for allowed.test.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "allowed.test"},
		DNSNames:              []string{"allowed.test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}
