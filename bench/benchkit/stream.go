package main

import (
	"bytes"
	"crypto/subtle"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The stream part's upstream: a streamed answer shaped like the Messages
// API's (text/event-stream, message_start, content_block_delta events,
// message_stop), of a size the client asks for, so that the time to its
// first byte and its throughput can be measured through the router's
// credential proxy and straight over TLS.

// streamCheck is what the stream handler verifies: a request for apiHost
// (the name the credential proxy sends as Host) must carry the user's key
// in x-api-key and no Authorization (the proxy removes the agent's); a
// request for any other name, the direct path, must carry neither.
type streamCheck struct {
	apiHost string
	apiKey  string
	log     io.Writer // one line per stream request; nil: none
	mu      sync.Mutex
	conns   map[string]*connInfo // by remote address, while open
}

// connInfo is what the log says of a request's connection: whether the
// request is its first (so the client made a connection for it), and for
// a first request, how long after the TCP accept it arrived (the client's
// TLS handshake and the request itself).
type connInfo struct {
	accepted time.Time
	requests int
}

// connState is the server's ConnState hook.
func (c *streamCheck) connState(conn net.Conn, state http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch state {
	case http.StateNew:
		if c.conns == nil {
			c.conns = map[string]*connInfo{}
		}
		c.conns[conn.RemoteAddr().String()] = &connInfo{accepted: time.Now()}
	case http.StateClosed, http.StateHijacked:
		delete(c.conns, conn.RemoteAddr().String())
	}
}

// connNote describes r's connection for the log: "conn_req=N" and, for
// its first request, "setup_ms=" the time since the accept; "resumed=" says
// whether its TLS handshake resumed an earlier session.
func (c *streamCheck) connNote(r *http.Request) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	note := "conn_req=?"
	if ci := c.conns[r.RemoteAddr]; ci != nil {
		ci.requests++
		note = "conn_req=" + strconv.Itoa(ci.requests)
		if ci.requests == 1 {
			note += fmt.Sprintf(" setup_ms=%.3f", float64(time.Since(ci.accepted))/1e6)
		}
	}
	if r.TLS != nil {
		note += " resumed=" + strconv.FormatBool(r.TLS.DidResume)
	}
	return note
}

// maxStreamBytes bounds one answer: a typo must not stream for an hour.
const maxStreamBytes = 4 << 30

// streamEvent renders one server-sent event.
func streamEvent(name, data string) []byte {
	return []byte("event: " + name + "\ndata: " + data + "\n\n")
}

// streamHead and streamTail are the events around the text deltas, as the
// Messages API sends them.
var (
	streamHead = bytes.Join([][]byte{
		streamEvent("message_start", `{"type":"message_start","message":{"id":"msg_bench","type":"message","role":"assistant","model":"bench","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}}`),
		streamEvent("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
		streamEvent("ping", `{"type": "ping"}`),
	}, nil)
	streamTail = bytes.Join([][]byte{
		streamEvent("content_block_stop", `{"type":"content_block_stop","index":0}`),
		streamEvent("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":1}}`),
		streamEvent("message_stop", `{"type":"message_stop"}`),
	}, nil)
)

// deltaEvent is one content_block_delta event of size bytes in all (or
// the smallest one, when size is smaller than that), its text lowercase
// letters.
func deltaEvent(size int) []byte {
	const pre, post = `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`, `"}}`
	overhead := len(streamEvent("content_block_delta", pre+post))
	n := max(1, size-overhead)
	text := make([]byte, n)
	for i := range text {
		text[i] = 'a' + byte(i%26)
	}
	return streamEvent("content_block_delta", pre+string(text)+post)
}

// streamBody lays out an answer of total bytes or a little more: the
// head, count delta events of event bytes each (at least one), the tail.
// The handler writes the deltas one by one, flushing each as the API does.
func streamBody(total int64, event int) (delta []byte, count int64) {
	delta = deltaEvent(event)
	rest := total - int64(len(streamHead)) - int64(len(streamTail))
	if rest > 0 {
		count = (rest + int64(len(delta)) - 1) / int64(len(delta))
	}
	return delta, max(count, 1)
}

// stream serves POST /v1/messages?bytes=N&event=M: the head and the first
// delta at once (the first byte), then one delta event of M bytes after
// another, each flushed, until N bytes are sent, then the tail.
func (c *streamCheck) stream(w http.ResponseWriter, r *http.Request) {
	conn := c.connNote(r)
	// The whole body, so that a large one (the stream part sends 1 MiB)
	// leaves the connection fit to keep.
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 64<<20))
	q := r.URL.Query()
	total, err1 := strconv.ParseInt(q.Get("bytes"), 10, 64)
	event, err2 := strconv.Atoi(q.Get("event"))
	if err1 != nil || err2 != nil || total < 0 || total > maxStreamBytes || event < 1 || event > 1<<20 {
		http.Error(w, "want ?bytes=N&event=M (N up to 4 GiB, M up to 1 MiB)", http.StatusBadRequest)
		return
	}
	verdict := c.verdict(r)
	c.logf("benchkit: stream host=%s key=%s bytes=%d event=%d %s", hostOnly(r.Host), verdict, total, event, conn)
	if verdict != "ok" && verdict != "none" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"type":"error","error":{"type":"authentication_error","message":"`+verdict+`"}}`)
		return
	}
	delta, deltas := streamBody(total, event)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Request-Id", "req_bench")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	write := func(b []byte) bool {
		if _, err := w.Write(b); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	// The head goes out with the headers, in one flush: that is the
	// first byte the client times.
	if _, err := w.Write(streamHead); err != nil {
		return
	}
	for range deltas {
		if !write(delta) {
			return
		}
	}
	write(streamTail)
}

// verdict says whether r carries the credential it should: "ok" (the
// user's key, to the API host), "none" (no credential, to another name),
// or what is wrong.
func (c *streamCheck) verdict(r *http.Request) string {
	key, auth := r.Header.Get("X-Api-Key"), r.Header.Get("Authorization")
	if c.apiHost == "" || !strings.EqualFold(hostOnly(r.Host), c.apiHost) {
		if key != "" || auth != "" {
			return "unexpected-credential"
		}
		return "none"
	}
	switch {
	case key == "":
		return "missing"
	case subtle.ConstantTimeCompare([]byte(key), []byte(c.apiKey)) != 1:
		return "wrong"
	case auth != "":
		return "agent-authorization-passed"
	}
	return "ok"
}

func (c *streamCheck) logf(format string, args ...any) {
	if c.log == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(c.log, format+"\n", args...)
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}
