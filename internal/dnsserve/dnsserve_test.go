package dnsserve

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
)

// echo answers with the message reversed and drops "drop".
func echo(msg []byte, transport string, _ net.Addr) []byte {
	if string(msg) == "drop" {
		return nil
	}
	out := []byte(transport + ":")
	for i := len(msg) - 1; i >= 0; i-- {
		out = append(out, msg[i])
	}
	return out
}

func TestUDP(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go UDP(pc, echo)
	c, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "udp:cba" {
		t.Fatalf("reply %q, %v; want udp:cba", buf[:n], err)
	}
}

func TestTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cut := make(chan []byte, 1)
	go TCP(l, 5*time.Second, echo, func(_ net.Addr, partial []byte) { cut <- partial })
	dial := func() net.Conn {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		return c
	}
	frame := func(m string) []byte { return append(binary.BigEndian.AppendUint16(nil, uint16(len(m))), m...) }

	c := dial()
	defer c.Close()
	// Two messages on one connection: each gets its framed reply.
	for _, m := range []string{"abc", "xy"} {
		if _, err := c.Write(frame(m)); err != nil {
			t.Fatal(err)
		}
		var size [2]byte
		if _, err := io.ReadFull(c, size[:]); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, binary.BigEndian.Uint16(size[:]))
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
		want := echo([]byte(m), "tcp", nil)
		if !bytes.Equal(got, want) {
			t.Errorf("reply %q, want %q", got, want)
		}
	}
	// A dropped message ends the connection.
	if _, err := c.Write(frame("drop")); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("after a dropped message read %d bytes, %v; want EOF", n, err)
	}

	// A message cut short is reported with what arrived.
	c2 := dial()
	if _, err := c2.Write(append(binary.BigEndian.AppendUint16(nil, 10), "abc"...)); err != nil {
		t.Fatal(err)
	}
	c2.(*net.TCPConn).CloseWrite()
	select {
	case p := <-cut:
		if string(p) != "abc" {
			t.Errorf("truncated message %q, want abc", p)
		}
	case <-time.After(5 * time.Second):
		t.Error("a truncated message was not reported")
	}
	c2.Close()
}
