package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The fake Responses API: enough of OpenAI's /v1/responses for the real
// `codex exec` (recipes/codex) to print an answer, streamed as server-sent
// events the way the real API streams them. Like the Messages API, every
// request logs its credential headers first (logCredentials).

// responsesAnswer is the text every answer holds.
const responsesAnswer = "Hello from the fake Responses API."

func isResponsesPath(path string) bool {
	return path == "/v1/responses" || strings.HasPrefix(path, "/v1/responses/")
}

// sse writes server-sent events, each flushed as it is written, so that a
// client can tell a stream passed on as it came from one buffered to its end.
type sse struct {
	w       http.ResponseWriter
	flusher http.Flusher
	n       int
}

func newSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	f, _ := w.(http.Flusher)
	return &sse{w: w, flusher: f}
}

// send writes one event; an empty name writes a data line alone.
func (s *sse) send(event string, data any) {
	b, _ := json.Marshal(data)
	if event != "" {
		fmt.Fprintf(s.w, "event: %s\n", event)
	}
	fmt.Fprintf(s.w, "data: %s\n\n", b)
	if s.flusher != nil {
		s.flusher.Flush()
	}
	s.n++
}

// pause waits as long as the request's pauseHeader asks (at most 30 s);
// false when the client went away.
func pause(r *http.Request) bool {
	ms, _ := strconv.Atoi(r.Header.Get(pauseHeader))
	if ms <= 0 {
		return true
	}
	select {
	case <-time.After(time.Duration(min(ms, 30000)) * time.Millisecond):
		return true
	case <-r.Context().Done():
		return false
	}
}

func (s *tlsServer) responses(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		// Codex first asks for a WebSocket here. The credential proxy
		// does not carry the upgrade, so this arrives as a plain GET; the
		// answer makes Codex fall back to HTTPS at once (a 404 would make
		// it retry five times first).
		s.log.printf("api responses websocket-refused path=%q upgrade=%q", r.URL.Path, r.Header.Get("Upgrade"))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUpgradeRequired)
		fmt.Fprint(w, `{"error":{"message":"upgrade required","type":"invalid_request_error"}}`)
		return
	}
	req := s.readModelRequest(r, "responses", "gpt-fake")
	w.Header().Set("X-Request-Id", "req_fake")
	if r.Method != http.MethodPost || r.URL.Path != "/v1/responses" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error":{"message":"not found","type":"invalid_request_error"}}`)
		return
	}
	words := strings.SplitAfter(responsesAnswer, " ")
	resp := map[string]any{"id": "resp_fake", "object": "response", "created_at": time.Now().Unix(), "model": req.Model, "status": "in_progress", "output": []any{}}
	item := map[string]any{"type": "message", "id": "msg_fake", "role": "assistant", "status": "in_progress", "content": []any{}}
	done := map[string]any{"type": "message", "id": "msg_fake", "role": "assistant", "status": "completed",
		"content": []any{map[string]any{"type": "output_text", "text": responsesAnswer, "annotations": []any{}}}}
	usage := map[string]any{"input_tokens": 12, "input_tokens_details": map[string]any{"cached_tokens": 0},
		"output_tokens": len(words), "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": 12 + len(words)}
	completed := func() map[string]any {
		c := map[string]any{}
		for k, v := range resp {
			c[k] = v
		}
		c["status"], c["output"], c["usage"] = "completed", []any{done}, usage
		return c
	}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(completed())
		return
	}
	ev := newSSE(w)
	ev.send("response.created", map[string]any{"type": "response.created", "response": resp})
	ev.send("response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": 0, "item": item})
	for i, word := range words {
		ev.send("response.output_text.delta", map[string]any{"type": "response.output_text.delta", "item_id": "msg_fake", "output_index": 0, "content_index": 0, "delta": word})
		if i == 0 && !pause(r) {
			return
		}
	}
	ev.send("response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": 0, "item": done})
	ev.send("response.completed", map[string]any{"type": "response.completed", "response": completed()})
	s.log.printf("api responses streamed events=%d", ev.n)
}
