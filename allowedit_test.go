package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/allowlist"
	"github.com/spf13/cobra"
)

const testDate = "2026-11-30"

func mustEntries(t *testing.T, args ...string) []allowlist.Entry {
	t.Helper()
	es, err := parseHostArgs(args)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// addedLine is the line allow appends for host.
func addedLine(host string) string {
	return host + strings.Repeat(" ", allowCommentColumn-2-len(host)) + " # added by agent-sandbox allow on " + testDate
}

func TestAllowLines(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		args     []string
		want     string
		msgs     []string
	}{
		{
			name: "appends after comments and blank lines",
			in:   "# head\n\napi.example.com   # inline\n\n# tail\n",
			args: []string{"new.example.com"},
			want: "# head\n\napi.example.com   # inline\n\n# tail\n" + addedLine("new.example.com") + "\n",
			msgs: []string{"allowed new.example.com"},
		},
		{
			name: "normalised duplicates are already allowed",
			in:   "example.com # inline comment\ngit.example.com:22\n",
			args: []string{"Example.COM.", "example.com:443", "GIT.example.com:22"},
			want: "example.com # inline comment\ngit.example.com:22\n",
			msgs: []string{"example.com was already allowed", "example.com was already allowed", "git.example.com:22 was already allowed"},
		},
		{
			name: "a repeated argument is added once",
			in:   "",
			args: []string{"a.example.com", "A.example.com."},
			want: addedLine("a.example.com") + "\n",
			msgs: []string{"allowed a.example.com", "a.example.com was already allowed"},
		},
		{
			name: "CRLF file stays CRLF",
			in:   "# head\r\na.example.com\r\n",
			args: []string{"b.example.com:8443"},
			want: "# head\r\na.example.com\r\n" + addedLine("b.example.com:8443") + "\r\n",
			msgs: []string{"allowed b.example.com:8443"},
		},
		{
			name: "no trailing newline gets one before the new line",
			in:   "a.example.com # last",
			args: []string{"*.b.example.com"},
			want: "a.example.com # last\n" + addedLine("*.b.example.com") + "\n",
			msgs: []string{"allowed *.b.example.com"},
		},
		{
			name: "CRLF without trailing newline",
			in:   "a.example.com\r\n# last",
			args: []string{"b.example.com"},
			want: "a.example.com\r\n# last\r\n" + addedLine("b.example.com") + "\r\n",
			msgs: []string{"allowed b.example.com"},
		},
		{
			name: "nothing new leaves a missing final newline alone",
			in:   "a.example.com",
			args: []string{"a.example.com"},
			want: "a.example.com",
			msgs: []string{"a.example.com was already allowed"},
		},
		{
			name: "an entry only in a comment is not allowed",
			in:   "# b.example.com\n",
			args: []string{"b.example.com"},
			want: "# b.example.com\n" + addedLine("b.example.com") + "\n",
			msgs: []string{"allowed b.example.com"},
		},
		{
			name: "unicode is stored as IDNA",
			in:   "",
			args: []string{"Bücher.example"},
			want: addedLine("xn--bcher-kva.example") + "\n",
			msgs: []string{"allowed xn--bcher-kva.example"},
		},
		{
			name: "a long name still gets its comment",
			in:   "",
			args: []string{"a-rather-long-host-name.example.com"},
			want: "a-rather-long-host-name.example.com # added by agent-sandbox allow on " + testDate + "\n",
			msgs: []string{"allowed a-rather-long-host-name.example.com"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, msgs := allowLines([]byte(tc.in), mustEntries(t, tc.args...), testDate)
			if string(got) != tc.want {
				t.Errorf("content =\n%q\nwant\n%q", got, tc.want)
			}
			if strings.Join(msgs, "|") != strings.Join(tc.msgs, "|") {
				t.Errorf("msgs = %q, want %q", msgs, tc.msgs)
			}
			// Whatever allow writes must parse and hold every argument.
			parsed, err := allowlist.Parse(bytes.NewReader(got), "out")
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range mustEntries(t, tc.args...) {
				if !containsEntry(parsed, e) {
					t.Errorf("%s missing from %v", e, parsed)
				}
			}
		})
	}
}

