package forge

import (
	"bytes"
	"errors"
	"fmt"
	"mime"
	"strings"
	"unicode/utf8"
)

// GraphQL writes (mutations, and subscriptions, which the router does not
// read either) name objects by global ids, not by repository paths, so the
// router cannot tell which repository one writes to: they are refused
// unless the user turns github.graphql_mutation off. Queries pass. To
// tell them apart the document is lexed as the GraphQL specification
// lexes it (strings, block strings, comments) and only its top-level
// definitions are read; a document the lexer cannot read is refused, so
// a server never finds an operation the router did not see.

const graphQLFix = "use the REST API for this repository (for a pull request: gh api repos/OWNER/NAME/pulls -f head=BRANCH -f base=main -f title=...) or set AGENT_SANDBOX_API_ALLOW=github.graphql_mutation"

// checkGraphQL decides a request to the GraphQL endpoint. The document
// is read wherever a server could find one: the JSON body, and a query
// argument (the GET form of GraphQL over HTTP).
func checkGraphQL(r Request, s Scope) Decision {
	docs, err := queryValues(r.RawQuery, "query")
	if err != nil {
		return unreadable(err.Error(), "send the GraphQL document in the JSON body")
	}
	if write(r.Method) || len(r.Body) > 0 {
		if d, ok := readableBody(r); !ok {
			return d
		}
		if mt, _, err := mime.ParseMediaType(r.ContentType); r.ContentType != "" && (err != nil || mt != "application/json") {
			return unreadable("a GraphQL body of type "+r.ContentType+" is not read as JSON by every server", "send it as application/json, as gh api graphql does")
		}
		q, err := graphQLBody(r.Body)
		if err != nil {
			return unreadable("the GraphQL request is not one the sandbox reads: "+err.Error(), `send one JSON object {"query": ..., "variables": {...}}, as gh api graphql does`)
		}
		docs = append(docs, q)
	}
	for _, doc := range docs {
		ops, err := operations(doc)
		if err != nil {
			return unreadable("the GraphQL document cannot be read: "+err.Error(), "send a well-formed GraphQL document")
		}
		for _, op := range ops {
			if op == "query" {
				continue
			}
			d := refusable(s, "github.graphql_mutation", "", "a GraphQL "+op+" is refused: GraphQL writes cannot be tied to a repository by the router")
			if d.Refused {
				d.Fix = graphQLFix
			}
			return d
		}
	}
	return admit("")
}

// graphQLBody is the document of a GraphQL request body: one JSON object
// with a query string, and an operation name and variables at most. A
// batch (an array), persisted query ids or extensions are refused: they
// carry or name documents the router would not read.
func graphQLBody(body []byte) (string, error) {
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) > 0 && t[0] == '[' {
		return "", errors.New("a batch of requests (a JSON array)")
	}
	doc, err := parseObject(body)
	if err != nil {
		return "", err
	}
	for k, v := range doc {
		var ok bool
		switch k {
		case "query":
			_, ok = v.(string)
		case "operationName":
			_, ok = v.(string)
			ok = ok || v == nil
		case "variables":
			_, ok = v.(map[string]any)
			ok = ok || v == nil
		default:
			return "", fmt.Errorf("the key %q", k)
		}
		if !ok {
			return "", fmt.Errorf("%s of the wrong type", k)
		}
	}
	q, ok := doc["query"].(string)
	if !ok {
		return "", errors.New("no query")
	}
	return q, nil
}

// operations are the types of the operations a document defines, in
// order ("query", "mutation", "subscription"; the shorthand { ... } is a
// query). Fragments are skipped: alone they run nothing. Any other
// top-level definition (a type system definition, which an executable
// document must not hold) is an error.
func operations(doc string) ([]string, error) {
	if !utf8.ValidString(doc) {
		return nil, errors.New("not UTF-8")
	}
	toks, err := lex(doc)
	if err != nil {
		return nil, err
	}
	p := parser{toks: toks}
	var ops []string
	for !p.done() {
		switch t := p.peek(); {
		case t.punct("{"):
			ops = append(ops, "query")
			err = p.block()
		case t.kind == tName && (t.text == "query" || t.text == "mutation" || t.text == "subscription"):
			ops = append(ops, t.text)
			p.next()
			err = p.operation()
		case t.kind == tName && t.text == "fragment":
			p.next()
			err = p.fragment()
		default:
			err = fmt.Errorf("a definition starting with %s", t)
		}
		if err != nil {
			return nil, err
		}
	}
	if len(ops) == 0 {
		return nil, errors.New("no operation")
	}
	return ops, nil
}

