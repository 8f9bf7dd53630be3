package allowlist

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseAllowlist(t *testing.T) {
	in := `# comment
api.example.com
  *.cdn.example.com   # trailing comment

Example.ORG.
example.org
git.example.net:22
git.example.net:2222
bücher.example
example.com:443
`
	got, err := Parse(strings.NewReader(in), "hosts")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range got {
		names = append(names, e.String())
	}
	want := "*.cdn.example.com api.example.com example.com example.org git.example.net:22 git.example.net:2222 xn--bcher-kva.example"
	if strings.Join(names, " ") != want {
		t.Fatalf("entries = %q\nwant      %q", strings.Join(names, " "), want)
	}
}

func TestParseAllowlistEmptyIsValid(t *testing.T) {
	got, err := Parse(strings.NewReader("# nothing allowed\n\n"), "hosts")
	if err != nil || len(got) != 0 {
		t.Fatalf("got %v, %v; want no entries and no error", got, err)
	}
}

func TestParseAllowlistRejects(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{"10.0.0.1", "IP addresses are not allowed"},
		{"10.0.0.1:22", "IP addresses are not allowed"},
		{"[::1]:443", "IP addresses are not allowed"},
		{"::1", "IP addresses are not allowed"},
		{"1.2.3", "IP addresses are not allowed"},
		{"example.com:0", "not a number from 1 to 65535"},
		{"example.com:65536", "not a number from 1 to 65535"},
		{"example.com:ssh", "not a number from 1 to 65535"},
		{"example.com:", "not a number from 1 to 65535"},
		{"*.bad*.test", `"*" may only stand alone`},
		{"a*.example.com", `"*" may only stand alone`},
		{"*", `"*" may only stand alone`},
		{"*.*.example.com", `"*" may only stand alone`},
		{"*.com", "whole top-level domain"},
		{"*.example.com:22", "wildcard entry covers TLS on port 443 only"},
		{"a..example.com", "empty label"},
		{".example.com", "empty label"},
		{"-a.example.com", "starts or ends with '-'"},
		{"a_b.example.com", "host names use letters"},
		{strings.Repeat("a", 64) + ".example.com", "longer than 63"},
		{strings.Repeat("abcdefghi.", 26) + "com", "longer than 253"},
		{"https://example.com/", "not a URL"},
		{"example.com/path", "not a URL"},
		{"example.com other.com", "one entry per line"},
		{".", "empty host name"},
		{"example.com passthru", `unknown mark "passthru": the only mark is passthrough`},
		{"example.com:22 passthrough", "passthrough is for TLS entries on port 443"},
		{"example.com passthrough extra", "one entry per line"},
		{"10.0.0.1 passthrough", "IP addresses are not allowed"},
	} {
		t.Run(tc.line, func(t *testing.T) {
			_, err := Parse(strings.NewReader("ok.example.com\n"+tc.line+"\n"), "/cfg/allowed-hosts")
			if err == nil {
				t.Fatalf("%q accepted", tc.line)
			}
			if msg := err.Error(); !strings.Contains(msg, "/cfg/allowed-hosts: line 2: ") || !strings.Contains(msg, tc.want) {
				t.Fatalf("error %q does not name the file, line 2 and %q", msg, tc.want)
			}
		})
	}
}

// The mark keeps old files as they were: a host without it is inspected,
// one with it passes unread, and a host on two lines is passed through if
// either says so.
func TestParseAllowlistPassthrough(t *testing.T) {
	got := mustParse(t, "a.example\nb.example passthrough   # pinned\n*.c.example\tpassthrough\nd.example\nd.example passthrough\nb.example:443\n")
	want := []Entry{
		{Host: "c.example", Wildcard: true, Port: 443, Passthrough: true},
		{Host: "a.example", Port: 443},
		{Host: "b.example", Port: 443, Passthrough: true},
		{Host: "d.example", Port: 443, Passthrough: true},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("entries = %+v, want %+v", got, want)
	}
	var lines []string
	for _, e := range got {
		lines = append(lines, e.Line())
	}
	if s := strings.Join(lines, "|"); s != "*.c.example passthrough|a.example|b.example passthrough|d.example passthrough" {
		t.Errorf("lines = %s", s)
	}
}

func TestParseAllowlistReportsEveryBadLine(t *testing.T) {
	_, err := Parse(strings.NewReader("1.2.3.4\ngood.example\n*.x*.example\n"), "f")
	if err == nil || !strings.Contains(err.Error(), "f: line 1:") || !strings.Contains(err.Error(), "f: line 3:") {
		t.Fatalf("want both bad lines reported, got %v", err)
	}
	if !strings.Contains(err.Error(), "fix or remove the line") {
		t.Fatalf("error has no hint: %v", err)
	}
}

func TestParseAllowlistFileErrors(t *testing.T) {
	if _, err := ReadFile(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "cannot read allowlist") {
		t.Fatalf("missing file: %v", err)
	}
	p := filepath.Join(t.TempDir(), "hosts")
	os.WriteFile(p, []byte("good.example\nbad..example\n"), 0o644)
	if _, err := ReadFile(p); err == nil || !strings.Contains(err.Error(), p+": line 2:") {
		t.Fatalf("bad file: %v", err)
	}
}

