// Package apipolicy decides what a request to a model API may do when the
// router signs it with the user's key. Every such request is made in the
// user's name, and the providers' own servers fetch and connect wherever a
// request tells them (the MCP connector, web fetch tools, URL-sourced
// images and files, ephemeral tokens minted under the key). So the router
// passes only the endpoints the agents use, parses the bodies that carry
// tools or content before they are sent, refuses the forms that make the
// provider reach out on the agent's behalf, trims a web fetch tool's
// domains to the allowlist, and fails closed on anything it cannot read.
//
// Check is a pure function of the request and the session's options: the
// proxy in routerd calls it with the whole body read (bounded) and sends
// on what it returns.
package apipolicy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/strictjson"
)

// Provider is an API the router holds a key for.
type Provider string

const (
	Anthropic Provider = "anthropic"
	OpenAI    Provider = "openai"
	Gemini    Provider = "gemini"
)

// MaxBody bounds a request body: the largest the APIs take for a model
// request (Anthropic's and OpenAI's 32 MB). A larger one is refused, not
// passed unread.
const MaxBody = 32 << 20

// Options are the session's: what the user allowed explicitly, and the
// allowlist.
type Options struct {
	// Allow holds the rules the user turned off by name ("anthropic.mcp_servers",
	// "openai.mcp", "gemini.url_context", ...).
	Allow map[string]bool
	// Admits reports whether the allowlist admits a host on port 443.
	Admits func(host string) bool
	// Hosts are the allowlist's exact names, for a web fetch tool that
	// names no domains of its own.
	Hosts []string
}

// Request is what Check needs of an HTTP request.
type Request struct {
	Method, Path, RawQuery string
	// ContentEncoding is the request's Content-Encoding header.
	ContentEncoding string
	Body            []byte
}

// Decision is what to do with a request.
type Decision struct {
	// Refused requests get Status and an error body naming Rule.
	Refused bool
	Status  int
	Rule    string
	Reason  string
	// Body, when not nil, replaces the request's body (a trimmed tool).
	Body []byte
	// Notes say what was changed, for the log and the report; Allowed,
	// what passed because the user allowed a rule by name.
	Notes   []string
	Allowed []string
}

func refuse(status int, rule, reason string) Decision {
	return Decision{Refused: true, Status: status, Rule: rule, Reason: reason}
}

// endpoint is a method and a path pattern the agents call; body says how
// its body is checked.
type endpoint struct {
	method string
	path   *regexp.Regexp
	body   bodyKind
}

type bodyKind int

const (
	noBody bodyKind = iota
	modelBody
	batchBody
)

func ep(method, pattern string, body bodyKind) endpoint {
	return endpoint{method, regexp.MustCompile("^" + pattern + "$"), body}
}

// id is one path segment naming an object: never "." or "..".
const id = `[A-Za-z0-9_:-][A-Za-z0-9_.:-]*`

// endpoints are, for each provider, what Claude Code, Codex and Gemini CLI
// call, and the read-only or batch calls of the same APIs.
var endpoints = map[Provider][]endpoint{
	Anthropic: {
		ep("POST", `/v1/messages`, modelBody),
		ep("POST", `/v1/messages/count_tokens`, modelBody),
		ep("GET", `/v1/models`, noBody),
		ep("GET", `/v1/models/`+id, noBody),
		ep("POST", `/v1/messages/batches`, batchBody),
		ep("GET", `/v1/messages/batches/`+id, noBody),
		ep("GET", `/v1/messages/batches/`+id+`/results`, noBody),
		ep("POST", `/v1/messages/batches/`+id+`/cancel`, noBody),
		ep("DELETE", `/v1/messages/batches/`+id, noBody),
	},
	OpenAI: {
		ep("POST", `/v1/responses`, modelBody),
		ep("POST", `/v1/responses/compact`, modelBody),
		ep("GET", `/v1/responses/`+id, noBody),
		ep("GET", `/v1/responses/`+id+`/input_items`, noBody),
		ep("POST", `/v1/responses/`+id+`/cancel`, noBody),
		ep("DELETE", `/v1/responses/`+id, noBody),
		ep("POST", `/v1/chat/completions`, modelBody),
		ep("POST", `/v1/embeddings`, modelBody),
		ep("GET", `/v1/models`, noBody),
		ep("GET", `/v1/models/`+id, noBody),
	},
	Gemini: {
		ep("POST", `/v1(beta)?/models/`+id+`:(generateContent|streamGenerateContent|countTokens|embedContent|batchEmbedContents)`, modelBody),
		ep("GET", `/v1(beta)?/models`, noBody),
		ep("GET", `/v1(beta)?/models/`+id, noBody),
	},
}