type tokKind int

const (
	tName tokKind = iota
	tPunct
	tString
	tNumber
)

type token struct {
	kind tokKind
	text string // a name's or a punctuator's; a string's or number's is not kept
}

func (t token) punct(s string) bool { return t.kind == tPunct && t.text == s }

func (t token) String() string {
	switch t.kind {
	case tString:
		return "a string"
	case tNumber:
		return "a number"
	}
	return fmt.Sprintf("%q", t.text)
}

// lex splits a document into the specification's tokens, dropping what
// it ignores: white space, line terminators, commas, comments and a byte
// order mark. What the specification does not allow (a character outside
// its tokens, a control character, an unterminated string, an unknown
// escape, a malformed number) is an error.
func lex(src string) ([]token, error) {
	var toks []token
	for i := 0; i < len(src); {
		c := src[i]
		var err error
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',':
			i++
		case strings.HasPrefix(src[i:], "\uFEFF"):
			i += len("\uFEFF")
		case c == '#':
			i, err = comment(src, i)
		case strings.HasPrefix(src[i:], `"""`):
			i, err = blockString(src, i)
			toks = append(toks, token{kind: tString})
		case c == '"':
			i, err = plainString(src, i)
			toks = append(toks, token{kind: tString})
		case strings.HasPrefix(src[i:], "..."):
			toks = append(toks, token{tPunct, "..."})
			i += 3
		case strings.IndexByte("!$&():=@[]{|}", c) >= 0:
			toks = append(toks, token{tPunct, string(c)})
			i++
		case nameStart(c):
			j := i + 1
			for j < len(src) && (nameStart(src[j]) || digit(src[j])) {
				j++
			}
			toks = append(toks, token{tName, src[i:j]})
			i = j
		case c == '-' || digit(c):
			i, err = number(src, i)
			toks = append(toks, token{kind: tNumber})
		default:
			r, _ := utf8.DecodeRuneInString(src[i:])
			err = fmt.Errorf("the character %q at offset %d", r, i)
		}
		if err != nil {
			return nil, err
		}
	}
	return toks, nil
}

