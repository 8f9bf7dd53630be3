package forge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// maxDepth bounds a JSON body's nesting: deeper than GraphQL variables
// or an LFS batch go, shallow enough for a small router's stack.
const maxDepth = 64

// parseObject reads a JSON object in one pass and refuses what two
// parsers could read differently: a key twice in one object (one keeps
// the first, another the last), invalid UTF-8 (one replaces it, another
// fails), data after the object.
func parseObject(body []byte) (map[string]any, error) {
	if !utf8.Valid(body) {
		return nil, errors.New("not UTF-8")
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	v, err := value(d, 0)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err == nil {
		return nil, errors.New("data after the JSON value")
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("not a JSON object")
	}
	return obj, nil
}

func value(d *json.Decoder, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("JSON nested deeper than %d", maxDepth)
	}
	t, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t {
	case json.Delim('{'):
		obj := map[string]any{}
		for d.More() {
			k, err := d.Token()
			if err != nil {
				return nil, err
			}
			key, _ := k.(string)
			if _, dup := obj[key]; dup {
				return nil, fmt.Errorf("the key %q appears twice in one object", key)
			}
			if obj[key], err = value(d, depth+1); err != nil {
				return nil, err
			}
		}
		_, err := d.Token()
		return obj, err
	case json.Delim('['):
		arr := []any{}
		for d.More() {
			v, err := value(d, depth+1)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		_, err := d.Token()
		return arr, err
	}
	return t, nil
}
