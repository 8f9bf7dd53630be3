package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/allowlist"
	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
	"github.com/spf13/cobra"
)

// addUserCommands registers the commands that edit and show the allowlist
// and check the machine.
func addUserCommands(root *cobra.Command, ctx context.Context, set settings) {
	root.AddCommand(
		newAllowCommand(set),
		newDenyCommand(set),
		newHostsCommand(set),
		newDoctorCommand(ctx, set),
	)
}

func newAllowCommand(set settings) *cobra.Command {
	var passthrough bool
	cmd := reportFlagErrors(&cobra.Command{
		Use:   "allow [--passthrough] HOST[:PORT]...",
		Short: "Add hosts to the allowlist",
		Long: `allow appends each host that is not already in the allowlist, with a
comment saying when it was added. Comments, blank lines and the order of the
file are kept. Every argument is checked first: if one is not a valid entry,
nothing is written.

The router inspects HTTPS to the hosts it allows: it ends TLS with a
certificate of the session's own CA, which the sandbox trusts, and removes
every credential the agent sends of its own. --passthrough adds hosts that
it passes by SNI, unread, for a tool that pins its certificates: there a
key the agent brings works in anyone's name. A HOST:PORT entry is relayed
as raw TCP, unread as well: it carries any key the agent brings.`,
		Example: `  agent-sandbox allow api.openai.com         # HTTPS on port 443, inspected
  agent-sandbox allow '*.googleapis.com'     # any name under googleapis.com
  agent-sandbox allow --passthrough pinned.example.com  # TLS passed unread, by SNI
  agent-sandbox allow gitlab.example.com:22  # raw TCP to that host and port (ssh)`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if passthrough {
				marked := make([]string, len(args))
				for i, a := range args {
					marked[i] = a + " " + allowlist.PassthroughMark
				}
				args = marked
			}
			return editCommand(set, cmd.ErrOrStderr(), "allow", args, func(content []byte, entries []allowlist.Entry) ([]byte, []string) {
				return allowLines(content, entries, time.Now().Format(time.DateOnly))
			})
		},
	})
	cmd.Flags().BoolVar(&passthrough, "passthrough", false, "pass the hosts' TLS unread, by SNI (for tools that pin certificates)")
	return cmd
}

func newDenyCommand(set settings) *cobra.Command {
	return reportFlagErrors(&cobra.Command{
		Use:   "deny HOST[:PORT]...",
		Short: "Remove hosts from the allowlist",
		Long: `deny removes every line of the allowlist whose entry is HOST[:PORT]; the rest
of the file stays as it is. Entries are compared after normalisation, so
Example.COM. and example.com:443 both remove example.com. A wildcard is only
removed by naming the wildcard itself.`,
		Example: `  agent-sandbox deny crates.io
  agent-sandbox deny github.com:22 '*.example.com'`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return editCommand(set, cmd.ErrOrStderr(), "deny", args, denyLines)
		},
	})
}

func newHostsCommand(set settings) *cobra.Command {
	return reportFlagErrors(&cobra.Command{
		Use:   "hosts",
		Short: "Print the effective allowlist",
		Long: `hosts prints the allowlist as sessions see it: one normalised entry a line,
sorted, duplicates merged, comments dropped. The file's path goes to stderr.`,
		Example: `  agent-sandbox hosts
  agent-sandbox hosts 2>/dev/null | grep github`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return refusef("hosts takes no arguments; to add one use: agent-sandbox allow %s", args[0])
			}
			entries, err := loadAllowlist(set.allowlist, cmd.ErrOrStderr())
			if err != nil {
				return refused(err)
			}
			iostreams.Say(cmd.ErrOrStderr(), "%s: %s", set.allowlist, countEntries(len(entries)))
			for _, e := range entries {
				fmt.Fprintln(cmd.OutOrStdout(), e.Line())
			}
			return nil
		},
	})
}

func countEntries(n int) string {
	switch n {
	case 0:
		return "no entries: sessions have no network"
	case 1:
		return "1 entry"
	}
	return fmt.Sprintf("%d entries", n)
}

