package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func messagesClient(f *fixture, sni string) *http.Client {
	addr := f.r.tls.Addr().String()
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: f.ca.Pool(), ServerName: sni},
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			},
		},
	}
}

// A streamed answer comes as the real API's events, one flushed at a time:
// with a pause after the first delta, that delta arrives before the pause.
func TestMessagesStreams(t *testing.T) {
	f := startFake(t)
	req, _ := http.NewRequest("POST", "https://api.anthropic.test/v1/messages?beta=true",
		strings.NewReader(`{"model":"claude-x","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("X-Api-Key", "sk-nonce-1")
	req.Header.Set("Anthropic-Beta", "oauth-2025-04-20")
	req.Header.Set(pauseHeader, "400")
	start := time.Now()
	resp, err := messagesClient(f, "api.anthropic.test").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("content type %q", ct)
	}
	var events []string
	var text strings.Builder
	var firstDelta, end time.Duration
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if ev, ok := strings.CutPrefix(line, "event: "); ok {
			events = append(events, ev)
			if ev == "content_block_delta" && firstDelta == 0 {
				firstDelta = time.Since(start)
			}
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var d struct {
				Delta struct{ Text string } `json:"delta"`
			}
			if err := json.Unmarshal([]byte(data), &d); err != nil {
				t.Errorf("data is not JSON: %q", data)
			}
			text.WriteString(d.Delta.Text)
		}
	}
	end = time.Since(start)
	if text.String() != messagesAnswer {
		t.Errorf("streamed text %q", text.String())
	}
	if events[0] != "message_start" || events[len(events)-1] != "message_stop" {
		t.Errorf("events %v", events)
	}
	if end-firstDelta < 300*time.Millisecond {
		t.Errorf("first delta at %s, end at %s: not streamed", firstDelta, end)
	}
	f.wantLog(t, "api request method=POST", `host="api.anthropic.test"`, `x-api-key="sk-nonce-1"`, `authorization=""`, `anthropic-beta="oauth-2025-04-20"`)
	f.wantLog(t, "api messages", `model="claude-x"`, "stream=true")
}

func TestMessagesWithoutStream(t *testing.T) {
	f := startFake(t)
	req, _ := http.NewRequest("POST", "https://api.anthropic.test/v1/messages", strings.NewReader(`{"model":"m","messages":[]}`))
	req.Header.Set("Authorization", "Bearer tok-2")
	resp, err := messagesClient(f, "api.anthropic.test").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var msg struct {
		Content []struct{ Text string } `json:"content"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil || len(msg.Content) != 1 || msg.Content[0].Text != messagesAnswer {
		t.Errorf("answer %+v, %v", msg, err)
	}
	f.wantLog(t, "api request", `authorization="Bearer tok-2"`, `x-api-key=""`)
	// Every path logs its credential headers, not only the API's.
	if _, err := httpsGet(t, f, "gen.test", "/v1beta/models?x=1"); err != nil {
		t.Fatal(err)
	}
	f.wantLog(t, "api request method=GET", `host="gen.test"`, `path="/v1beta/models?x=1"`)
}
