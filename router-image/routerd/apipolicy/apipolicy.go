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
	"strings"
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
	// Notes say what was changed, for the log and the report.
	Notes []string
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

const id = `[A-Za-z0-9_.:-]+`

// endpoints are, for each provider, what Claude Code, Codex and Gemini CLI
// call, and the read-only or batch calls of the same APIs.
var endpoints = map[Provider][]endpoint{
	Anthropic: {
		ep("POST", `/v1/messages`, modelBody),
		ep("POST", `/v1/messages/count_tokens`, modelBody),
		ep("GET", `/v1/models`, noBody),
		ep("GET", `/v1/models/`+id, noBody),
		ep("POST", `/v1/messages/batches`, batchBody),
		ep("GET", `/v1/messages/batches`, noBody),
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

// credentialArgs are query arguments that carry a credential on one API or
// another: on the user's key, a request must not bring its own.
var credentialArgs = map[string]bool{"key": true, "api_key": true, "apikey": true, "api-key": true, "access_token": true,
	"oauth_token": true, "token": true, "auth": true, "authorization": true}

// Allowable are the rules a user may turn off by name
// (AGENT_SANDBOX_API_ALLOW). Those that keep the check itself sound (the
// query, the body's encoding, size and syntax) are not among them.
var Allowable = []string{
	"anthropic.endpoint", "anthropic.mcp_servers", "anthropic.url_source", "anthropic.web_fetch",
	"gemini.endpoint", "gemini.url_context", "gemini.url_source",
	"openai.endpoint", "openai.mcp", "openai.url_source",
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
	if e == nil {
		rule := string(p) + ".endpoint"
		if o.Allow[rule] {
			return Decision{Notes: []string{"endpoint " + r.Method + " " + r.Path + " passed: " + rule + " is allowed"}}
		}
		return refuse(403, rule, fmt.Sprintf("%s %s is not an endpoint the sandbox passes with your key", r.Method, r.Path))
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
		reqs, _ := doc["requests"].([]any)
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
		return Decision{Notes: c.notes}
	}
	body, err := json.Marshal(doc)
	if err != nil {
		return refuse(400, string(p)+".parse", err.Error())
	}
	return Decision{Body: body, Notes: c.notes}
}

// checkQuery refuses a query that carries a credential, names an argument
// with `$` (Google's alias form: `$key=` is `key=`), or percent-encodes an
// argument's name (which could spell either).
func checkQuery(p Provider, raw string) (Decision, bool) {
	if raw == "" {
		return Decision{}, true
	}
	for _, part := range strings.Split(raw, "&") {
		name, _, _ := strings.Cut(part, "=")
		switch {
		case strings.HasPrefix(name, "$"):
			return refuse(403, string(p)+".query", "query arguments whose name starts with $ are refused (Google reads $key as key)"), false
		case strings.Contains(name, "%"):
			return refuse(403, string(p)+".query", "percent-encoded query argument names are refused (they could spell a credential)"), false
		case credentialArgs[strings.ToLower(name)]:
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
		tools, _ := doc["tools"].([]any)
		for _, t := range tools {
			tool, _ := t.(map[string]any)
			if typ, _ := tool["type"].(string); typ == "mcp" && !c.o.Allow["openai.mcp"] {
				return c.refuse("openai.mcp", "an mcp tool makes OpenAI's servers connect to the MCP server or connector it names")
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

// urlKeys are the fields through which the APIs take content by URL: an
// image or document source's url, OpenAI's image_url and file_url,
// Gemini's file_uri.
var urlKeys = map[string]bool{"url": true, "image_url": true, "file_url": true, "file_uri": true, "fileUri": true}

// foreignURL finds, anywhere in the body, a URL in a content field whose
// host the allowlist does not admit.
func (c *checker) foreignURL(v any) (string, bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if k == "mcp_servers" {
				// Refused above unless the user allowed the connector.
				continue
			}
			if s, ok := val.(string); ok && urlKeys[k] {
				if host, ok := httpHost(s); ok && !c.o.Admits(host) {
					return s, true
				}
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

// httpHost is the host of an http or https URL (other schemes, data: and
// file references, name no host the provider would fetch).
func httpHost(s string) (string, bool) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil {
		// Not a URL the sandbox can read: treat it as one it cannot admit.
		return s, strings.Contains(strings.ToLower(s), "://")
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https", "ftp", "ws", "wss":
		return strings.ToLower(u.Hostname()), true
	}
	return "", false
}

// trimWebFetch keeps only the domains the allowlist admits, with every
// name under them (the API fetches a domain's subdomains too); a tool
// that names none gets the allowlist's own names that qualify. A tool
// left with no domain is refused.
func (c *checker) trimWebFetch(tool map[string]any) Decision {
	admitted := func(d string) bool {
		host := strings.ToLower(strings.TrimSuffix(strings.SplitN(d, "/", 2)[0], "."))
		return host != "" && c.o.Admits(host) && c.o.Admits("sub."+host)
	}
	var keep []any
	if list, ok := tool["allowed_domains"].([]any); ok {
		for _, d := range list {
			if s, ok := d.(string); ok && admitted(s) {
				keep = append(keep, s)
			}
		}
	} else {
		for _, h := range c.o.Hosts {
			if admitted(h) {
				keep = append(keep, h)
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

// parseStrict reads a JSON object and refuses what two parsers could read
// differently: duplicate keys at any depth, trailing data.
func parseStrict(body []byte) (map[string]any, error) {
	if err := noDuplicateKeys(json.NewDecoder(bytes.NewReader(body))); err != nil {
		return nil, err
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var doc map[string]any
	if err := d.Decode(&doc); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, fmt.Errorf("data after the JSON object")
	}
	if doc == nil {
		return nil, fmt.Errorf("not a JSON object")
	}
	return doc, nil
}

func noDuplicateKeys(d *json.Decoder) error {
	var walk func() error
	walk = func() error {
		t, err := d.Token()
		if err != nil {
			return err
		}
		switch t {
		case json.Delim('{'):
			seen := map[string]bool{}
			for d.More() {
				k, err := d.Token()
				if err != nil {
					return err
				}
				key, _ := k.(string)
				if seen[key] {
					return fmt.Errorf("the key %q appears twice in one object", key)
				}
				seen[key] = true
				if err := walk(); err != nil {
					return err
				}
			}
			_, err := d.Token()
			return err
		case json.Delim('['):
			for d.More() {
				if err := walk(); err != nil {
					return err
				}
			}
			_, err := d.Token()
			return err
		}
		return nil
	}
	return walk()
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
