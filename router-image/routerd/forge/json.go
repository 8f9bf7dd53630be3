package forge

import "github.com/agent-sandbox/agent-sandbox/internal/strictjson"

// jsonLimits bound a JSON body: deeper than GraphQL variables or an LFS
// batch go, shallow enough for a small router's stack; at most as many
// values as MaxBody holds.
var jsonLimits = strictjson.Limits{Depth: 64, Tokens: MaxBody}

// parseObject reads a JSON object in one pass, refusing what two parsers
// could read differently (strictjson).
func parseObject(body []byte) (map[string]any, error) {
	return strictjson.Object(body, jsonLimits)
}