func containsEntry(list []allowlist.Entry, e allowlist.Entry) bool {
	for _, x := range list {
		if x == e {
			return true
		}
	}
	return false
}

func TestAllowLinesMatchesShippedLayout(t *testing.T) {
	got, _ := allowLines(nil, mustEntries(t, "api.example.com"), testDate)
	var shipped string
	for _, l := range strings.Split(string(defaultAllowlist), "\n") {
		if strings.HasPrefix(l, "api.anthropic.com") {
			shipped = l
		}
	}
	if shipped == "" || strings.IndexByte(string(got), '#') != strings.IndexByte(shipped, '#') {
		t.Fatalf("comment column of %q differs from the shipped %q", got, shipped)
	}
}

func TestDenyLines(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		args     []string
		want     string
		msgs     []string
	}{
		{
			name: "removes every matching line and keeps the rest byte for byte",
			in:   "# keep me\n  Example.com.   # inline\n\nother.example.com\nexample.com:443\n# example.com in a comment\n\texample.com:22 # ssh\n",
			args: []string{"example.com"},
			want: "# keep me\n\nother.example.com\n# example.com in a comment\n\texample.com:22 # ssh\n",
			msgs: []string{"denied example.com"},
		},
		{
			name: "a port entry is removed only by naming its port",
			in:   "example.com\nexample.com:22\n",
			args: []string{"example.com:22"},
			want: "example.com\n",
			msgs: []string{"denied example.com:22"},
		},
		{
			name: "absent entries leave the file untouched",
			in:   "a.example.com",
			args: []string{"b.example.com", "a.example.com:22"},
			want: "a.example.com",
			msgs: []string{"b.example.com was not in the allowlist", "a.example.com:22 was not in the allowlist"},
		},
		{
			name: "CRLF",
			in:   "# c\r\na.example.com\r\nb.example.com\r\n",
			args: []string{"a.example.com"},
			want: "# c\r\nb.example.com\r\n",
			msgs: []string{"denied a.example.com"},
		},
		{
			name: "last line without newline",
			in:   "a.example.com\nb.example.com",
			args: []string{"b.example.com"},
			want: "a.example.com\n",
			msgs: []string{"denied b.example.com"},
		},
		{
			name: "keeps a missing final newline on the lines that stay",
			in:   "a.example.com\nb.example.com",
			args: []string{"a.example.com"},
			want: "b.example.com",
			msgs: []string{"denied a.example.com"},
		},
		{
			name: "a repeated argument is reported once",
			in:   "a.example.com\n",
			args: []string{"a.example.com", "A.EXAMPLE.COM"},
			want: "",
			msgs: []string{"denied a.example.com"},
		},
		{
			name: "a wildcard is removed only by naming it",
			in:   "*.example.com\nexample.com\n",
			args: []string{"*.example.com"},
			want: "example.com\n",
			msgs: []string{"denied *.example.com"},
		},
		{
			name: "a host under a wildcard that stays is called out",
			in:   "*.example.com\napi.example.com\n",
			args: []string{"api.example.com", "deep.api.example.com", "example.com"},
			want: "*.example.com\n",
			msgs: []string{
				"denied api.example.com; *.example.com still allows it: to block it, run: agent-sandbox deny '*.example.com'",
				"deep.api.example.com was not in the allowlist; *.example.com still allows it: to block it, run: agent-sandbox deny '*.example.com'",
				"example.com was not in the allowlist",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, msgs := denyLines([]byte(tc.in), mustEntries(t, tc.args...))
			if string(got) != tc.want {
				t.Errorf("content =\n%q\nwant\n%q", got, tc.want)
			}
			if strings.Join(msgs, "|") != strings.Join(tc.msgs, "|") {
				t.Errorf("msgs =\n%q\nwant\n%q", msgs, tc.msgs)
			}
		})
	}
}

