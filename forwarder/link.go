package main

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"
)

// The link key (LINK_KEY) ties a cluster's router to its own agent pod. In
// a cluster the router's ports are on a pod address that every pod the
// network lets through can reach, and behind port 443 the router adds the
// user's API keys: NetworkPolicy alone would decide whose requests carry
// them. So the agent pod's forwarder opens each TCP connection to the
// router with a preamble holding a key from a Secret that only it and the
// router's front take (in their environment), and the front drops every
// connection that does not start with it. The agent never holds the key
// (it is in the forwarder's container alone). It shares the forwarder's
// network namespace, though, so it could relay others' connections
// through it: the agent pod's ingress policy is what stops that
// (SECURITY.md, On Kubernetes).

// linkPrefix starts the preamble: the key in hex and a newline follow.
const linkPrefix = "agent-sandbox-link "

// linkKeyHex is the key's length in hex digits (32 bytes).
const linkKeyHex = 64

// linkTimeout bounds how long the front waits for a client's preamble.
const linkTimeout = 5 * time.Second

// maxPendingLinks bounds the connections a front holds while it waits for
// their preamble: past it, a new one is closed at once, so that a flood of
// silent connections (from any pod the network lets through) costs the
// router a bounded number of descriptors and the agent's own connections
// still get through as the waiting ones time out.
const maxPendingLinks = 256

var pendingLinks = make(chan struct{}, maxPendingLinks)

// refusals counts the front's refusals: the first ten are logged each,
// then every power of two, so that a flood cannot fill the router's log.
var refusals atomic.Int64

func logRefusal(l *listener, format string, args ...any) {
	n := refusals.Add(1)
	if n <= 10 || n&(n-1) == 0 {
		fmt.Fprintf(l.log, "forwarder: "+format+" (refusal %d)\n", append(args, n)...)
	}
}

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
	select {
	case pendingLinks <- struct{}{}:
		defer func() { <-pendingLinks }()
	default:
		logRefusal(l, "refused a connection from %s on %s: %d connections already wait for their link key", client.RemoteAddr(), l.ln.Addr(), maxPendingLinks)
		_ = client.Close()
		return false
	}
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
	logRefusal(l, "refused a connection from %s on %s: no link key", client.RemoteAddr(), l.ln.Addr())
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
