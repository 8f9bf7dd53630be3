package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// A client can send its first ClientHello without ECH, get a
// HelloRetryRequest (by offering no key share the server takes) and put
// ECH in its second ClientHello, which is in the clear too. RFC 9849
// (section 7.1.1) has a server decrypt ECH in a second ClientHello only if
// the first one had it, but a server that does otherwise would route the
// connection by the hidden name. So after the first ClientHello the
// forwarder goes on reading what the client sends while a ClientHello in
// the clear may still come, and judges every one like the first:
//
//   - Handshake records are passed on once whole and looked at; the other
//     records (change_cipher_spec, alerts, application_data) as they come.
//     No record is held longer than helloTimeout.
//   - Handshake messages are followed across records. A ClientHello's
//     extensions are walked record by record: the record that shows one
//     hidesName refuses closes the connection and is not passed on, nor
//     is anything after it. (A server cannot act on the part of a hello
//     that went before.)
//   - A handshake message of another type ends the looking: a server that
//     sent a HelloRetryRequest takes nothing but a ClientHello next, and
//     in TLS 1.2 (where it is the client's key exchange or certificate)
//     no ClientHello comes in the clear after it.
//   - So does the first record that is not TLS: a server fails there too.
//   - Otherwise the looking ends once watchBudget bytes that are not a
//     ClientHello's have been passed on. Application data does not end
//     it: a server that rejects 0-RTT skips the client's early data, up to
//     its limit, while it waits for the second ClientHello (BoringSSL,
//     which also discards change_cipher_spec records and up to 4 warning
//     alerts there; OpenSSL likewise). Nor does a TLS 1.2 Finished, which
//     is encrypted in a handshake record and, when its first byte happens
//     to be 1, looks like the start of a long ClientHello: like any
//     record it is passed on once whole, and what follows it as it comes.
//
// From then on the relay splices, as it does from the start in the other
// direction.

const (
	// watchBudget: once this many bytes after the first ClientHello that
	// are not part of a later one have been passed on, the rest is
	// spliced unread. Four times what BoringSSL skips of rejected early
	// data (16 KiB) and OpenSSL by default (recv_max_early_data).
	watchBudget = 64 << 10
	// maxRecord is the largest record body a server takes: 2^14 bytes
	// of plaintext and what encryption adds (2048 at most, RFC 5246).
	maxRecord = 1<<14 + 2048
	// bigBuf is the watch's buffer once a handshake record does not fit
	// in a helloStart one, or a read fills one: an upload then moves in
	// reads of up to watchBudget, not helloStart (on the machines the
	// forwarder runs on, each wake-up costs more than the bytes).
	bigBuf = watchBudget
)

type watchVerdict int

const (
	// watchOn: pass the first n bytes on, keep the rest (a record not yet
	// whole) and read on.
	watchOn watchVerdict = iota
	// watchEnd: pass everything on and splice from here.
	watchEnd
	// watchRefused: a ClientHello to refuse; close without passing on
	// anything more.
	watchRefused
)

// watch follows the records a client sends after its first ClientHello,
// which readHello has judged, and the handshake messages in them.
type watch struct {
	// left is what is still to come of a record that is passed on as it
	// comes (any but a handshake record); 0 at a record boundary.
	left int
	// hdr holds the first nhdr bytes of the next handshake message's
	// header; inMsg says the header is whole and msgLeft bytes of the
	// message's body are still to come.
	hdr     [handshakeHeader]byte
	nhdr    int
	inMsg   bool
	msgLeft int
	// first: the message being read is the first ClientHello.
	first bool
	// hello is set while the message being read is a later ClientHello.
	hello *laterHello
	// others counts the bytes passed on after the first ClientHello that
	// are not a later ClientHello's.
	others int
	// refused is the extension type that got a ClientHello refused, or
	// 0 when the ClientHello was larger than maxHello.
	refused uint16
}

// laterHello is a ClientHello after the first: its body so far and the
// length its header declared.
type laterHello struct {
	body  []byte
	total int
	scan  helloScan
}

func newWatch() *watch { return &watch{first: true} }

// scan looks at b, what the client sent that is not passed on yet, which
// starts at a record boundary or inside a record that is passed on as it
// comes.
func (w *watch) scan(b []byte) (int, watchVerdict) {
	n := 0
	for {
		if w.left > 0 {
			k := min(w.left, len(b)-n)
			w.left -= k
			n += k
			w.count(k)
			if w.left > 0 {
				return n, watchOn
			}
		}
		if w.others >= watchBudget {
			return n, watchEnd
		}
		rest := b[n:]
		if len(rest) == 0 {
			return n, watchOn
		}
		if !isRecordType(rest[0]) || len(rest) >= 2 && rest[1] != 3 {
			return n, watchEnd
		}
		if len(rest) < recordHeader {
			return n, watchOn
		}
		size := int(rest[3])<<8 | int(rest[4])
		if size > maxRecord {
			return n, watchEnd
		}
		if rest[0] != recordHandshake {
			n += recordHeader
			w.count(recordHeader)
			w.left = size
			continue
		}
		if len(rest) < recordHeader+size {
			return n, watchOn
		}
		if v := w.handshake(rest[recordHeader : recordHeader+size]); v != watchOn {
			return n, v
		}
		n += recordHeader + size
		w.count(recordHeader)
	}
}

