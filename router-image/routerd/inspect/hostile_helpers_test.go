package inspect

// Helpers for the hostile review's tests (zz_hostile_*_test.go): a raw
// HTTP/2 client that sends what Go's own client refuses to, and a
// hand-built ClientHello with any SNI bytes.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Field is one header field, pseudo or regular, in the order sent.
type h2Field struct{ name, value string }

// h2Answer is what came back on stream 1.
type h2Answer struct {
	status string
	header map[string]string
	body   string
	reset  bool
}

// rawH2 does TLS with SNI sni (unverified: the name may be anything), then
// sends one HTTP/2 request made of fields exactly as given, and an optional
// body, and reads the answer.
func (e *env) rawH2(t *testing.T, sni string, fields []h2Field, body string) (h2Answer, error) {
	t.Helper()
	raw, err := e.dial(context.Background())
	if err != nil {
		return h2Answer{}, err
	}
	defer raw.Close()
	c := tls.Client(raw, &tls.Config{ServerName: sni, InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := c.Handshake(); err != nil {
		return h2Answer{}, fmt.Errorf("handshake: %w", err)
	}
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		return h2Answer{}, fmt.Errorf("ALPN %q", p)
	}
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		return h2Answer{}, err
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		return h2Answer{}, err
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range fields {
		_ = enc.WriteField(hpack.HeaderField{Name: f.name, Value: f.value})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: body == ""}); err != nil {
		return h2Answer{}, err
	}
	if body != "" {
		if err := fr.WriteData(1, true, []byte(body)); err != nil {
			return h2Answer{}, err
		}
	}
	ans := h2Answer{header: map[string]string{}}
	var b strings.Builder
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return ans, err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID != 1 {
				continue
			}
			for _, hf := range f.Fields {
				if hf.Name == ":status" {
					ans.status = hf.Value
				} else {
					ans.header[hf.Name] = hf.Value
				}
			}
			if f.StreamEnded() {
				ans.body = b.String()
				return ans, nil
			}
		case *http2.DataFrame:
			if f.StreamID != 1 {
				continue
			}
			b.Write(f.Data())
			if f.StreamEnded() {
				ans.body = b.String()
				return ans, nil
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == 1 {
				ans.reset = true
				return ans, nil
			}
		case *http2.GoAwayFrame:
			return ans, fmt.Errorf("GOAWAY %v", f.ErrCode)
		}
	}
}

// clientHello is a minimal TLS 1.3 ClientHello record with sni as the
// server_name, byte for byte (no trailing dot removed, nothing checked).
func clientHello(sni string) []byte {
	u16 := func(b []byte, v int) []byte { return binary.BigEndian.AppendUint16(b, uint16(v)) }
	ext := func(b []byte, typ int, body []byte) []byte {
		b = u16(b, typ)
		b = u16(b, len(body))
		return append(b, body...)
	}
	var exts []byte
	// server_name: a list of one host_name entry.
	name := u16([]byte{0}, len(sni))
	name = append(name, sni...)
	exts = ext(exts, 0, append(u16(nil, len(name)), name...))
	exts = ext(exts, 10, []byte{0, 2, 0, 0x1d})                // supported_groups: x25519
	exts = ext(exts, 13, []byte{0, 4, 0x04, 0x03, 0x08, 0x04}) // signature_algorithms
	exts = ext(exts, 43, []byte{2, 0x03, 0x04})                // supported_versions: TLS 1.3
	exts = ext(exts, 16, []byte{0, 3, 2, 'h', '2'})            // ALPN h2
	share := make([]byte, 32)
	_, _ = rand.Read(share)
	ks := u16(nil, 0x1d)
	ks = u16(ks, 32)
	ks = append(ks, share...)
	exts = ext(exts, 51, append(u16(nil, len(ks)), ks...)) // key_share

	var body []byte
	body = append(body, 0x03, 0x03)
	random := make([]byte, 32)
	_, _ = rand.Read(random)
	body = append(body, random...)
	body = append(body, 32)
	sid := make([]byte, 32)
	_, _ = rand.Read(sid)
	body = append(body, sid...)
	body = u16(body, 2)
	body = append(body, 0x13, 0x01) // TLS_AES_128_GCM_SHA256
	body = append(body, 1, 0)
	body = u16(body, len(exts))
	body = append(body, exts...)

	hs := []byte{1, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}
	hs = append(hs, body...)
	rec := []byte{0x16, 0x03, 0x01}
	rec = u16(rec, len(hs))
	return append(rec, hs...)
}

// firstRecordType sends a hand-built ClientHello for sni and returns the
// type of the first record the proxy answers with (0x16 handshake: a
// ServerHello; 0x15: an alert), or 0 if it closed without one.
func (e *env) firstRecordType(t *testing.T, sni string) byte {
	t.Helper()
	c, err := e.dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(clientHello(sni)); err != nil {
		t.Fatal(err)
	}
	var hdr [1]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return 0
	}
	return hdr[0]
}
