package main

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// The link key (LINK_KEY) ties a cluster's router to its own agent pod. In
// a cluster the router's ports are on a pod address that every pod the
// network lets through can reach, and behind port 443 the router adds the
// user's API keys: NetworkPolicy alone would decide whose requests carry
// them. So the agent pod's forwarder opens each TCP connection to the
// router with a preamble holding a key from a Secret that only it and the
// router's front mount, and the front drops every connection that does not
// start with it. The agent never holds the key (it is in the forwarder's
// container alone), so nothing it leaks lets another pod in.

// linkPrefix starts the preamble: the key in hex and a newline follow.
const linkPrefix = "agent-sandbox-link "

// linkKeyHex is the key's length in hex digits (32 bytes).
const linkKeyHex = 64

// linkTimeout bounds how long the front waits for a client's preamble.
const linkTimeout = 5 * time.Second

// linkRefusal is what a client without the key reads before the front
// closes: a cluster's admin who points a pod at the router learns why.
const linkRefusal = "agent-sandbox: no link key: this port takes the sandbox's own forwarder alone\n"

// parseLinkKey checks LINK_KEY and returns the preamble that carries it.
func parseLinkKey(s string) ([]byte, error) {
	if len(s) != linkKeyHex {
		return nil, fmt.Errorf("LINK_KEY is %d characters: want the sandbox's link key, %d hex digits", len(s), linkKeyHex)
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return nil, errors.New("LINK_KEY is not lowercase hex: want the sandbox's link key, 64 hex digits")
		}
	}
	return []byte(linkPrefix + s + "\n"), nil
}

// linked gives every pair of an agent's forwarder that reaches the router
// over TCP the preamble to send first; a unix socket is the local
// router's, and a published pair takes the host's connections.
func linked(fs []forward, preamble []byte) []forward {
	for i := range fs {
		if preamble != nil && fs[i].socket == "" && !fs[i].published {
			fs[i].sendLink = preamble
		}
	}
	return fs
}

// checkLink reads a front's client's preamble. ok is false, and the client
// told and closed, when it does not carry the key: read byte by byte
// against the fixed prefix (a client that sends something else is refused
// at its first byte), then the key, compared in constant time.
func checkLink(l *listener, client net.Conn) (ok bool) {
	want := l.wantLink
	got := make([]byte, len(want))
	_ = client.SetReadDeadline(time.Now().Add(linkTimeout))
	n := 0
	for n < len(want) {
		end := len(want)
		if n < len(linkPrefix) {
			// The prefix is no secret: stop at its first wrong byte.
			end = len(linkPrefix)
		}
		m, err := client.Read(got[n:end])
		n += m
		if n <= len(linkPrefix) && string(got[:n]) != linkPrefix[:n] {
			break
		}
		if err != nil {
			if err != io.EOF {
				// Too slow, or gone: nothing to tell.
				_ = client.Close()
				return false
			}
			break
		}
	}
	_ = client.SetReadDeadline(time.Time{})
	// hack/mutation-check's front-any-link-key: any key passes.
	if n == len(want) && (subtle.ConstantTimeCompare(got, want) == 1 || (mutated("front-any-link-key") && string(got[:len(linkPrefix)]) == linkPrefix)) {
		return true
	}
	fmt.Fprintf(l.log, "forwarder: refused a connection from %s on %s: no link key\n", client.RemoteAddr(), l.ln.Addr())
	_, _ = io.WriteString(client, linkRefusal)
	// What the client sent past the refused byte is read, briefly, before
	// the close: closing with it unread would send a reset, which can
	// reach the client before it has read the refusal.
	if c, ok := client.(interface{ CloseWrite() error }); ok {
		_ = c.CloseWrite()
		_ = client.SetReadDeadline(time.Now().Add(refusalDrain))
		_, _ = io.Copy(io.Discard, io.LimitReader(client, 64<<10))
	}
	_ = client.Close()
	return false
}

// refusalDrain bounds the wait for a refused client's last bytes.
const refusalDrain = time.Second