func TestDenyThenAllowRoundTrips(t *testing.T) {
	in := []byte(defaultAllowlist)
	out, _ := denyLines(in, mustEntries(t, "crates.io"))
	if bytes.Contains(out, []byte("\ncrates.io ")) || len(in)-len(out) != len("crates.io                    # Rust crates index API\n") {
		t.Fatalf("deny removed more or less than the crates.io line")
	}
	out, _ = allowLines(out, mustEntries(t, "crates.io"), testDate)
	a, err1 := allowlist.Parse(bytes.NewReader(in), "in")
	b, err2 := allowlist.Parse(bytes.NewReader(out), "out")
	if err1 != nil || err2 != nil || len(a) != len(b) {
		t.Fatalf("entries before %d, after %d (%v, %v)", len(a), len(b), err1, err2)
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("entry %d: %s != %s", i, a[i], b[i])
		}
	}
}

func TestAllowDenyParseArgsRefusesAllBadOnes(t *testing.T) {
	_, err := parseHostArgs([]string{"good.example.com", "10.0.0.1", "https://x.example.com/", "*.com", ""})
	if err == nil {
		t.Fatal("bad arguments accepted")
	}
	for _, want := range []string{`"10.0.0.1": IP addresses`, `"https://x.example.com/": write a host name`, `"*.com": `, `"": empty host name`, "nothing was changed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "good.example.com") {
		t.Errorf("error names a good argument:\n%v", err)
	}
}

func writeTestFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func allowEdit(date string) editFunc {
	return func(c []byte, e []allowlist.Entry) ([]byte, []string) { return allowLines(c, e, date) }
}

func TestAllowEditsFileInPlaceAndKeepsMode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "allowed-hosts")
	writeTestFile(t, path, "# mine\na.example.com\n", 0o600)
	msgs, err := editAllowlist(path, io.Discard, []string{"b.example.com"}, allowEdit(testDate))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(msgs, "|") != "allowed b.example.com" {
		t.Errorf("msgs = %q", msgs)
	}
	b, _ := os.ReadFile(path)
	if string(b) != "# mine\na.example.com\n"+addedLine("b.example.com")+"\n" {
		t.Errorf("file = %q", b)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600", fi.Mode().Perm())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("temp files left behind: %v", ents)
	}
}

func TestAllowWritesThroughASymlink(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "dotfiles-hosts")
	link := filepath.Join(dir, "allowed-hosts")
	writeTestFile(t, real, "a.example.com\n", 0o644)
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if _, err := editAllowlist(link, io.Discard, []string{"b.example.com"}, allowEdit(testDate)); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the symlink was replaced: %v %v", fi.Mode(), err)
	}
	if b, _ := os.ReadFile(real); !strings.Contains(string(b), "b.example.com") {
		t.Fatalf("target not edited: %q", b)
	}
}

func TestAllowDenyRefuseABadFileOrBadArgs(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "allowed-hosts")
	bad := "# ok\na.example.com\nhttps://bad.example.com/\n"
	writeTestFile(t, path, bad, 0o644)
	before, _ := os.Stat(path)
	for _, edit := range []editFunc{allowEdit(testDate), denyLines} {
		_, err := editAllowlist(path, io.Discard, []string{"a.example.com"}, edit)
		if err == nil || !strings.Contains(err.Error(), "refusing to edit") || !strings.Contains(err.Error(), "line 3") {
			t.Errorf("err = %v, want a refusal naming line 3", err)
		}
	}
	writeTestFile(t, path, "a.example.com\n", 0o644)
	before, _ = os.Stat(path)
	if _, err := editAllowlist(path, io.Discard, []string{"b.example.com", "bad..example.com"}, allowEdit(testDate)); err == nil {
		t.Error("a bad argument was accepted")
	}
	b, _ := os.ReadFile(path)
	after, _ := os.Stat(path)
	if string(b) != "a.example.com\n" || !os.SameFile(before, after) {
		t.Errorf("file changed after a refused command: %q", b)
	}
}

