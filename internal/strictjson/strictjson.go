// Package strictjson reads a JSON object the way a policy must before it
// decides on a request that a server will read again: in one pass, and
// refusing what two parsers could read differently (a key twice in one
// object, where one keeps the first and another the last; invalid UTF-8,
// which one replaces and another refuses; data after the object) and what
// costs more than a request needs (nesting, values).
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Limits bound a document: how deep it nests and how many JSON values
// (tokens) it holds.
type Limits struct {
	Depth, Tokens int
}

// Object reads body as one JSON object; numbers stay json.Number.
func Object(body []byte, l Limits) (map[string]any, error) {
	if !utf8.Valid(body) {
		return nil, errors.New("not UTF-8")
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	p := parser{d: d, l: l}
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err == nil {
		return nil, errors.New("data after the JSON object")
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("not a JSON object")
	}
	return obj, nil
}

type parser struct {
	d      *json.Decoder
	l      Limits
	tokens int
}

func (p *parser) token() (json.Token, error) {
	if p.tokens++; p.tokens > p.l.Tokens {
		return nil, fmt.Errorf("more than %d JSON values", p.l.Tokens)
	}
	return p.d.Token()
}

func (p *parser) value(depth int) (any, error) {
	if depth > p.l.Depth {
		return nil, fmt.Errorf("JSON nested deeper than %d", p.l.Depth)
	}
	t, err := p.token()
	if err != nil {
		return nil, err
	}
	switch t {
	case json.Delim('{'):
		obj := map[string]any{}
		for p.d.More() {
			k, err := p.token()
			if err != nil {
				return nil, err
			}
			key, _ := k.(string)
			if _, dup := obj[key]; dup {
				return nil, fmt.Errorf("the key %q appears twice in one object", key)
			}
			if obj[key], err = p.value(depth + 1); err != nil {
				return nil, err
			}
		}
		_, err := p.token()
		return obj, err
	case json.Delim('['):
		arr := []any{}
		for p.d.More() {
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		_, err := p.token()
		return arr, err
	}
	return t, nil
}