// credentialWords are what the names of query arguments that carry a
// credential hold, on one API or another (key, api_key, access_token,
// bearer_token, ...): on the user's key, a request must not bring its own.
var credentialWords = []string{"key", "token", "auth", "secret", "credential", "password", "signature", "sig"}

// Allowable are the rules a user may turn off by name
// (AGENT_SANDBOX_API_ALLOW). Those that keep the check itself sound (the
// query, the body's encoding, size and syntax) are not among them.
var Allowable = []string{
	"anthropic.endpoint", "anthropic.mcp_servers", "anthropic.url_source", "anthropic.web_fetch",
	"gemini.endpoint", "gemini.url_context", "gemini.url_source",
	"openai.container_network", "openai.endpoint", "openai.mcp", "openai.url_source", "openai.web_search",
}

// Check decides what to do with a request to provider's API.
func Check(p Provider, r Request, o Options) Decision {
	if d, ok := checkQuery(p, r.RawQuery); !ok {
		return d
	}
	var e *endpoint
	for i := range endpoints[p] {
		c := &endpoints[p][i]
		if c.method == r.Method && c.path.MatchString(r.Path) {
			e = c
			break
		}
	}
	var allowedNote []string
	if e == nil {
		rule := string(p) + ".endpoint"
		if !o.Allow[rule] {
			return refuse(403, rule, fmt.Sprintf("%s %s is not an endpoint the sandbox passes with your key", r.Method, r.Path))
		}
		// Allowed by name: its body is still read like a model request's.
		allowedNote = []string{"endpoint " + r.Method + " " + r.Path + " passed: " + rule + " is allowed"}
		e = &endpoint{method: r.Method, body: modelBody}
		if len(r.Body) == 0 {
			return Decision{Allowed: allowedNote}
		}
	}
	if e.body == noBody && len(r.Body) == 0 {
		return Decision{}
	}
	if enc := strings.ToLower(strings.TrimSpace(r.ContentEncoding)); enc != "" && enc != "identity" {
		return refuse(415, string(p)+".encoding", "a request body in Content-Encoding "+r.ContentEncoding+" is not read, so it is not sent")
	}
	if len(r.Body) > MaxBody {
		return refuse(413, string(p)+".size", fmt.Sprintf("a request body over %d MiB is not read, so it is not sent", MaxBody>>20))
	}
	if e.body == noBody {
		return refuse(400, string(p)+".body", r.Method+" "+r.Path+" takes no body")
	}
	doc, err := parseStrict(r.Body)
	if err != nil {
		return refuse(400, string(p)+".parse", "the request body is not JSON the sandbox can read: "+err.Error())
	}
	c := checker{p: p, o: o}
	switch e.body {
	case batchBody:
		reqs, ok := doc["requests"].([]any)
		if !ok || len(reqs) == 0 {
			return refuse(400, string(p)+".parse", "a batch needs requests, an array of requests with params")
		}
		for i, one := range reqs {
			m, _ := one.(map[string]any)
			params, _ := m["params"].(map[string]any)
			if params == nil {
				return refuse(400, string(p)+".parse", fmt.Sprintf("batch request %d has no params", i))
			}
			c.where = fmt.Sprintf("batch request %d: ", i)
			if d := c.model(params); d.Refused {
				return d
			}
		}
	default:
		if d := c.model(doc); d.Refused {
			return d
		}
	}
	if !c.changed {
		return Decision{Notes: c.notes, Allowed: allowedNote}
	}
	body, err := json.Marshal(doc)
	if err != nil {
		return refuse(400, string(p)+".parse", err.Error())
	}
	return Decision{Body: body, Notes: c.notes, Allowed: allowedNote}
}