func TestDenyWithNothingToRemoveDoesNotRewrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "allowed-hosts")
	writeTestFile(t, path, "a.example.com\n", 0o644)
	before, _ := os.Stat(path)
	msgs, err := editAllowlist(path, io.Discard, []string{"b.example.com"}, denyLines)
	if err != nil || strings.Join(msgs, "|") != "b.example.com was not in the allowlist" {
		t.Fatalf("msgs = %q, err = %v", msgs, err)
	}
	after, _ := os.Stat(path)
	if !os.SameFile(before, after) {
		t.Error("the file was replaced though nothing changed")
	}
}

// runUserCommand runs args through the real command tree with the user
// commands added, on a machine whose environment is env, and returns the
// exit code and stdout.
func runUserCommand(t *testing.T, env map[string]string, args ...string) (int, string) {
	t.Helper()
	code, out, _ := runCLIIn(t, env, "", args...)
	return code, out
}

// userCommandEnv is an environment that names an allowlist at path, which
// does not exist yet.
func userCommandEnv(t *testing.T) (path string, env map[string]string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "cfg", "allowed-hosts")
	return path, map[string]string{"AGENT_SANDBOX_ALLOWLIST": path}
}

func TestAllowDenyHostsCommands(t *testing.T) {
	path, env := userCommandEnv(t)
	// A missing allowlist is seeded from the defaults first.
	if code, _ := runUserCommand(t, env, "allow", "Extra.example.com"); code != 0 {
		t.Fatalf("allow exit %d", code)
	}
	seeded, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(seeded), "\nextra.example.com ") ||
		!strings.Contains(string(seeded), "# added by agent-sandbox allow on "+time.Now().Format(time.DateOnly)) {
		t.Fatalf("allowlist = %q, %v", seeded, err)
	}
	if code, _ := runUserCommand(t, env, "deny", "crates.io", "extra.example.com"); code != 0 {
		t.Fatalf("deny exit %d", code)
	}
	code, out := runUserCommand(t, env, "hosts")
	if code != 0 {
		t.Fatalf("hosts exit %d", code)
	}
	want, _ := allowlist.Parse(bytes.NewReader(seeded), "seeded")
	var lines []string
	for _, e := range want {
		if e.Host != "crates.io" && e.Host != "extra.example.com" {
			lines = append(lines, e.String())
		}
	}
	if out != strings.Join(lines, "\n")+"\n" {
		t.Fatalf("hosts =\n%s\nwant\n%s", out, strings.Join(lines, "\n"))
	}
	for _, args := range [][]string{
		{"allow"}, {"deny"}, {"allow", "10.0.0.1"}, {"deny", "x.example.com/path"}, {"hosts", "extra"},
		{"allow", "--bogus", "a.example.com"}, {"doctor", "extra"},
	} {
		before, _ := os.ReadFile(path)
		if code, _ := runUserCommand(t, env, args...); code != 1 {
			t.Errorf("%v: exit %d, want 1", args, code)
		}
		if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
			t.Errorf("%v changed the file", args)
		}
	}
}

