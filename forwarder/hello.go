package main

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"time"
)

// ECH (encrypted client hello, RFC 9849) hides the name a client wants
// inside a ClientHello whose SNI, the only name nginx sees, is the
// provider's public name. With an allowlisted public name, the agent could
// reach any site behind that provider. The forwarder refuses such hellos
// on the pairs that carry TLS; other bytes are passed on unchanged, and
// nginx judges them as before.

// extECH is the encrypted_client_hello extension's type.
const extECH = 0xfe0d

const (
	// maxHello bounds the bytes read before the first ClientHello is
	// judged. A larger one is passed on unread: nginx's preread buffer
	// (16 KiB) is smaller, and it closes a hello that does not fit.
	maxHello = 64 << 10
	// helloStart is the first read's buffer: a browser's ClientHello with
	// a post-quantum key share is under 2 KiB.
	helloStart = 4 << 10
)

// helloTimeout is nginx's preread_timeout in the generated nginx.conf
// (a variable for the tests).
var helloTimeout = 10 * time.Second

type helloVerdict int

const (
	// helloIncomplete: the client stopped sending, or failed, before
	// the hello was whole.
	helloIncomplete helloVerdict = iota
	// helloPlain: a whole ClientHello without ECH.
	helloPlain
	// helloECH: a ClientHello that carries encrypted_client_hello.
	helloECH
	// helloOther: not a ClientHello, malformed, or larger than maxHello:
	// passed on as it is, for nginx to refuse.
	helloOther
)

// helloBuf holds the bytes read from a client before its relay starts.
type helloBuf struct{ b []byte }

var helloBufs = sync.Pool{New: func() any { return &helloBuf{b: make([]byte, 0, helloStart)} }}

// release gives the buffer back for the next connection; it may be called
// more than once, and on nil.
func (h *helloBuf) release() {
	if h == nil || h.b == nil {
		return
	}
	if cap(h.b) == helloStart {
		h.b = h.b[:0]
		helloBufs.Put(h)
		return
	}
	h.b = nil
}

// readHello reads what the client sends first until judgeHello can tell
// what it is, maxHello bytes have come, the client half-closes (what came
// is passed on) or helloTimeout passes.
func readHello(c *net.TCPConn) (*helloBuf, helloVerdict) {
	h := helloBufs.Get().(*helloBuf)
	_ = c.SetReadDeadline(time.Now().Add(helloTimeout))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	for {
		if len(h.b) == cap(h.b) {
			grown := make([]byte, len(h.b), min(2*cap(h.b), maxHello))
			copy(grown, h.b)
			h.release()
			h = &helloBuf{b: grown}
		}
		n, err := c.Read(h.b[len(h.b):cap(h.b)])
		h.b = h.b[:len(h.b)+n]
		if v := judgeHello(h.b); v != helloIncomplete {
			return h, v
		}
		if len(h.b) == maxHello {
			return h, helloOther
		}
		if err != nil {
			if err == io.EOF && len(h.b) > 0 {
				// A client that half-closed after part of a hello gets
				// what it would have got without the forwarder looking.
				return h, helloOther
			}
			// Too slow, or a failed connection.
			return h, helloIncomplete
		}
	}
}

// judgeHello says what b, the first bytes of a connection, holds: the
// first handshake message is taken from its records, which may split it
// anywhere, and a ClientHello's extensions are walked for ECH.
func judgeHello(b []byte) helloVerdict {
	msg, v := firstHandshake(b)
	if msg == nil {
		return v
	}
	return scanClientHello(msg[4:])
}

const (
	recordHandshake = 0x16
	recordHeader    = 5
	handshakeHeader = 4
	typeClientHello = 1
	// maxRecordFragment is the most a plaintext record may hold; servers
	// refuse a larger one.
	maxRecordFragment = 1 << 14
)

// firstHandshake returns the first handshake message whole, header
// included, or nil and why not.
func firstHandshake(b []byte) ([]byte, helloVerdict) {
	var joined []byte // the message so far, once it spans records
	for {
		if len(b) == 0 {
			return nil, helloIncomplete
		}
		if b[0] != recordHandshake {
			return nil, helloOther
		}
		if len(b) >= 2 && b[1] != 3 {
			// SSL 2 and whatever else: nginx finds no SNI in it.
			return nil, helloOther
		}
		if len(b) < recordHeader {
			return nil, helloIncomplete
		}
		n := int(binary.BigEndian.Uint16(b[3:5]))
		if n > maxRecordFragment {
			return nil, helloOther
		}
		frag := b[recordHeader:min(len(b), recordHeader+n)]
		if joined == nil && len(frag) >= handshakeHeader {
			// The usual case: the record holds the whole message.
			if m := handshakeLen(frag); m <= len(frag) {
				if frag[0] != typeClientHello {
					return nil, helloOther
				}
				return frag[:m], helloPlain
			}
		}
		if joined == nil {
			joined = make([]byte, 0, len(b)) // the message is no longer
		}
		joined = append(joined, frag...)
		if len(joined) >= 1 && joined[0] != typeClientHello {
			return nil, helloOther
		}
		if len(joined) >= handshakeHeader {
			m := handshakeLen(joined)
			if m > maxHello {
				return nil, helloOther
			}
			if m <= len(joined) {
				return joined[:m], helloPlain
			}
		}
		if len(frag) < n {
			return nil, helloIncomplete
		}
		b = b[recordHeader+n:]
	}
}

// handshakeLen is the length of the handshake message at the start of b,
// header included.
func handshakeLen(b []byte) int {
	return handshakeHeader + (int(b[1])<<16 | int(b[2])<<8 | int(b[3]))
}

// scanClientHello walks a ClientHello body to its extensions: version,
// random, session id, cipher suites, compression methods, then the
// extensions list, which must fill the rest exactly (servers refuse it
// otherwise).
func scanClientHello(p []byte) helloVerdict {
	const versionAndRandom = 2 + 32
	if len(p) < versionAndRandom {
		return helloOther
	}
	p = p[versionAndRandom:]
	var ok bool
	if p, ok = skipVector(p, 1); !ok { // session id
		return helloOther
	}
	if p, ok = skipVector(p, 2); !ok { // cipher suites
		return helloOther
	}
	if p, ok = skipVector(p, 1); !ok { // compression methods
		return helloOther
	}
	if len(p) == 0 {
		return helloPlain // no extensions at all
	}
	if len(p) < 2 || int(binary.BigEndian.Uint16(p)) != len(p)-2 {
		return helloOther
	}
	for p = p[2:]; len(p) > 0; {
		if len(p) < 4 {
			return helloOther
		}
		typ, n := binary.BigEndian.Uint16(p), int(binary.BigEndian.Uint16(p[2:]))
		if typ == extECH {
			return helloECH
		}
		if len(p) < 4+n {
			return helloOther
		}
		p = p[4+n:]
	}
	return helloPlain
}

// skipVector skips a vector whose length takes lenBytes bytes.
func skipVector(p []byte, lenBytes int) ([]byte, bool) {
	if len(p) < lenBytes {
		return nil, false
	}
	n := int(p[0])
	if lenBytes == 2 {
		n = int(binary.BigEndian.Uint16(p))
	}
	if len(p) < lenBytes+n {
		return nil, false
	}
	return p[lenBytes+n:], true
}
