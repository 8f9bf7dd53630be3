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
// on the pairs that carry TLS, the first one before the router is dialled
// and any later one in the clear (after a HelloRetryRequest) before it is
// passed on (see watch.go); other bytes are passed on unchanged, and nginx
// judges them as before.

const (
	// extECH is the encrypted_client_hello extension's type, in RFC 9849
	// and in drafts -13 to -25 before it.
	extECH = 0xfe0d
	// extECHDraft is the type drafts -07 and -08 gave it; each later
	// draft up to -12 took the next one (0xfe09 to 0xfe0c). Clients no
	// longer send them, but a server that still speaks a draft would
	// decrypt them as it did.
	extECHDraft = 0xfe08
	// extESNI is encrypted_server_name, ECH's predecessor (ESNI drafts
	// -01 to -05), which encrypted the SNI alone.
	extESNI = 0xffce
)

// hidesName says whether an extension of type typ asks the server for a
// name or a hello it cannot be seen in: any of the types above. No
// client sends the older ones any more, and none of them is assigned to
// anything else, so refusing them costs nothing.
func hidesName(typ uint16) bool {
	if mutated("ech-refusal") {
		// hack/mutation-check: no ClientHello is refused for ECH.
		return false
	}
	return typ >= extECHDraft && typ <= extECH || typ == extESNI
}

// extName is how a refused extension type is logged.
func extName(typ uint16) string {
	switch {
	case typ == extECH:
		return "encrypted_client_hello"
	case typ == extESNI:
		return "ESNI's encrypted_server_name"
	default:
		return "a draft's encrypted_client_hello"
	}
}

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
	// helloECH: a ClientHello that carries encrypted_client_hello, or
	// another extension hidesName refuses.
	helloECH
	// helloOther: not a ClientHello, malformed, or larger than maxHello:
	// passed on as it is, for nginx to refuse.
	helloOther
)

// helloBuf holds the bytes read from a client before its relay starts,
// and those the watch holds after that.
type helloBuf struct{ b []byte }

var (
	helloBufs = sync.Pool{New: func() any { return &helloBuf{b: make([]byte, 0, helloStart)} }}
	bigBufs   = sync.Pool{New: func() any { return &helloBuf{b: make([]byte, 0, bigBuf)} }}
)

// release gives the buffer back for the next connection; it may be called
// on nil, and must not be called again on a buffer it has given back.
func (h *helloBuf) release() {
	if h == nil || h.b == nil {
		return
	}
	switch cap(h.b) {
	case helloStart:
		h.b = h.b[:0]
		helloBufs.Put(h)
	case bigBuf:
		h.b = h.b[:0]
		bigBufs.Put(h)
	default:
		h.b = nil
	}
}

// readHello reads what the client sends first until judgeHello can tell
// what it is, maxHello bytes have come, the client half-closes (what came
// is passed on) or helloTimeout passes. For helloECH it also returns the
// extension's type.
func readHello(c *net.TCPConn) (*helloBuf, helloVerdict, uint16) {
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
		if v, typ := judgeHello(h.b); v != helloIncomplete {
			return h, v, typ
		}
		if len(h.b) == maxHello {
			return h, helloOther, 0
		}
		if err != nil {
			if err == io.EOF && len(h.b) > 0 {
				// A client that half-closed after part of a hello gets
				// what it would have got without the forwarder looking.
				return h, helloOther, 0
			}
			// Too slow, or a failed connection.
			return h, helloIncomplete, 0
		}
	}
}

// judgeHello says what b, the first bytes of a connection, holds: the
// first handshake message is taken from its records, which may split it
// anywhere, and a ClientHello's extensions are walked for ECH. For
// helloECH it also returns the extension's type.
func judgeHello(b []byte) (helloVerdict, uint16) {
	msg, v := firstHandshake(b)
	if msg == nil {
		return v, 0
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

// scanClientHello walks a whole ClientHello body (see helloScan).
func scanClientHello(p []byte) (helloVerdict, uint16) {
	var s helloScan
	return s.scan(p, len(p))
}

// helloScan walks a ClientHello body to its extensions: version, random,
// session id, cipher suites, compression methods, then the extensions
// list, which must fill the rest exactly (servers refuse it otherwise),
// looking for a type hidesName refuses. The body may come in parts: scan
// is given what has come so far and the length the message declared, and
// says helloIncomplete while nothing is found in that (helloPlain once
// only the last extension's data is missing); the next scan starts at the
// first extension not yet walked.
type helloScan struct {
	// next is where the next extension's header starts, once the fields
	// before the extensions have been walked; 0 before.
	next int
}

// scan walks p, the first bytes of a ClientHello body of total bytes.
// helloOther means the body cannot be a ClientHello whatever the rest
// is; helloECH comes with the extension's type.
func (s *helloScan) scan(p []byte, total int) (helloVerdict, uint16) {
	off := s.next
	if off == 0 {
		const versionAndRandom = 2 + 32
		off = versionAndRandom
		// Session id, cipher suites, compression methods.
		for _, lenBytes := range [...]int{1, 2, 1} {
			if end := off + lenBytes; end > len(p) || end > total {
				return short(end, total), 0
			}
			n := int(p[off])
			if lenBytes == 2 {
				n = int(binary.BigEndian.Uint16(p[off:]))
			}
			off += lenBytes + n
		}
		if off == total {
			return helloPlain, 0 // no extensions at all
		}
		if end := off + 2; end > len(p) || end > total {
			return short(end, total), 0
		}
		if int(binary.BigEndian.Uint16(p[off:])) != total-off-2 {
			return helloOther, 0
		}
		off += 2
		s.next = off
	}
	for off < total {
		if total-off < 4 {
			return helloOther, 0
		}
		if off+4 > len(p) {
			// The header is not all here yet; its type may be.
			s.next = off
			if off+2 <= len(p) && hidesName(binary.BigEndian.Uint16(p[off:])) {
				return helloECH, binary.BigEndian.Uint16(p[off:])
			}
			return helloIncomplete, 0
		}
		h := p[off : off+4]
		typ, n := binary.BigEndian.Uint16(h), int(binary.BigEndian.Uint16(h[2:]))
		if hidesName(typ) {
			return helloECH, typ
		}
		if off+4+n > total {
			return helloOther, 0
		}
		off += 4 + n
	}
	// The last extension's data may still be to come: no more types.
	s.next = off
	return helloPlain, 0
}

// short is what a body of total bytes is when the first end of them are
// needed but not all are there: helloOther when it is shorter than that,
// helloIncomplete when they are still to come.
func short(end, total int) helloVerdict {
	if end > total {
		return helloOther
	}
	return helloIncomplete
}