// checkQuery refuses a query that carries a credential, names an argument
// with `$` (Google's alias form: `$key=` is `key=`), or percent-encodes an
// argument's name (which could spell either).
func checkQuery(p Provider, raw string) (Decision, bool) {
	if raw == "" {
		return Decision{}, true
	}
	if strings.Contains(raw, ";") {
		return refuse(403, string(p)+".query", "a ; in the query is refused (some servers split arguments on it)"), false
	}
	for _, part := range strings.Split(raw, "&") {
		name, _, _ := strings.Cut(part, "=")
		lower := strings.ToLower(name)
		switch {
		case strings.HasPrefix(name, "$"):
			return refuse(403, string(p)+".query", "query arguments whose name starts with $ are refused (Google reads $key as key)"), false
		case strings.Contains(name, "%"):
			return refuse(403, string(p)+".query", "percent-encoded query argument names are refused (they could spell a credential)"), false
		case slices.ContainsFunc(credentialWords, func(w string) bool { return strings.Contains(lower, w) }):
			return refuse(403, string(p)+".query", "a credential in the query ("+name+"=) is refused: the router adds yours"), false
		}
	}
	return Decision{}, true
}

type checker struct {
	p       Provider
	o       Options
	where   string
	changed bool
	notes   []string
}

// model checks the body of a model request: its tools, and every place a
// URL could make the provider fetch.
func (c *checker) model(doc map[string]any) Decision {
	switch c.p {
	case Anthropic:
		if v, ok := doc["mcp_servers"]; ok && !empty(v) && !c.o.Allow["anthropic.mcp_servers"] {
			return c.refuse("anthropic.mcp_servers", "mcp_servers makes Anthropic's servers connect to the MCP servers it names")
		}
		tools, _ := doc["tools"].([]any)
		for _, t := range tools {
			tool, _ := t.(map[string]any)
			typ, _ := tool["type"].(string)
			if strings.HasPrefix(typ, "web_fetch_") && !c.o.Allow["anthropic.web_fetch"] {
				if d := c.trimWebFetch(tool); d.Refused {
					return d
				}
			}
			if strings.HasPrefix(typ, "mcp_toolset") && !c.o.Allow["anthropic.mcp_servers"] {
				return c.refuse("anthropic.mcp_servers", "an mcp_toolset tool uses Anthropic's MCP connector")
			}
		}
	case OpenAI:
		if _, ok := doc["web_search_options"]; ok && !c.o.Allow["openai.web_search"] {
			return c.refuse("openai.web_search", "web_search_options lets OpenAI's servers open the pages the prompt names")
		}
		tools, _ := doc["tools"].([]any)
		for _, t := range tools {
			tool, _ := t.(map[string]any)
			typ, _ := tool["type"].(string)
			switch {
			case typ == "mcp" && !c.o.Allow["openai.mcp"]:
				return c.refuse("openai.mcp", "an mcp tool makes OpenAI's servers connect to the MCP server or connector it names")
			case strings.HasPrefix(typ, "web_search_preview") && !c.o.Allow["openai.web_search"]:
				return c.refuse("openai.web_search", "web_search_preview lets OpenAI's servers open the pages the prompt names, and has no switch to stop it")
			case typ == "web_search" && !c.o.Allow["openai.web_search"]:
				// Search stays; opening pages live does not (what Codex's
				// cached mode asks for).
				if v, ok := tool["external_web_access"].(bool); !ok || v {
					tool["external_web_access"] = false
					c.changed = true
					c.notes = append(c.notes, c.where+"web_search external_web_access set to false")
				}
			}
		}
		if !c.o.Allow["openai.container_network"] {
			if what, ok := containerNetwork(doc); ok {
				return c.refuse("openai.container_network", what+" gives the code OpenAI's servers run network access")
			}
		}
	case Gemini:
		tools, _ := doc["tools"].([]any)
		for _, t := range tools {
			tool, _ := t.(map[string]any)
			for _, k := range []string{"url_context", "urlContext"} {
				if _, ok := tool[k]; ok && !c.o.Allow["gemini.url_context"] {
					return c.refuse("gemini.url_context", "the url_context tool makes Google's servers fetch the URLs the prompt names")
				}
			}
		}
	}
	if !c.o.Allow[string(c.p)+".url_source"] {
		if u, ok := c.foreignURL(doc); ok {
			return c.refuse(string(c.p)+".url_source", "content by URL ("+u+") makes the provider fetch it, and the allowlist does not admit its host")
		}
	}
	return Decision{}
}