func nameStart(c byte) bool { return c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') }
func digit(c byte) bool     { return '0' <= c && c <= '9' }
func hexDigit(c byte) bool  { return digit(c) || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F') }

// control is a character no token or comment holds: a control character
// other than a tab (line terminators are the callers' to judge).
func control(c byte) bool { return (c < ' ' && c != '\t' && c != '\n' && c != '\r') || c == 0x7f }

// comment runs from # to the end of the line.
func comment(src string, i int) (int, error) {
	for ; i < len(src) && src[i] != '\n' && src[i] != '\r'; i++ {
		if control(src[i]) {
			return 0, fmt.Errorf("a control character in a comment at offset %d", i)
		}
	}
	return i, nil
}

// plainString is a "..." string: it ends at the first unescaped quote and
// may not span lines; its escapes are the specification's.
func plainString(src string, i int) (int, error) {
	start := i
	for i++; i < len(src); {
		c := src[i]
		switch {
		case c == '"':
			return i + 1, nil
		case c == '\n' || c == '\r' || control(c):
			return 0, fmt.Errorf("a line break or control character in the string at offset %d", start)
		case c == '\\':
			n, err := escape(src, i)
			if err != nil {
				return 0, err
			}
			i += n
		default:
			i++
		}
	}
	return 0, fmt.Errorf("an unterminated string at offset %d", start)
}

// escape is the length of the escape sequence at src[i] (a backslash):
// \" \\ \/ \b \f \n \r \t, \uXXXX or \u{X...}.
func escape(src string, i int) (int, error) {
	bad := fmt.Errorf("an unknown escape in a string at offset %d", i)
	if i+1 >= len(src) {
		return 0, bad
	}
	switch src[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2, nil
	case 'u':
	default:
		return 0, bad
	}
	j := i + 2
	if j < len(src) && src[j] == '{' {
		k := j + 1
		for k < len(src) && hexDigit(src[k]) && k-j <= 6 {
			k++
		}
		if k == j+1 || k >= len(src) || src[k] != '}' {
			return 0, bad
		}
		return k + 1 - i, nil
	}
	if j+4 > len(src) {
		return 0, bad
	}
	for k := j; k < j+4; k++ {
		if !hexDigit(src[k]) {
			return 0, bad
		}
	}
	return 6, nil
}

// blockString is a """...""" string: it ends at the first """ that is
// not escaped as \""", its only escape.
func blockString(src string, i int) (int, error) {
	start := i
	for i += 3; i < len(src); {
		switch {
		case strings.HasPrefix(src[i:], `\"""`):
			i += 4
		case strings.HasPrefix(src[i:], `"""`):
			return i + 3, nil
		case control(src[i]):
			return 0, fmt.Errorf("a control character in the block string at offset %d", start)
		default:
			i++
		}
	}
	return 0, fmt.Errorf("an unterminated block string at offset %d", start)
}

// number is an IntValue or FloatValue: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?,
// not followed by a name's character or a dot.
func number(src string, i int) (int, error) {
	start := i
	bad := fmt.Errorf("a malformed number at offset %d", start)
	digits := func() bool {
		j := i
		for i < len(src) && digit(src[i]) {
			i++
		}
		return i > j
	}
	if src[i] == '-' {
		i++
	}
	if i < len(src) && src[i] == '0' {
		i++
	} else if !digits() {
		return 0, bad
	}
	if i < len(src) && src[i] == '.' {
		i++
		if !digits() {
			return 0, bad
		}
	}
	if i < len(src) && (src[i] == 'e' || src[i] == 'E') {
		i++
		if i < len(src) && (src[i] == '+' || src[i] == '-') {
			i++
		}
		if !digits() {
			return 0, bad
		}
	}
	if i < len(src) && (src[i] == '.' || nameStart(src[i]) || digit(src[i])) {
		return 0, bad
	}
	return i, nil
}

// parser reads the top level of a document's tokens.
type parser struct {
	toks []token
	i    int
}

func (p *parser) done() bool { return p.i >= len(p.toks) }

func (p *parser) peek() token {
	if p.done() {
		return token{kind: tPunct, text: "end of document"}
	}
	return p.toks[p.i]
}

func (p *parser) next() token {
	t := p.peek()
	p.i++
	return t
}

// operation reads what follows query, mutation or subscription: a name,
// variable definitions and directives, each optional, then the selection
// set. Anything else between the keyword and the selection set is an
// error, so that no keyword hides in a header the router skipped.
func (p *parser) operation() error {
	if p.peek().kind == tName {
		p.next()
	}
	if p.peek().punct("(") {
		if err := p.balanced(); err != nil {
			return err
		}
	}
	return p.directivesAndBlock()
}

// fragment reads what follows fragment: Name on Type, directives and the
// selection set.
func (p *parser) fragment() error {
	if t := p.next(); t.kind != tName || t.text == "on" {
		return fmt.Errorf("a fragment named %s", t)
	}
	if t := p.next(); t.kind != tName || t.text != "on" {
		return fmt.Errorf("%s where a fragment's type condition starts", t)
	}
	if t := p.next(); t.kind != tName {
		return fmt.Errorf("a fragment on %s", t)
	}
	return p.directivesAndBlock()
}

func (p *parser) directivesAndBlock() error {
	for p.peek().punct("@") {
		p.next()
		if t := p.next(); t.kind != tName {
			return fmt.Errorf("a directive named %s", t)
		}
		if p.peek().punct("(") {
			if err := p.balanced(); err != nil {
				return err
			}
		}
	}
	return p.block()
}

// block reads a selection set, { to its matching }.
func (p *parser) block() error {
	if p.peek().punct("{") {
		return p.balanced()
	}
	return fmt.Errorf("%s where a selection set starts", p.peek())
}

// balanced reads from an opening (, [ or { to its match, through any
// nesting; a closer that does not match, or the end, is an error.
func (p *parser) balanced() error {
	var stack []string
	for !p.done() {
		t := p.next()
		if t.kind != tPunct {
			continue
		}
		switch t.text {
		case "(":
			stack = append(stack, ")")
		case "[":
			stack = append(stack, "]")
		case "{":
			stack = append(stack, "}")
		case ")", "]", "}":
			if len(stack) == 0 || stack[len(stack)-1] != t.text {
				return fmt.Errorf("an unbalanced %q", t.text)
			}
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return nil
			}
		}
	}
	return errors.New("unbalanced brackets: the document ends inside one")
}
