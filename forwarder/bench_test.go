package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
)

// ext is one TLS extension of a ClientHello the tests build.
type ext struct {
	typ  uint16
	data []byte
}

// helloMessage is a ClientHello handshake message (type, 24-bit length,
// body) with exts in that order, shaped like a browser's: a session id,
// a few cipher suites, null compression.
func helloMessage(exts ...ext) []byte {
	var body []byte
	body = append(body, 0x03, 0x03)          // legacy_version
	body = append(body, make([]byte, 32)...) // random
	body = append(body, 32)                  // session id
	body = append(body, make([]byte, 32)...) //
	body = append(body, 0, 6, 0x13, 0x01, 0x13, 0x02, 0x13, 0x03)
	body = append(body, 1, 0) // compression: null
	var list []byte
	for _, e := range exts {
		list = binary.BigEndian.AppendUint16(list, e.typ)
		list = binary.BigEndian.AppendUint16(list, uint16(len(e.data)))
		list = append(list, e.data...)
	}
	body = binary.BigEndian.AppendUint16(body, uint16(len(list)))
	body = append(body, list...)
	msg := []byte{1, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}
	return append(msg, body...)
}

// records wraps msg in handshake records of at most max bytes of it each.
func records(msg []byte, max int) []byte {
	var out []byte
	for len(msg) > 0 {
		n := min(len(msg), max)
		out = append(out, 0x16, 0x03, 0x01, byte(n>>8), byte(n))
		out = append(out, msg[:n]...)
		msg = msg[n:]
	}
	return out
}

func sniExt(name string) ext {
	var d []byte
	d = binary.BigEndian.AppendUint16(d, uint16(len(name)+3))
	d = append(d, 0)
	d = binary.BigEndian.AppendUint16(d, uint16(len(name)))
	return ext{0, append(d, name...)}
}

func alpnExt(protos ...string) ext {
	var l []byte
	for _, p := range protos {
		l = append(l, byte(len(p)))
		l = append(l, p...)
	}
	return ext{16, binary.BigEndian.AppendUint16(nil, uint16(len(l)))}.with(l)
}

func (e ext) with(more []byte) ext { return ext{e.typ, append(e.data, more...)} }

// browserHello is a ClientHello of a browser's size (about 1.8 kB with a
// post-quantum key share), in one record, plus extra extensions last.
func browserHello(extra ...ext) []byte {
	exts := []ext{
		sniExt("allowed.test"),
		{23, nil},          // extended_master_secret
		{65281, []byte{0}}, // renegotiation_info
		{10, []byte{0, 6, 0x11, 0xec, 0, 0x1d, 0, 0x17}}, // supported_groups
		{11, []byte{1, 0}}, // ec_point_formats
		{35, nil},          // session_ticket
		alpnExt("h2", "http/1.1"),
		{5, []byte{1, 0, 0, 0, 0}},                 // status_request
		{13, []byte{0, 8, 4, 3, 8, 4, 4, 1, 5, 3}}, // signature_algorithms
		{18, nil},                                  // signed_certificate_timestamp
		{51, keyShares()},                          // key_share
		{45, []byte{1, 1}},                         // psk_key_exchange_modes
		{43, []byte{4, 3, 4, 3, 3}},                // supported_versions
		{27, []byte{2, 0, 2}},                      // compress_certificate
	}
	return records(helloMessage(append(exts, extra...)...), 1<<14)
}

// keyShares is an X25519MLKEM768 share and an X25519 one.
func keyShares() []byte {
	var s []byte
	s = binary.BigEndian.AppendUint16(s, 0x11ec)
	s = binary.BigEndian.AppendUint16(s, 1216)
	s = append(s, make([]byte, 1216)...)
	s = binary.BigEndian.AppendUint16(s, 0x001d)
	s = binary.BigEndian.AppendUint16(s, 32)
	s = append(s, make([]byte, 32)...)
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(s))), s...)
}