func (c *checker) refuse(rule, reason string) Decision {
	return refuse(403, rule, c.where+reason)
}

func empty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}

// containerNetwork finds a network policy that is not "disabled", or
// domain secrets, anywhere in the body: OpenAI's hosted containers
// (code_interpreter, shell) reach the domains they name.
func containerNetwork(v any) (string, bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			switch k {
			case "network_policy":
				np, _ := val.(map[string]any)
				if typ, _ := np["type"].(string); typ != "disabled" {
					return "a network_policy that is not disabled", true
				}
			case "domain_secrets":
				if !empty(val) {
					return "domain_secrets", true
				}
			}
			if what, ok := containerNetwork(val); ok {
				return what, true
			}
		}
	case []any:
		for _, val := range x {
			if what, ok := containerNetwork(val); ok {
				return what, true
			}
		}
	}
	return "", false
}

// foreignURL finds content the provider would fetch by URL, where the
// APIs take it (an image or document source of type url, OpenAI's
// input_image, input_file and image_url parts, Gemini's file data), whose
// URL is not data: or an absolute http(s) URL whose host the allowlist
// admits. A URL anywhere else (a citation, a tool's input) is data.
func (c *checker) foreignURL(v any) (string, bool) {
	switch x := v.(type) {
	case map[string]any:
		for _, u := range contentURLs(x) {
			if !c.admittedURL(u) {
				return u, true
			}
		}
		for k, val := range x {
			if k == "mcp_servers" {
				// Refused above unless the user allowed the connector.
				continue
			}
			if u, ok := c.foreignURL(val); ok {
				return u, true
			}
		}
	case []any:
		for _, val := range x {
			if u, ok := c.foreignURL(val); ok {
				return u, true
			}
		}
	}
	return "", false
}

// contentURLs are the URLs an object hands the provider to fetch.
func contentURLs(o map[string]any) []string {
	str := func(v any) (string, bool) { s, ok := v.(string); return s, ok }
	var out []string
	typ, _ := str(o["type"])
	switch typ {
	case "url":
		// Anthropic: an image or document source {"type":"url","url":...}.
		if u, ok := str(o["url"]); ok {
			out = append(out, u)
		}
	case "input_image":
		if u, ok := str(o["image_url"]); ok {
			out = append(out, u)
		}
	case "input_file":
		if u, ok := str(o["file_url"]); ok {
			out = append(out, u)
		}
	case "image_url":
		switch iu := o["image_url"].(type) {
		case string:
			out = append(out, iu)
		case map[string]any:
			if u, ok := str(iu["url"]); ok {
				out = append(out, u)
			}
		}
	}
	for _, k := range []string{"fileData", "file_data"} {
		if fd, ok := o[k].(map[string]any); ok {
			for _, uk := range []string{"fileUri", "file_uri"} {
				if u, ok := str(fd[uk]); ok {
					out = append(out, u)
				}
			}
		}
	}
	return out
}