// editCommand runs allow or deny on the allowlist, saying on errOut what
// it did.
func editCommand(set settings, errOut io.Writer, name string, args []string, edit editFunc) error {
	if len(args) == 0 {
		return refusef("%s needs at least one host, as in: agent-sandbox %s api.example.com", name, name)
	}
	msgs, err := editAllowlist(set.allowlist, errOut, args, edit)
	if err != nil {
		return refused(err)
	}
	for _, m := range msgs {
		iostreams.Say(errOut, "%s", m)
	}
	if name == "allow" {
		// The moment of adding a risky host is when the warning helps;
		// the arguments parsed inside editAllowlist already.
		entries, _ := parseHostArgs(args)
		for _, w := range allowlist.Lint(entries) {
			iostreams.Say(errOut, "%s", w)
		}
		for _, e := range entries {
			switch {
			case e.Passthrough:
				iostreams.Say(errOut, "%s passes unread: the router cannot remove a key the agent brings there, so the agent can act on it in anyone's name", e)
			case e.Port != allowlist.TLSPort:
				iostreams.Say(errOut, "%s is relayed unread, as raw TCP: it carries any key or credential the agent brings (someone else's ssh key pushes anywhere through github.com:22); a host without a port is HTTPS, which the router inspects", e)
			}
		}
	}
	return nil
}

// editFunc turns the allowlist's bytes into new bytes and says what changed.
type editFunc func(content []byte, entries []allowlist.Entry) ([]byte, []string)

// parseHostArgs checks every argument before anything is written, and
// reports all the bad ones at once.
func parseHostArgs(args []string) ([]allowlist.Entry, error) {
	var (
		entries []allowlist.Entry
		errs    []string
	)
	for _, a := range args {
		e, err := allowlist.ParseEntry(a)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%q: %v", a, err))
			continue
		}
		entries = append(entries, e)
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "\n") + "\nnothing was changed; fix the arguments and run it again")
	}
	return entries, nil
}

// editAllowlist applies edit to the allowlist at path. A file that does not
// parse is left alone: editing around a bad line could make it worse.
func editAllowlist(path string, errOut io.Writer, args []string, edit editFunc) ([]string, error) {
	entries, err := parseHostArgs(args)
	if err != nil {
		return nil, err
	}
	if err := ensureAllowlist(path, errOut); err != nil {
		return nil, err
	}
	// Write through a symlink (a dotfiles repo, say) rather than replace it.
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read allowlist: %w", err)
	}
	unlock, err := lockAllowlistDir(filepath.Dir(real))
	if err != nil {
		return nil, err
	}
	defer unlock()
	content, err := os.ReadFile(real)
	if err != nil {
		return nil, fmt.Errorf("cannot read allowlist: %w", err)
	}
	if _, err := allowlist.Parse(bytes.NewReader(content), path); err != nil {
		return nil, fmt.Errorf("refusing to edit the allowlist until it parses:\n%w", err)
	}
	out, msgs := edit(content, entries)
	if !bytes.Equal(out, content) {
		if err := writeAllowlist(real, out); err != nil {
			return nil, err
		}
	}
	return msgs, nil
}

