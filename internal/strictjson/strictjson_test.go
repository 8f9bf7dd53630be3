package strictjson

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestObjectRefusesWhatTwoParsersReadDifferently(t *testing.T) {
	l := Limits{Depth: 3, Tokens: 20}
	doc, err := Object([]byte(`{"a": [1, {"b": "c"}], "n": 1.50}`), l)
	if err != nil {
		t.Fatal(err)
	}
	if doc["n"] != json.Number("1.50") {
		t.Errorf("n = %#v, want the number as written", doc["n"])
	}
	for body, want := range map[string]string{
		`{"a": 1, "a": 2}`:              "appears twice",
		"{\"a\": \"\xff\"}":             "not UTF-8",
		`{"a": 1} {"b": 2}`:             "data after",
		`[1, 2]`:                        "not a JSON object",
		`{"a": {"b": {"c": {"d": 1}}}}`: "nested deeper than 3",
		`{"a": [` + strings.Repeat("1,", 30) + `1]}`: "more than 20 JSON values",
		`{"a": `: "EOF",
	} {
		if _, err := Object([]byte(body), l); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
}
