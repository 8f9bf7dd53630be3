package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
)

// The fake Gemini API: enough of generateContent and streamGenerateContent
// for the real `gemini -p` (recipes/gemini) to print an answer, streamed as
// server-sent events (alt=sse) the way the real API streams them. Like the
// Messages API, every request logs its credential headers first
// (logCredentials), the query string with the path.

// geminiAnswer is the text every answer holds.
const geminiAnswer = "Hello from the fake Gemini API."

// geminiPath is a model method: /v1beta/models/MODEL:METHOD.
var geminiPath = regexp.MustCompile(`^/v1(?:beta|alpha)?/models/([^/:]+):([A-Za-z]+)$`)

func isGeminiPath(path string) bool {
	return geminiPath.MatchString(path)
}

func (s *tlsServer) gemini(w http.ResponseWriter, r *http.Request) {
	m := geminiPath.FindStringSubmatch(r.URL.Path)
	model, method := m[1], m[2]
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	var req struct {
		GenerationConfig struct {
			ResponseMimeType   string          `json:"responseMimeType"`
			ResponseJSONSchema json.RawMessage `json:"responseJsonSchema"`
			ResponseSchema     json.RawMessage `json:"responseSchema"`
		} `json:"generationConfig"`
	}
	_ = json.Unmarshal(body, &req)
	streamed := r.URL.Query().Get("alt") == "sse"
	s.log.printf("api gemini model=%q method=%s sse=%v json=%v bytes=%d", model, method, streamed, req.GenerationConfig.ResponseMimeType == "application/json", len(body))
	if r.Method != http.MethodPost {
		geminiError(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	usage := func(out int) map[string]any {
		return map[string]any{"promptTokenCount": 12, "candidatesTokenCount": out, "totalTokenCount": 12 + out}
	}
	chunk := func(text string, last bool, out int) map[string]any {
		c := map[string]any{"content": map[string]any{"role": "model", "parts": []any{map[string]any{"text": text}}}, "index": 0}
		if last {
			c["finishReason"] = "STOP"
		}
		return map[string]any{"candidates": []any{c}, "usageMetadata": usage(out), "modelVersion": model, "responseId": "resp_fake"}
	}
	switch method {
	case "countTokens":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"totalTokens":12}`)
	case "generateContent":
		text := geminiAnswer
		// Gemini CLI asks for JSON by schema for its own decisions (which
		// model a prompt needs): a value of that shape.
		schema := req.GenerationConfig.ResponseJSONSchema
		if len(schema) == 0 {
			schema = req.GenerationConfig.ResponseSchema
		}
		if len(schema) > 0 {
			var sch map[string]any
			_ = json.Unmarshal(schema, &sch)
			b, _ := json.Marshal(fillSchema(sch))
			text = string(b)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(chunk(text, true, 1))
	case "streamGenerateContent":
		words := strings.SplitAfter(geminiAnswer, " ")
		if !streamed {
			// Without alt=sse the API streams one JSON array.
			var chunks []any
			for i, word := range words {
				chunks = append(chunks, chunk(word, i == len(words)-1, i+1))
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(chunks)
			return
		}
		ev := newSSE(w)
		for i, word := range words {
			ev.send("", chunk(word, i == len(words)-1, i+1))
			if i == 0 && !pause(r) {
				return
			}
		}
		s.log.printf("api gemini streamed chunks=%d", ev.n)
	default:
		geminiError(w, http.StatusNotFound, "method not found")
	}
}

func geminiError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": code, "message": msg, "status": http.StatusText(code)}})
	_, _ = w.Write(b)
}

// fillSchema makes a value of a JSON schema's shape (OpenAPI's upper-case
// type names too): the first of an enum, a number's minimum or 1, "fake".
func fillSchema(s map[string]any) any {
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	typ, _ := s["type"].(string)
	switch strings.ToLower(typ) {
	case "object":
		out := map[string]any{}
		props, _ := s["properties"].(map[string]any)
		for k, v := range props {
			p, _ := v.(map[string]any)
			out[k] = fillSchema(p)
		}
		return out
	case "array":
		return []any{}
	case "number", "integer":
		if m, ok := s["minimum"].(float64); ok {
			return m
		}
		return 1
	case "boolean":
		return false
	default:
		return "fake"
	}
}