// isRecordType says whether t is one of the record types a client sends:
// change_cipher_spec, alert, handshake, application_data.
func isRecordType(t byte) bool { return t >= 0x14 && t <= 0x17 }

// count adds k bytes passed on that are not a later ClientHello's.
func (w *watch) count(k int) {
	if !w.first {
		w.others += k
	}
}

// handshake takes the body of a handshake record: the next bytes of the
// handshake messages.
func (w *watch) handshake(p []byte) watchVerdict {
	for {
		if !w.inMsg {
			if len(p) == 0 {
				break
			}
			k := copy(w.hdr[w.nhdr:], p)
			w.nhdr += k
			p = p[k:]
			if !w.first && w.hdr[0] != typeClientHello {
				return watchEnd
			}
			if w.nhdr < handshakeHeader {
				break
			}
			w.nhdr = 0
			w.inMsg = true
			w.msgLeft = handshakeLen(w.hdr[:]) - handshakeHeader
			if !w.first {
				w.hello = &laterHello{total: w.msgLeft}
			}
		}
		k := min(len(p), w.msgLeft)
		switch {
		case w.hello != nil:
			if len(w.hello.body)+k > maxHello {
				w.refused = 0
				return watchRefused
			}
			w.hello.body = append(w.hello.body, p[:k]...)
		case !w.first:
			w.others += k
		}
		p = p[k:]
		w.msgLeft -= k
		if w.msgLeft > 0 {
			break
		}
		w.inMsg = false
		w.first = false
		if w.hello != nil {
			if v := w.judge(); v != watchOn {
				return v
			}
			w.hello = nil
		}
	}
	if w.hello != nil {
		return w.judge()
	}
	return watchOn
}

// judge walks the later ClientHello as far as it has come.
func (w *watch) judge() watchVerdict {
	h := w.hello
	v, typ := h.scan.scan(h.body, h.total)
	switch v {
	case helloECH:
		w.refused = typ
		return watchRefused
	case helloOther:
		// No server takes this for a ClientHello; the rest of the
		// message is passed on as it comes.
		w.hello = nil
	}
	return watchOn
}

// watchClient passes on what the client sends after its first
// ClientHello, which h holds with whatever came after it, looking at it
// as watch says, then splices the rest. While it holds nothing, its
// buffer is back in its pool: a quiet client costs none.
func watchClient(l *listener, dst relayConn, client *net.TCPConn, h *helloBuf, abort func()) {
	defer func() { h.release() }()
	u, err := newUserIO(dst, client)
	if err != nil {
		abort()
		return
	}
	w := newWatch()
	holding := false // whether h holds part of a record, under a deadline
	pool := &helloBufs
	for {
		var b []byte
		if h != nil {
			b = h.b
		}
		n, v := w.scan(b)
		switch v {
		case watchRefused:
			// What came before the record that shows the extension is
			// passed on, so that where a relay stops does not depend
			// on how the client's bytes were read.
			if n > 0 {
				_ = u.write(b[:n])
			}
			if w.refused == 0 {
				fmt.Fprintf(l.log, "forwarder: refused a later TLS ClientHello of more than %d KiB on %s\n", maxHello>>10, l.ln.Addr())
			} else {
				fmt.Fprintf(l.log, "forwarder: refused a later TLS ClientHello with %s (0x%04x) on %s\n", extName(w.refused), w.refused, l.ln.Addr())
			}
			_ = client.SetLinger(0)
			abort()
			return
		case watchEnd:
			if holding {
				_ = client.SetReadDeadline(time.Time{})
			}
			if len(b) > 0 {
				if err := u.write(b); err != nil {
					abort()
					return
				}
			}
			h.release()
			h = nil
			pipe(dst, client, abort)
			return
		}
		if n > 0 {
			if err := u.write(b[:n]); err != nil {
				abort()
				return
			}
			b = b[:copy(b, b[n:])]
		}
		switch {
		case len(b) > 0 && (n > 0 || !holding):
			// A record started: it has helloTimeout to come whole.
			_ = client.SetReadDeadline(time.Now().Add(helloTimeout))
			holding = true
		case len(b) == 0 && holding:
			_ = client.SetReadDeadline(time.Time{})
			holding = false
		}
		switch {
		case len(b) == 0:
			h.release()
			h = nil
		case len(b) == cap(b):
			// A handshake record larger than b, held whole.
			g := bigBufs.Get().(*helloBuf)
			g.b = g.b[:copy(g.b[:len(b)], b)]
			h.release()
			h = g
		default:
			h.b = b
		}
		m, free, err := u.readInto(&h, pool)
		if h != nil {
			h.b = h.b[:len(h.b)+m]
		}
		if m == free && m > 0 {
			pool = &bigBufs // an upload
		}
		if err != nil {
			switch {
			case err == io.EOF:
				// What is held goes on as it is, as it would have
				// without the forwarder: a record cut short.
				if h != nil && len(h.b) > 0 && u.write(h.b) != nil {
					abort()
					return
				}
				_ = dst.CloseWrite()
			case errors.Is(err, os.ErrDeadlineExceeded):
				// A record, a ClientHello's perhaps, too slow to come
				// whole: closed, as a first one would be.
				_ = client.SetLinger(0)
				abort()
			default:
				abort()
			}
			return
		}
	}
}
