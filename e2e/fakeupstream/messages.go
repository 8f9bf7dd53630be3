package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The fake Messages API: enough of Anthropic's /v1/messages for the real
// `claude -p` to get an answer, streamed as server-sent events the way the
// real API streams them. Every request logs the credential headers it
// arrived with (the credential rows look for the user's key there, and for
// the agent's never), on every path of the TLS server.

// messagesAnswer is the text every answer holds.
const messagesAnswer = "Hello from the fake Messages API."

// pauseHeader makes a streamed answer wait this many milliseconds after
// its first text delta, so that a client can tell a stream passed on as it
// came from one buffered to its end.
const pauseHeader = "X-Fake-Pause-Ms"

// logCredentials logs the headers an API credential travels in.
func (s *tlsServer) logCredentials(r *http.Request) {
	s.log.printf("api request method=%s host=%q path=%q x-api-key=%q authorization=%q x-goog-api-key=%q anthropic-beta=%q from=%s",
		r.Method, r.Host, r.URL.RequestURI(), r.Header.Get("X-Api-Key"), r.Header.Get("Authorization"),
		r.Header.Get("X-Goog-Api-Key"), r.Header.Get("Anthropic-Beta"), r.RemoteAddr)
}

func isMessagesPath(path string) bool {
	return path == "/v1/messages" || strings.HasPrefix(path, "/v1/messages/")
}

func (s *tlsServer) messages(w http.ResponseWriter, r *http.Request) {
	req := s.readModelRequest(r, "messages", "claude-fake")
	w.Header().Set("Request-Id", "req_fake")
	if r.URL.Path == "/v1/messages/count_tokens" {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"input_tokens":12}`)
		return
	}
	if r.URL.Path != "/v1/messages" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"type":"error","error":{"type":"not_found_error","message":"not found"}}`)
		return
	}
	msg := map[string]any{
		"id": "msg_fake", "type": "message", "role": "assistant", "model": req.Model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": 12, "output_tokens": 1},
	}
	if !req.Stream {
		msg["content"] = []any{map[string]any{"type": "text", "text": messagesAnswer}}
		msg["stop_reason"] = "end_turn"
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(msg)
		return
	}
	pause, _ := strconv.Atoi(r.Header.Get(pauseHeader))
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	flusher, _ := w.(http.Flusher)
	send := func(event string, data any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	words := strings.SplitAfter(messagesAnswer, " ")
	send("message_start", map[string]any{"type": "message_start", "message": msg})
	send("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
	send("ping", map[string]any{"type": "ping"})
	for i, word := range words {
		send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": word}})
		if i == 0 && pause > 0 {
			select {
			case <-time.After(time.Duration(min(pause, 30000)) * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
	}
	send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil}, "usage": map[string]any{"output_tokens": len(words)}})
	send("message_stop", map[string]any{"type": "message_stop"})
	s.log.printf("api messages streamed events=%d", len(words)+6)
}

// modelRequest is what the fake reads of a Messages or Responses API call.
type modelRequest struct {
	Model  string `json:"model"`
	Stream bool   `json:"stream"`
	// Tools and MCPServers are logged, so that the API gate's rows see
	// what arrived of a tool it trimmed or refused.
	Tools []struct {
		Type           string   `json:"type"`
		AllowedDomains []string `json:"allowed_domains"`
	} `json:"tools"`
	MCPServers []any `json:"mcp_servers"`
}

// readModelRequest reads a call's body and logs it as "api KIND ...";
// a model left out is defaultModel.
func (s *tlsServer) readModelRequest(r *http.Request, kind, defaultModel string) modelRequest {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	var req modelRequest
	_ = json.Unmarshal(body, &req)
	if req.Model == "" {
		req.Model = defaultModel
	}
	var tools []string
	for _, t := range req.Tools {
		tool := t.Type
		if t.AllowedDomains != nil {
			tool += "[" + strings.Join(t.AllowedDomains, ",") + "]"
		}
		tools = append(tools, tool)
	}
	s.log.printf("api %s path=%q query=%q model=%q stream=%v bytes=%d tools=%q mcp_servers=%d", kind, r.URL.Path, r.URL.RawQuery, req.Model, req.Stream, len(body), strings.Join(tools, " "), len(req.MCPServers))
	return req
}