// allow --passthrough adds the mark and warns; hosts shows it; deny
// removes the host whatever its mark.
func TestAllowPassthroughHostsDeny(t *testing.T) {
	path, env := userCommandEnv(t)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("a.example\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLIIn(t, env, "", "allow", "--passthrough", "pinned.example")
	if code != 0 || !strings.Contains(stderr, "allowed pinned.example passthrough") ||
		!strings.Contains(stderr, "pinned.example passes unread: the router cannot remove a key the agent brings there") {
		t.Fatalf("allow --passthrough: exit %d, stderr:\n%s", code, stderr)
	}
	if code, _, stderr := runCLIIn(t, env, "", "allow", "pinned.example"); code != 0 || !strings.Contains(stderr, "pinned.example is allowed as passthrough; to have it inspected") {
		t.Errorf("allow of a passthrough host: exit %d, stderr:\n%s", code, stderr)
	}
	if code, out := runUserCommand(t, env, "hosts"); code != 0 || out != "a.example\npinned.example passthrough\n" {
		t.Errorf("hosts: exit %d, out %q", code, out)
	}
	if code, _ := runUserCommand(t, env, "allow", "--passthrough", "ssh.example:22"); code != 1 {
		t.Errorf("allow --passthrough of a host:port entry: exit %d, want 1", code)
	}
	if code, _ := runUserCommand(t, env, "deny", "pinned.example"); code != 0 {
		t.Fatalf("deny exit %d", code)
	}
	if b, _ := os.ReadFile(path); string(b) != "a.example\n" {
		t.Errorf("after deny the file is %q", b)
	}
}

func TestHostsRefusesABadAllowlist(t *testing.T) {
	path, env := userCommandEnv(t)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, path, "ok.example.com\n1.2.3.4\n", 0o644)
	if code, out := runUserCommand(t, env, "hosts"); code != 1 || out != "" {
		t.Fatalf("hosts on a bad list: exit %d, stdout %q", code, out)
	}
}

func TestAllowDenyHostsDoctorHaveHelpWithExamples(t *testing.T) {
	root := &cobra.Command{Use: "agent-sandbox"}
	addUserCommands(root, context.Background(), settingsFrom(nil))
	for _, name := range []string{"allow", "deny", "hosts", "doctor"} {
		c, _, err := root.Find([]string{name})
		if err != nil || c.Name() != name {
			t.Fatalf("%s not registered: %v", name, err)
		}
		if c.Example == "" || c.Short == "" || c.Long == "" {
			t.Errorf("%s lacks Short, Long or Example", name)
		}
		var out bytes.Buffer
		c.SetOut(&out)
		if err := c.Help(); err != nil || !strings.Contains(out.String(), "agent-sandbox "+name) {
			t.Errorf("%s --help: %v\n%s", name, err, out.String())
		}
	}
}

func TestAllowWarnsAboutRiskyHostsButAddsThem(t *testing.T) {
	path, env := userCommandEnv(t)
	code, _, msg := runCLIIn(t, env, "", "allow", "*.workers.dev", "api.example.com")
	if code != 0 {
		t.Fatalf("allow exit %d", code)
	}
	if !strings.Contains(msg, "agent-sandbox: allowlist entry *.workers.dev:") || strings.Contains(msg, "entry api.example.com") {
		t.Errorf("stderr should warn about *.workers.dev only:\n%s", msg)
	}
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), "\n*.workers.dev") {
		t.Errorf("a warned entry is still added; allowlist:\n%s", b)
	}
}

// A HOST:PORT entry is relayed as raw TCP, unread: allow says so, and says
// nothing of the kind for a plain (inspected) host.
func TestAllowWarnsThatRawTCPIsUnread(t *testing.T) {
	path, env := userCommandEnv(t)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, path, "a.example\n", 0o644)
	code, _, msg := runCLIIn(t, env, "", "allow", "ssh.example:22", "api.example.com")
	if code != 0 {
		t.Fatalf("allow exit %d, stderr:\n%s", code, msg)
	}
	if !strings.Contains(msg, "agent-sandbox: ssh.example:22 is relayed unread, as raw TCP: it carries any key or credential the agent brings") ||
		!strings.Contains(msg, "which the router inspects") {
		t.Errorf("stderr should warn that ssh.example:22 is relayed unread:\n%s", msg)
	}
	if strings.Contains(msg, "api.example.com is relayed") || strings.Count(msg, "relayed unread") != 1 {
		t.Errorf("stderr should warn about ssh.example:22 only:\n%s", msg)
	}
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), "\nssh.example:22 ") {
		t.Errorf("a warned entry is still added; allowlist:\n%s", b)
	}
	if code, _, msg := runCLIIn(t, env, "", "allow", "plain.example"); code != 0 || strings.Contains(msg, "relayed unread") {
		t.Errorf("allow of a plain host: exit %d, stderr:\n%s", code, msg)
	}
}
