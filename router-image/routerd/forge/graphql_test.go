package forge

import (
	"slices"
	"strings"
	"testing"
)

func TestOperations(t *testing.T) {
	for _, c := range []struct {
		name, doc string
		want      []string // nil: an error
	}{
		{"shorthand", `{ viewer { login } }`, []string{"query"}},
		{"a query", `query { a }`, []string{"query"}},
		{"a named query", `query Viewer { viewer { login } }`, []string{"query"}},
		{"a query named mutation", `query mutation { a }`, []string{"query"}},
		{"a query named like one", `query mutationLike { a }`, []string{"query"}},
		{"a field aliased mutation", `query { mutation: viewer { login } }`, []string{"query"}},
		{"a field named mutation", `{ mutation { a } }`, []string{"query"}},
		{"mutation in a comment", "# mutation { a }\nquery { a }", []string{"query"}},
		{"a comment ending in CR", "query { a } # x\rmutation { b }", []string{"query", "mutation"}},
		{"a comment inside", "query { a # } mutation {\n }", []string{"query"}},
		{"mutation in a string", `query { a(s: "} mutation { b }") }`, []string{"query"}},
		{"an escaped quote in a string", `query { a(s: "\" } mutation { b } \"") }`, []string{"query"}},
		{"a string ending in a backslash", `query { a(s: "\\") } mutation { b }`, []string{"query", "mutation"}},
		{"unicode escapes", `query { a(s: "\u00e9\u{1F600}") }`, []string{"query"}},
		{"mutation in a block string", "query { a(s: \"\"\" } mutation { b } \"\"\") }", []string{"query"}},
		{"an escaped triple quote in a block string", "query { a(s: \"\"\" \\\"\"\" } mutation { b } \"\"\") }", []string{"query"}},
		{"a block string with quotes", "query { a(s: \"\"\"say \"hi\" \"\" x\"\"\") }", []string{"query"}},
		{"a block string over lines", "query { a(s: \"\"\"\n mutation {\n b }\n\"\"\") }", []string{"query"}},
		{"an empty string then a mutation", `query { a(s: "") } mutation { b }`, []string{"query", "mutation"}},
		{"variables with defaults", `query Q($v: In = {a: [1, -2.5e3, "}"]}, $w: [Int!]! = [0]) { a(x: $v) }`, []string{"query"}},
		{"directives", `query Q @dir(a: {b: "{"}) @other { a }`, []string{"query"}},
		{"fragments", `fragment F on Mutation { a } query { ...F ... on X { b } }`, []string{"query"}},
		{"a fragment with directives", `fragment F on T @d(x: 1) { a } { ...F }`, []string{"query"}},
		{"a mutation", `mutation { addStar(input: {starrableId: "x"}) { clientMutationId } }`, []string{"mutation"}},
		{"a mutation without spaces", `mutation{a}`, []string{"mutation"}},
		{"a named mutation with variables", `mutation M($id: ID!) @d { a(id: $id) { b } }`, []string{"mutation"}},
		{"a subscription", `subscription { a }`, []string{"subscription"}},
		{"two operations", `query A { a } mutation B { b }`, []string{"query", "mutation"}},
		{"shorthand then a mutation", `{ a } mutation { b }`, []string{"query", "mutation"}},
		{"commas and a byte order mark", "\uFEFF,query,{,a,},", []string{"query"}},
		{"a mutation after a fragment", `fragment F on T { a } mutation { ...F }`, []string{"mutation"}},

		{"empty", ``, nil},
		{"only a comment", `# mutation { a }`, nil},
		{"unterminated selection", `query { a`, nil},
		{"an extra brace", `query { a } }`, nil},
		{"a mismatched bracket", `query { a(x: [1) }`, nil},
		{"unterminated string", `{ a(s: "x) }`, nil},
		{"unterminated block string", `{ a(s: """x) }`, nil},
		{"a line break in a string", "{ a(s: \"x\n\") }", nil},
		{"an unknown escape", `{ a(s: "\q") }`, nil},
		{"a short unicode escape", `{ a(s: "\u12") }`, nil},
		{"an empty unicode escape", `{ a(s: "\u{}") }`, nil},
		{"a long unicode escape", `{ a(s: "\u{1234567}") }`, nil},
		{"a type definition", `type Query { a: Int }`, nil},
		{"a schema extension", `extend type Query { a: Int }`, nil},
		{"a keyword in capitals", `Mutation { a }`, nil},
		{"a keyword hidden in a header", `query Q mutation M { a }`, nil},
		{"a header without a selection set", `query Q`, nil},
		{"a fragment named on", `fragment on on T { a }`, nil},
		{"a fragment without a type", `fragment F { a }`, nil},
		{"a directive without a name", `query @ { a }`, nil},
		{"a malformed number", `{ a(x: 1abc) }`, nil},
		{"a leading zero", `{ a(x: 01) }`, nil},
		{"a lone minus", `{ a(x: -) }`, nil},
		{"a number without fraction digits", `{ a(x: 1.) }`, nil},
		{"a lone dot", `{ a . b }`, nil},
		{"two dots", `{ ..a }`, nil},
		{"a control character", "{ a }\x00", nil},
		{"a control character in a string", "{ a(s: \"\x01\") }", nil},
		{"a control character in a comment", "# \x01\n{ a }", nil},
		{"a non-breaking space", "query\u00a0{ a }", nil},
		{"a non-ASCII name", "{ é }", nil},
		{"invalid UTF-8", "{ a(s: \"\xff\") }", nil},
		{"a stray string", `"mutation" { a }`, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := operations(c.doc)
			switch {
			case c.want == nil && err == nil:
				t.Fatalf("read as %v, want an error", got)
			case c.want != nil && err != nil:
				t.Fatalf("error %v, want %v", err, c.want)
			case !slices.Equal(got, c.want):
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

// Every prefix of a document with a mutation either fails to read or
// finds no mutation only when the mutation keyword is not in it: the
// lexer never reads past a mutation the document holds.
func TestOperationsPrefixes(t *testing.T) {
	doc := "query A($v: S = \"\\\"}\") { a(s: \"\"\"\\\"\"\" }\"\"\") # }\n } mutation B { b }"
	for i := range len(doc) + 1 {
		ops, err := operations(doc[:i])
		if err == nil && slices.Contains(ops, "mutation") != strings.Contains(doc[:i], "mutation B {") {
			t.Errorf("prefix %q read as %v", doc[:i], ops)
		}
	}
}
