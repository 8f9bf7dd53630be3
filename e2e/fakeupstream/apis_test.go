package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// sseData posts body to url and returns each event's data, the time of the
// first and of the last, and the response.
func sseData(t *testing.T, f *fixture, sni, url, body string, h map[string]string) (data []string, first, last time.Duration, resp *http.Response) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	for k, v := range h {
		req.Header.Set(k, v)
	}
	start := time.Now()
	resp, err := messagesClient(f, sni).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			if first == 0 {
				first = time.Since(start)
			}
			data = append(data, d)
		}
	}
	return data, first, time.Since(start), resp
}

// A streamed Responses answer: the events Codex reads, its text in the
// deltas and in the completed response, flushed one at a time.
func TestResponsesStreams(t *testing.T) {
	f := startFake(t)
	data, first, last, resp := sseData(t, f, "openai.test", "https://openai.test/v1/responses",
		`{"model":"gpt-x","stream":true,"input":"hi"}`, map[string]string{"Authorization": "Bearer sk-nonce-3", pauseHeader: "400"})
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("content type %q", ct)
	}
	var types []string
	var text strings.Builder
	for _, d := range data {
		var ev struct {
			Type     string
			Delta    string
			Response struct {
				Status string
				Output []struct {
					Content []struct{ Text string }
				}
			}
		}
		if err := json.Unmarshal([]byte(d), &ev); err != nil {
			t.Fatalf("data is not JSON: %q", d)
		}
		types = append(types, ev.Type)
		text.WriteString(ev.Delta)
		if ev.Type == "response.completed" && (ev.Response.Status != "completed" || len(ev.Response.Output) != 1 || ev.Response.Output[0].Content[0].Text != responsesAnswer) {
			t.Errorf("completed response %s", d)
		}
	}
	if text.String() != responsesAnswer {
		t.Errorf("streamed text %q", text.String())
	}
	if len(types) < 3 || types[0] != "response.created" || types[len(types)-1] != "response.completed" {
		t.Errorf("events %v", types)
	}
	if last-first < 300*time.Millisecond {
		t.Errorf("first event at %s, end at %s: not streamed", first, last)
	}
	f.wantLog(t, "api request method=POST", `host="openai.test"`, `authorization="Bearer sk-nonce-3"`, `x-api-key=""`)
	f.wantLog(t, "api responses", `model="gpt-x"`, "stream=true")
	f.wantLog(t, "api responses streamed events=")
}

// Codex's WebSocket attempt, its upgrade removed by the proxy, gets 426:
// Codex then uses HTTPS at once.
func TestResponsesWebSocketRefused(t *testing.T) {
	f := startFake(t)
	resp, err := messagesClient(f, "openai.test").Get("https://openai.test/v1/responses")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired {
		t.Errorf("status %d, want 426", resp.StatusCode)
	}
	f.wantLog(t, "api responses websocket-refused")
}

func TestResponsesWithoutStream(t *testing.T) {
	f := startFake(t)
	resp, err := messagesClient(f, "openai.test").Post("https://openai.test/v1/responses", "application/json", strings.NewReader(`{"model":"m","input":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string
		Output []struct{ Content []struct{ Text string } }
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Status != "completed" || r.Output[0].Content[0].Text != responsesAnswer {
		t.Errorf("answer %+v, %v", r, err)
	}
}

// A streamed generateContent answer as Gemini CLI asks for it (alt=sse):
// chunks of candidates, the last with finishReason, flushed one at a time.
func TestGeminiStreams(t *testing.T) {
	f := startFake(t)
	data, first, last, resp := sseData(t, f, "gemini.test", "https://gemini.test/v1beta/models/gemini-x:streamGenerateContent?alt=sse",
		`{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`, map[string]string{"X-Goog-Api-Key": "nonce-4", pauseHeader: "400"})
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("content type %q", ct)
	}
	var text strings.Builder
	finish := ""
	for _, d := range data {
		var c struct {
			Candidates []struct {
				Content      struct{ Parts []struct{ Text string } }
				FinishReason string
			}
		}
		if err := json.Unmarshal([]byte(d), &c); err != nil || len(c.Candidates) != 1 {
			t.Fatalf("data is not a chunk: %q", d)
		}
		text.WriteString(c.Candidates[0].Content.Parts[0].Text)
		finish = c.Candidates[0].FinishReason
	}
	if text.String() != geminiAnswer || finish != "STOP" {
		t.Errorf("streamed text %q, last finishReason %q", text.String(), finish)
	}
	if last-first < 300*time.Millisecond {
		t.Errorf("first chunk at %s, end at %s: not streamed", first, last)
	}
	f.wantLog(t, "api request method=POST", `host="gemini.test"`, `x-goog-api-key="nonce-4"`, `authorization=""`)
	f.wantLog(t, "api gemini", `model="gemini-x"`, "method=streamGenerateContent", "sse=true")
	f.wantLog(t, "api gemini streamed chunks=")
}

// generateContent answers text, or for a JSON schema (Gemini CLI's model
// routing) a value of its shape.
func TestGeminiGenerate(t *testing.T) {
	f := startFake(t)
	for _, c := range []struct{ body, want string }{
		{`{"contents":[]}`, geminiAnswer},
		{`{"generationConfig":{"responseMimeType":"application/json","responseJsonSchema":{"type":"OBJECT","properties":{"why":{"type":"STRING"},"score":{"type":"INTEGER","minimum":5},"ok":{"type":"BOOLEAN"},"kind":{"type":"STRING","enum":["a","b"]}}}}}`,
			`{"kind":"a","ok":false,"score":5,"why":"fake"}`},
	} {
		resp, err := messagesClient(f, "gemini.test").Post("https://gemini.test/v1beta/models/g:generateContent", "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Candidates []struct {
				Content struct{ Parts []struct{ Text string } }
			}
		}
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if err != nil || len(r.Candidates) != 1 || r.Candidates[0].Content.Parts[0].Text != c.want {
			t.Errorf("%s: answer %+v, %v; want %s", c.body, r, err, c.want)
		}
	}
	resp, err := messagesClient(f, "gemini.test").Post("https://gemini.test/v1beta/models/g:nope", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown method: status %d", resp.StatusCode)
	}
}