// admittedURL is data: or an absolute http(s) URL the allowlist admits.
func (c *checker) admittedURL(s string) bool {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(strings.ToLower(s), "data:") {
		return true
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.User != nil {
		return false
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
		return c.o.Admits(strings.ToLower(u.Hostname()))
	}
	return false
}

// domainEntry is an allowed_domains entry the trimming understands.
var domainEntry = regexp.MustCompile(`^((?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*\.?)(/[a-z0-9._~/-]*)?$`)

// trimWebFetch keeps only the domains the allowlist admits, with every
// name under them (the API fetches a domain's subdomains too); a tool
// that names none gets the allowlist's own names that qualify. A tool
// left with no domain is refused.
func (c *checker) trimWebFetch(tool map[string]any) Decision {
	// A domain as a host name, lowercase letters, digits, dots and
	// dashes, with at most a plain path: anything else could be read as
	// another host.
	admitted := func(d string) (string, bool) {
		m := domainEntry.FindStringSubmatch(strings.ToLower(d))
		if m == nil {
			return "", false
		}
		host := strings.TrimSuffix(m[1], ".")
		return host + m[2], host != "" && c.o.Admits(host) && c.o.Admits("sub."+host)
	}
	var keep []any
	if list, ok := tool["allowed_domains"].([]any); ok {
		for _, d := range list {
			if s, ok := d.(string); ok {
				if norm, ok := admitted(s); ok {
					keep = append(keep, norm)
				}
			}
		}
	} else {
		for _, h := range c.o.Hosts {
			if norm, ok := admitted(h); ok {
				keep = append(keep, norm)
			}
		}
	}
	if len(keep) == 0 {
		return c.refuse("anthropic.web_fetch", "the web_fetch tool would fetch from hosts the allowlist does not admit (with every name under them); name allowed_domains the allowlist admits")
	}
	before, _ := json.Marshal(tool["allowed_domains"])
	tool["allowed_domains"] = keep
	// allowed_domains and blocked_domains do not go together; the allowed
	// list is the narrower.
	delete(tool, "blocked_domains")
	after, _ := json.Marshal(keep)
	if !bytes.Equal(before, after) {
		c.changed = true
		c.notes = append(c.notes, c.where+"web_fetch allowed_domains trimmed to "+string(after))
	}
	return Decision{}
}

// Bounds of a body the gate reads: nesting deeper than the APIs' own
// (Go's decoder alone stops at 10,000, past what a goroutine's stack
// takes on a small router), and values beyond what any agent sends.
const (
	maxDepth  = 128
	maxTokens = 2_000_000
)

// parseStrict reads a JSON object in one pass and refuses what two
// parsers could read differently (a key twice in one object, invalid
// UTF-8, data after the object) and what costs more than a request needs.
func parseStrict(body []byte) (map[string]any, error) {
	return strictjson.Object(body, strictjson.Limits{Depth: maxDepth, Tokens: maxTokens})
}

// ErrorBody is a refusal in the provider's own error shape, so that the
// agent shows it as the API's answer: which rule, and how to allow it.
func ErrorBody(p Provider, d Decision) []byte {
	msg := fmt.Sprintf("agent-sandbox refused this request (rule %s): %s. To allow it, start the session with AGENT_SANDBOX_API_ALLOW=%s", d.Rule, d.Reason, d.Rule)
	var v any
	switch p {
	case Anthropic:
		v = map[string]any{"type": "error", "error": map[string]any{"type": "permission_error", "message": msg}}
	case OpenAI:
		v = map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "param": nil, "code": "agent_sandbox_refused"}}
	default:
		v = map[string]any{"error": map[string]any{"code": d.Status, "message": msg, "status": "PERMISSION_DENIED"}}
	}
	b, _ := json.Marshal(v)
	return b
}