// FuzzParseAllowlist checks that whatever parses renders to lines that parse
// to the same entries, and that no entry can smuggle config syntax.
func FuzzParseAllowlist(f *testing.F) {
	for _, s := range []string{"example.com", "*.example.com", "a.example:22", "bücher.example", "1.2.3.4", "#x\n\n a.b ", "x;y.example", "a.example\nb.example:8443"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		entries, err := Parse(strings.NewReader(in), "fuzz")
		if err != nil {
			return
		}
		var lines []string
		for _, e := range entries {
			s := e.String()
			if strings.ContainsAny(s, " \t\n;{}$\"'#/\\") {
				t.Fatalf("entry %q carries config syntax", s)
			}
			if e.Port < 1 || e.Port > 65535 {
				t.Fatalf("entry %q has port %d", s, e.Port)
			}
			lines = append(lines, s)
		}
		again, err := Parse(strings.NewReader(strings.Join(lines, "\n")), "fuzz")
		if err != nil {
			t.Fatalf("rendered entries do not parse: %v", err)
		}
		if len(again) != len(entries) {
			t.Fatalf("round trip changed %v into %v", entries, again)
		}
		for i := range again {
			if again[i] != entries[i] {
				t.Fatalf("round trip changed %v into %v", entries[i], again[i])
			}
		}
	})
}

// Real host names appear here as data only: nothing resolves or connects.
func TestLintAllowlist(t *testing.T) {
	warned := []struct{ line, want string }{
		{"*.github.io", "every GitHub Pages site"},
		{"*.workers.dev", "every Cloudflare Worker"},
		{"*.cloudfront.net", "every CloudFront distribution"},
		{"*.s3.amazonaws.com", "every S3 bucket"},
		{"*.amazonaws.com", "every AWS customer's"},
		{"*.blob.core.windows.net", "every Azure blob container"},
		{"*.herokuapp.com", "every Heroku app"},
		{"*.vercel.app", "every Vercel deployment"},
		{"*.pages.dev", "every Cloudflare Pages site"},
		{"*.azurewebsites.net", "every Azure web app"},
		{"*.appspot.com", "every App Engine app"},
		{"*.netlify.app", "every Netlify site"},
		{"*.co.uk", "every name registered under co.uk (a public suffix)"},
		{"*.run.app", "every name registered under run.app (a public suffix)"},
		{"*.ngrok.io", "a tunnel to someone's machine (ngrok.io)"},
		{"*.trycloudflare.com", "a tunnel to someone's machine (trycloudflare.com)"},
		{"*.loca.lt", "a tunnel to someone's machine (loca.lt)"},
		{"*.serveo.net", "a tunnel to someone's machine (serveo.net)"},
		{"ngrok.io", "a tunnel to someone's machine"},
		{"abc123.ngrok-free.app", "a tunnel to someone's machine (ngrok-free.app)"},
		{"pastebin.com", "a paste service (pastebin.com)"},
		{"transfer.sh", "a file drop (transfer.sh)"},
		{"webhook.site", "a request catcher (webhook.site)"},
		{"requestbin.com", "a request catcher"},
		{"eo1234.m.pipedream.net", "a request catcher (pipedream.net)"},
		{"*.oast.fun", "an out-of-band interaction catcher"},
		{"transfer.sh:2222", "a file drop"},
		{"github.com:22", "relays git over ssh unread: any key the agent brings pushes anywhere there"},
		{"gitlab.com:22", "agent-sandbox deny gitlab.com:22"},
	}
	for _, tc := range warned {
		e, err := ParseEntry(tc.line)
		if err != nil {
			t.Fatalf("%s: %v", tc.line, err)
		}
		got := Lint([]Entry{e})
		if len(got) != 1 {
			t.Errorf("%s: %d warnings %q, want 1", tc.line, len(got), got)
			continue
		}
		if !strings.Contains(got[0], "allowlist entry "+e.String()) || !strings.Contains(got[0], tc.want) {
			t.Errorf("%s: warning %q, want it to name the entry and say %q", tc.line, got[0], tc.want)
		}
	}
	quiet := []string{
		"github.com", "*.github.com", "api.github.com", "myorg.github.io", "*.myorg.github.io",
		"raw.githubusercontent.com", "*.example.com", "bucket.s3.amazonaws.com", "registry.npmjs.org",
		"*.pythonhosted.org", "git.example.com:22", "pastebin.example.com", "notngrok.io",
	}
	for _, line := range quiet {
		e, err := ParseEntry(line)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if got := Lint([]Entry{e}); len(got) != 0 {
			t.Errorf("%s: unexpected warnings %q", line, got)
		}
	}
}

func mustParse(t *testing.T, s string) []Entry {
	t.Helper()
	e, err := Parse(strings.NewReader(s), "test")
	if err != nil {
		t.Fatal(err)
	}
	return e
}