// lockAllowlistDir serialises concurrent allow and deny runs: the file is
// replaced by rename, so its own inode cannot carry the lock.
func lockAllowlistDir(dir string) (func(), error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("cannot lock the allowlist's directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("cannot lock the allowlist's directory %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}

// writeAllowlist replaces the allowlist at path with data, durably, and
// keeps its mode.
func writeAllowlist(path string, data []byte) error {
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	dir := filepath.Dir(path)
	made, err := replaceFile(path, data, mode, true)
	switch {
	case err == nil:
		return nil
	case !made:
		return fmt.Errorf("cannot write the allowlist %s (it is unchanged): %w; check that you may write to %s", path, err, dir)
	}
	return fmt.Errorf("cannot write the allowlist %s (it is unchanged): %w; check the space and permissions of %s", path, err, dir)
}

// rawLine is one line of the file with its terminator ("\n", "\r\n" or,
// for a last line without one, nothing).
type rawLine struct {
	text []byte // without the terminator
	eol  []byte
}

func splitRawLines(content []byte) []rawLine {
	var lines []rawLine
	for len(content) > 0 {
		i := bytes.IndexByte(content, '\n')
		if i < 0 {
			lines = append(lines, rawLine{text: content})
			break
		}
		text, eol := content[:i], content[i:i+1]
		if len(text) > 0 && text[len(text)-1] == '\r' {
			text, eol = content[:i-1], content[i-1:i+1]
		}
		lines = append(lines, rawLine{text: text, eol: eol})
		content = content[i+1:]
	}
	return lines
}

// lineEntry is the entry on a line, read the way parseAllowlistFrom reads
// it; ok is false for blank, comment-only and bad lines.
func lineEntry(text []byte) (allowlist.Entry, bool) {
	e, s, err := allowlist.ParseLine(string(text))
	return e, s != "" && err == nil
}

// fileNewline is the file's own line ending, so that a CRLF file stays CRLF.
func fileNewline(lines []rawLine) string {
	for _, l := range lines {
		if len(l.eol) > 0 {
			return string(l.eol)
		}
	}
	return "\n"
}

// allowCommentColumn (1-based) lines new comments up with the shipped file's.
const allowCommentColumn = 30

// allowLines appends the entries that content does not have yet, each
// with a comment dated date, and says for each entry what it did.
func allowLines(content []byte, entries []allowlist.Entry, date string) ([]byte, []string) {
	lines := splitRawLines(content)
	have := map[allowlist.Entry]allowlist.Entry{}
	for _, l := range lines {
		if e, ok := lineEntry(l.text); ok {
			// A host on two lines is passed through if either says so.
			if prev, ok := have[e.Key()]; ok {
				e.Passthrough = e.Passthrough || prev.Passthrough
			}
			have[e.Key()] = e
		}
	}
	nl := fileNewline(lines)
	out := bytes.Clone(content)
	if len(lines) > 0 && len(lines[len(lines)-1].eol) == 0 {
		out = append(out, nl...)
	}
	var msgs []string
	added := false
	for _, e := range entries {
		prev, ok := have[e.Key()]
		switch {
		case ok && prev.Passthrough == e.Passthrough:
			msgs = append(msgs, e.Line()+" was already allowed")
			continue
		case ok && prev.Passthrough:
			// The passthrough line would still win over a new one.
			msgs = append(msgs, fmt.Sprintf("%s is allowed as passthrough; to have it inspected, run: agent-sandbox deny %s, then agent-sandbox allow %s", e, e, e))
			continue
		}
		have[e.Key()], added = e, true
		out = fmt.Appendf(out, "%-*s # added by agent-sandbox allow on %s%s", allowCommentColumn-2, e.Line(), date, nl)
		msgs = append(msgs, "allowed "+e.Line())
	}
	if !added {
		// Nothing new: leave even a missing final newline alone.
		return content, msgs
	}
	return out, msgs
}

// denyLines drops every line whose entry is one of entries; every other
// byte of content stays as it was.
func denyLines(content []byte, entries []allowlist.Entry) ([]byte, []string) {
	drop := map[allowlist.Entry]bool{}
	for _, e := range entries {
		drop[e.Key()] = true
	}
	removed := map[allowlist.Entry]bool{}
	var (
		out  []byte
		kept []allowlist.Entry
	)
	for _, l := range splitRawLines(content) {
		e, ok := lineEntry(l.text)
		if ok && drop[e.Key()] {
			removed[e.Key()] = true
			continue
		}
		if ok {
			kept = append(kept, e)
		}
		out = append(out, l.text...)
		out = append(out, l.eol...)
	}
	var msgs []string
	done := map[allowlist.Entry]bool{}
	for _, e := range entries {
		if e = e.Key(); done[e] {
			continue
		}
		done[e] = true
		msg := e.String() + " was not in the allowlist"
		if removed[e] {
			msg = "denied " + e.String()
		}
		// Naming a host under an allowed wildcard does not block it.
		if w, ok := coveringWildcard(e, kept); ok {
			msg += fmt.Sprintf("; %s still allows it: to block it, run: agent-sandbox deny '%s'", w, w)
		}
		msgs = append(msgs, msg)
	}
	if len(removed) == 0 {
		return content, msgs
	}
	return out, msgs
}

// coveringWildcard finds a wildcard in list that admits e: the router
// matches *.domain against any name under domain, on port 443.
func coveringWildcard(e allowlist.Entry, list []allowlist.Entry) (allowlist.Entry, bool) {
	if e.Port != allowlist.TLSPort {
		return allowlist.Entry{}, false
	}
	for _, w := range list {
		if w.Wildcard && w.Key() != e.Key() && w.Admits(e.Host) {
			return w, true
		}
	}
	return allowlist.Entry{}, false
}