// BenchmarkRelayNewConnection is one new connection end to end: connect
// to the forwarder, send a browser's ClientHello, read it back from an
// echo server behind the relay, close.
func BenchmarkRelayNewConnection(b *testing.B) {
	b.Run("raw", func(b *testing.B) { benchRelay(b, forward{listen: ap("127.0.0.1:0")}) })
	// The hello is read and judged before the upstream is dialled.
	b.Run("tls", func(b *testing.B) { benchRelay(b, forward{listen: ap("127.0.0.1:0"), tls: true}) })
}

// BenchmarkClientHelloPeek is judging a browser's ClientHello, in one
// record and split over records of 512 bytes.
func BenchmarkClientHelloPeek(b *testing.B) {
	one := browserHello()
	msg := one[5:]
	for _, tc := range []struct {
		name  string
		hello []byte
	}{{"one-record", one}, {"split-512", records(msg, 512)}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.hello)))
			b.ReportAllocs()
			for b.Loop() {
				if v, _ := judgeHello(tc.hello); v != helloPlain {
					b.Fatal("not judged plain")
				}
			}
		})
	}
}

func benchRelay(b *testing.B, f forward) {
	addr := benchForwarder(b, f)
	hello := browserHello()
	buf := make([]byte, len(hello))
	b.SetBytes(int64(len(hello)))
	defer countSwitches(b)()
	for b.Loop() {
		c, err := net.DialTCP("tcp", nil, addr)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Write(hello); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
		// A reset leaves no TIME_WAIT behind to run out of ports.
		_ = c.SetLinger(0)
		_ = c.Close()
	}
}

// BenchmarkRelayBulk is a connection that, after a browser's ClientHello,
// sends size bytes of TLS application_data records (16 KiB each, as a
// TLS 1.3 client writes them) and reads them back from an echo behind
// the relay: the bulk of an upload and a download after the handshake.
func BenchmarkRelayBulk(b *testing.B) {
	for _, size := range []int{64 << 10, 4 << 20} {
		for _, tc := range []struct {
			name string
			f    forward
		}{
			{"raw", forward{listen: ap("127.0.0.1:0")}},
			{"tls", forward{listen: ap("127.0.0.1:0"), tls: true}},
		} {
			b.Run(fmt.Sprintf("%s/%dKiB", tc.name, size>>10), func(b *testing.B) {
				addr := benchForwarder(b, tc.f)
				hello := browserHello()
				data := appData(size)
				got := make([]byte, len(hello)+len(data))
				b.SetBytes(int64(len(hello) + len(data)))
				defer countSwitches(b)()
				for b.Loop() {
					c, err := net.DialTCP("tcp", nil, addr)
					if err != nil {
						b.Fatal(err)
					}
					werr := make(chan error, 1)
					go func() {
						_, err := c.Write(hello)
						if err == nil {
							_, err = c.Write(data)
						}
						werr <- err
					}()
					if _, err := io.ReadFull(c, got); err != nil {
						b.Fatal(err)
					}
					if err := <-werr; err != nil {
						b.Fatal(err)
					}
					_ = c.SetLinger(0)
					_ = c.Close()
				}
			})
		}
	}
}

// appData is size bytes of application_data records of 16 KiB and 17
// bytes (a TLS 1.3 record's largest ciphertext), the last one shorter.
func appData(size int) []byte {
	const frag = 1<<14 + 17
	out := make([]byte, 0, size)
	for len(out) < size {
		n := min(frag, size-len(out)-recordHeader)
		out = append(out, 0x17, 3, 3, byte(n>>8), byte(n))
		out = append(out, make([]byte, n)...)
	}
	return out
}

// benchForwarder serves f in front of an echo until the benchmark ends
// and returns where it listens.
func benchForwarder(b *testing.B, f forward) *net.TCPAddr {
	f.target = addrOf(benchEcho(b))
	ls, err := listenAll([]forward{f})
	if err != nil {
		b.Fatal(err)
	}
	serveInBackground(b, ls, nil, io.Discard)
	return ls[0].ln.Addr().(*net.TCPAddr)
}

// benchEcho is an echo on loopback until the benchmark ends.
func benchEcho(b *testing.B) *net.TCPListener {
	up, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = up.Close() })
	go func() {
		for {
			c, err := up.AcceptTCP()
			if err != nil {
				return
			}
			go echo(c)
		}
	}()
	return up
}
