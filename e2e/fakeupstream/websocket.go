package main

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// A minimal RFC 6455 echo at /ws on every name but git's: each text or
// binary message comes back in one unmasked frame of its opcode, a ping
// gets its pong and a close its close. Over HTTP/1.1 only (Upgrade); an
// HTTP/2 request gets 426.

const (
	wsPath       = "/ws"
	wsGUID       = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
	wsMessageMax = 16 << 20
	wsIdle       = 2 * time.Minute

	wsContinuation = 0x0
	wsText         = 0x1
	wsBinary       = 0x2
	wsClose        = 0x8
	wsPing         = 0x9
	wsPong         = 0xa
)

// wsAccept is the Sec-WebSocket-Accept for a Sec-WebSocket-Key.
func wsAccept(key string) string {
	h := sha1.Sum([]byte(key + wsGUID))
	return base64.StdEncoding.EncodeToString(h[:])
}

// hasToken says whether a comma-separated header holds token, in any case.
func hasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

func (s *tlsServer) websocket(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor != 1 || !hasToken(r.Header, "Connection", "upgrade") || !hasToken(r.Header, "Upgrade", "websocket") {
		s.log.printf("websocket refused host=%q path=%q proto=%s reason=%q", r.Host, r.URL.RequestURI(), r.Proto, "not an HTTP/1.1 upgrade")
		w.Header().Set("Upgrade", "websocket")
		w.Header().Set("Connection", "Upgrade")
		http.Error(w, "websocket: send an HTTP/1.1 Upgrade: websocket request", http.StatusUpgradeRequired)
		return
	}
	key := strings.TrimSpace(r.Header.Get("Sec-WebSocket-Key"))
	if r.Method != http.MethodGet || key == "" || r.Header.Get("Sec-WebSocket-Version") != "13" {
		s.log.printf("websocket refused host=%q path=%q proto=%s reason=%q", r.Host, r.URL.RequestURI(), r.Proto, "bad handshake")
		w.Header().Set("Sec-WebSocket-Version", "13")
		http.Error(w, "websocket: want GET with Sec-WebSocket-Key and Sec-WebSocket-Version: 13", http.StatusBadRequest)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "websocket: cannot take the connection over", http.StatusInternalServerError)
		return
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		s.log.printf("websocket hijack-error host=%q err=%q", r.Host, err.Error())
		return
	}
	defer conn.Close()
	s.log.printf("websocket open host=%q path=%q", r.Host, r.URL.RequestURI())
	resp := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + wsAccept(key) + "\r\n"
	if protos := r.Header.Values("Sec-WebSocket-Protocol"); len(protos) > 0 {
		// Clients that ask for a subprotocol fail without one: take the first.
		if p := strings.TrimSpace(strings.Split(protos[0], ",")[0]); p != "" {
			resp += "Sec-WebSocket-Protocol: " + p + "\r\n"
		}
	}
	_ = conn.SetDeadline(time.Now().Add(wsIdle))
	if _, err := brw.WriteString(resp + "\r\n"); err != nil || brw.Flush() != nil {
		return
	}
	code, err := s.wsEcho(r.Host, brw, func() { _ = conn.SetDeadline(time.Now().Add(wsIdle)) })
	reason := ""
	if err != nil {
		reason = fmt.Sprintf(" err=%q", err.Error())
	}
	s.log.printf("websocket close host=%q code=%d%s", r.Host, code, reason)
}

// wsEcho answers frames until a close, an error or a protocol violation;
// it returns the close code it sent.
func (s *tlsServer) wsEcho(host string, brw *bufio.ReadWriter, alive func()) (int, error) {
	var msg []byte
	var msgOp byte
	for {
		alive()
		fin, op, payload, err := wsReadFrame(brw.Reader, wsMessageMax-len(msg))
		if err != nil {
			var pe wsProtocolError
			if errors.As(err, &pe) {
				_ = wsWriteFrame(brw, wsClose, wsCloseBody(pe.code))
				return pe.code, err
			}
			return 0, err
		}
		switch op {
		case wsText, wsBinary, wsContinuation:
			if (op == wsContinuation) != (msgOp != 0) {
				_ = wsWriteFrame(brw, wsClose, wsCloseBody(1002))
				return 1002, errors.New("unexpected continuation or interleaved message")
			}
			if op != wsContinuation {
				msgOp = op
			}
			msg = append(msg, payload...)
			if !fin {
				continue
			}
			s.log.printf("websocket message host=%q data=%q", host, bound(string(msg), headersLogMax))
			if err := wsWriteFrame(brw, msgOp, msg); err != nil {
				return 0, err
			}
			msg, msgOp = nil, 0
		case wsPing:
			if err := wsWriteFrame(brw, wsPong, payload); err != nil {
				return 0, err
			}
		case wsPong:
		case wsClose:
			code := 1005
			body := []byte(nil)
			if len(payload) >= 2 {
				code = int(binary.BigEndian.Uint16(payload))
				body = payload[:2]
			}
			_ = wsWriteFrame(brw, wsClose, body)
			return code, nil
		default:
			_ = wsWriteFrame(brw, wsClose, wsCloseBody(1002))
			return 1002, fmt.Errorf("unknown opcode %#x", op)
		}
	}
}

type wsProtocolError struct {
	code int
	msg  string
}

func (e wsProtocolError) Error() string { return e.msg }

func wsCloseBody(code int) []byte { return binary.BigEndian.AppendUint16(nil, uint16(code)) }

// wsReadFrame reads one client frame, which must be masked, and unmasks it.
func wsReadFrame(r *bufio.Reader, limit int) (fin bool, op byte, payload []byte, err error) {
	var h [2]byte
	if _, err = io.ReadFull(r, h[:]); err != nil {
		return
	}
	fin, op = h[0]&0x80 != 0, h[0]&0x0f
	if h[0]&0x70 != 0 {
		return fin, op, nil, wsProtocolError{1002, "reserved bits set"}
	}
	if h[1]&0x80 == 0 {
		return fin, op, nil, wsProtocolError{1002, "client frame not masked"}
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err = io.ReadFull(r, b[:]); err != nil {
			return
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err = io.ReadFull(r, b[:]); err != nil {
			return
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if op >= 0x8 && (n > 125 || !fin) {
		return fin, op, nil, wsProtocolError{1002, "bad control frame"}
	}
	if n > uint64(limit) {
		return fin, op, nil, wsProtocolError{1009, fmt.Sprintf("message over %d bytes", wsMessageMax)}
	}
	var mask [4]byte
	if _, err = io.ReadFull(r, mask[:]); err != nil {
		return
	}
	payload = make([]byte, n)
	if _, err = io.ReadFull(r, payload); err != nil {
		return
	}
	for i := range payload {
		payload[i] ^= mask[i%4]
	}
	return fin, op, payload, nil
}

// wsWriteFrame writes one final, unmasked server frame.
func wsWriteFrame(w *bufio.ReadWriter, op byte, payload []byte) error {
	h := []byte{0x80 | op}
	switch n := len(payload); {
	case n < 126:
		h = append(h, byte(n))
	case n <= 0xffff:
		h = binary.BigEndian.AppendUint16(append(h, 126), uint16(n))
	default:
		h = binary.BigEndian.AppendUint64(append(h, 127), uint64(n))
	}
	if _, err := w.Write(h); err != nil {
		return err
	}
	if _, err := w.Write(payload); err != nil {
		return err
	}
	return w.Flush()
}
