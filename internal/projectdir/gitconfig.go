package projectdir

import (
	"bytes"
	"strings"
)

// ConfigEntry is one variable of a git config file.
type ConfigEntry struct {
	// Name is section[.subsection].key as git spells it in `git config`:
	// section and key lowercased, the subsection as written.
	Name  string
	Value string
	// Bare is a key written without "=", which git reads as true.
	Bare bool
	Line int
}

// Section, Subsection and Key split Name.
func (e ConfigEntry) parts() (section, subsection, key string) {
	first := strings.IndexByte(e.Name, '.')
	last := strings.LastIndexByte(e.Name, '.')
	section, key = e.Name[:first], e.Name[last+1:]
	if first != last {
		subsection = e.Name[first+1 : last]
	}
	return
}

// parseGitConfig reads git's config syntax as git does for what matters
// here: sections with and without subsections, quoted values, escapes,
// continuation lines and comments. A line git would reject is skipped:
// git then refuses the whole file, and runs nothing from it.
func parseGitConfig(data []byte) []ConfigEntry {
	// git skips a UTF-8 byte order mark at the start of the file.
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	p := configParser{src: string(data), line: 1}
	return p.parse()
}

type configParser struct {
	src     string
	pos     int
	line    int
	section string // "core" or `remote.origin`
	out     []ConfigEntry
}

func (p *configParser) peek() (byte, bool) {
	if p.pos >= len(p.src) {
		return 0, false
	}
	return p.src[p.pos], true
}

func (p *configParser) next() (byte, bool) {
	c, ok := p.peek()
	if ok {
		p.pos++
		if c == '\n' {
			p.line++
		}
	}
	return c, ok
}

func (p *configParser) skipLine() {
	for {
		c, ok := p.next()
		if !ok || c == '\n' {
			return
		}
	}
}

func (p *configParser) parse() []ConfigEntry {
	for {
		c, ok := p.peek()
		if !ok {
			return p.out
		}
		switch {
		case c == '\n' || c == ' ' || c == '\t' || c == '\r':
			p.next()
		case c == '#' || c == ';':
			p.skipLine()
		case c == '[':
			p.next()
			if !p.header() {
				p.section = ""
				p.skipLine()
			}
		case isAlpha(c):
			if p.section == "" {
				p.skipLine()
				continue
			}
			p.variable()
		default:
			p.skipLine()
		}
	}
}

// header reads `[section]`, `[section "sub"]` or `[section.sub]` after
// its '['.
func (p *configParser) header() bool {
	var name strings.Builder
	for {
		c, ok := p.next()
		if !ok || c == '\n' {
			return false
		}
		switch {
		case c == ']':
			// The old [section.sub] form: the whole name lowercased.
			p.section = strings.ToLower(name.String())
			return p.section != ""
		case c == ' ' || c == '\t' || c == '\r':
			return p.subsection(strings.ToLower(name.String()))
		case isAlnum(c) || c == '-' || c == '.':
			name.WriteByte(c)
		default:
			return false
		}
	}
}

func (p *configParser) subsection(section string) bool {
	for {
		c, ok := p.next()
		if !ok || c == '\n' {
			return false
		}
		if c == ' ' || c == '\t' || c == '\r' {
			continue
		}
		if c != '"' {
			return false
		}
		break
	}
	var sub strings.Builder
	for {
		c, ok := p.next()
		if !ok || c == '\n' {
			return false
		}
		switch c {
		case '\\':
			c, ok = p.next()
			if !ok || c == '\n' {
				return false
			}
			sub.WriteByte(c)
		case '"':
			if c, ok := p.next(); !ok || c != ']' {
				return false
			}
			p.section = section + "." + sub.String()
			return section != ""
		default:
			sub.WriteByte(c)
		}
	}
}

func (p *configParser) variable() {
	line := p.line
	var key strings.Builder
	for {
		c, ok := p.peek()
		if !ok || !(isAlnum(c) || c == '-') {
			break
		}
		key.WriteByte(c)
		p.next()
	}
	for {
		c, ok := p.peek()
		if !ok || (c != ' ' && c != '\t') {
			break
		}
		p.next()
	}
	e := ConfigEntry{Name: p.section + "." + strings.ToLower(key.String()), Line: line}
	c, ok := p.peek()
	switch {
	case !ok || c == '\n' || c == '#' || c == ';' || c == '\r':
		e.Bare = true
		e.Value = "true"
		p.skipLine()
	case c == '=':
		p.next()
		v, ok := p.value()
		if !ok {
			return
		}
		// git holds values as C strings: a NUL ends one.
		if i := strings.IndexByte(v, 0); i >= 0 {
			v = v[:i]
		}
		e.Value = v
	default:
		p.skipLine()
		return
	}
	p.out = append(p.out, e)
}

// value reads a value up to the end of its line, as git does: outer
// whitespace trimmed, inner kept, quotes preserve, escapes and
// continuation lines.
func (p *configParser) value() (string, bool) {
	var b strings.Builder
	quoted := false
	pending := 0 // whitespace seen outside quotes, kept only if more follows
	for {
		c, ok := p.next()
		if !ok || (c == '\n' && !quoted) {
			return b.String(), true
		}
		if c == '\n' {
			// A newline inside quotes: git refuses the file.
			return "", false
		}
		if !quoted && (c == ' ' || c == '\t' || c == '\r') {
			if b.Len() > 0 {
				pending++
			}
			continue
		}
		if !quoted && (c == '#' || c == ';') {
			p.skipLine()
			return b.String(), true
		}
		for ; pending > 0; pending-- {
			b.WriteByte(' ')
		}
		switch c {
		case '"':
			quoted = !quoted
		case '\\':
			c, ok = p.next()
			switch {
			case !ok:
				return b.String(), true
			case c == '\n':
				// Continuation.
			case c == 'n':
				b.WriteByte('\n')
			case c == 't':
				b.WriteByte('\t')
			case c == 'b':
				// git keeps the backspace byte itself.
				b.WriteByte('\b')
			case c == '"' || c == '\\':
				b.WriteByte(c)
			default:
				return "", false
			}
		default:
			b.WriteByte(c)
		}
	}
}

func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isAlnum(c byte) bool { return isAlpha(c) || c >= '0' && c <= '9' }

// runsCommand says what git does with a config variable that makes it run
// a program or read more config, or "" for one that does neither. From
// git-config(1): every key whose value is a command, a program's path or
// another place to read config or hooks from.
func runsCommand(e ConfigEntry) string {
	section, sub, key := e.parts()
	v := strings.ToLower(e.Value)
	isBool := v == "true" || v == "false" || v == "yes" || v == "no" || v == "on" || v == "off" || v == "1" || v == "0" || e.Bare
	switch section + "." + key {
	case "core.fsmonitor":
		if !isBool {
			return "runs it at every git status"
		}
	case "core.hookspath":
		return "runs its hooks from there"
	case "core.pager":
		return "pipes git's output through it"
	case "core.editor", "sequence.editor":
		return "runs it to edit messages"
	case "core.askpass":
		return "runs it to ask for passwords"
	case "core.sshcommand":
		return "runs it for ssh remotes"
	case "core.gitproxy":
		return "runs it for git:// remotes"
	case "core.alternaterefscommand":
		return "runs it on fetch and push"
	case "core.worktree":
		return "takes the work tree from there"
	case "diff.external":
		return "runs it for git diff"
	case "credential.helper":
		return "runs it and hands it credentials"
	case "gpg.program":
		return "runs it to sign and verify"
	case "imap.tunnel":
		return "runs it for git imap-send"
	case "sendemail.smtpserver":
		if strings.HasPrefix(e.Value, "/") {
			return "runs it for git send-email"
		}
	case "protocol.allow":
		return "allows transports (ext:: runs a command)"
	case "http.proxy":
		return "sends remote traffic there"
	case "uploadpack.packobjectshook":
		return "runs it to serve fetches"
	case "interactive.difffilter":
		return "runs it for git add -p"
	case "web.browser":
		return "runs it to open pages"
	case "include.path":
		return "reads more config from there"
	case "extensions.worktreeconfig":
		return "reads config.worktree as config"
	}
	switch e.Name {
	case "gpg.ssh.program", "gpg.ssh.defaultkeycommand", "gpg.x509.program", "gpg.openpgp.program":
		return "runs it to sign and verify"
	}
	switch {
	case section == "alias" && (strings.HasPrefix(e.Value, "!") || strings.Contains(e.Value, "-c ") || strings.Contains(e.Value, "--config-env")):
		return "runs it as git " + key
	case section == "tar" && key == "command":
		return "runs it for git archive"
	case section == "lfs" && (key == "path" || key == "clean" || key == "smudge" || key == "process"):
		return "git-lfs runs it"
	case section == "hook" && (key == "command" || key == "event"):
		return "runs it as a hook"
	case section == "pager" && sub == "" && !isBool:
		return "pipes git " + key + "'s output through it"
	case section == "sendemail" && strings.HasSuffix(key, "cmd"):
		return "runs it for git send-email"
	case sub == "":
		return ""
	}
	switch section + "." + key {
	case "diff.command", "diff.textconv":
		return "runs it for git diff and log"
	case "filter.clean", "filter.smudge", "filter.process":
		return "runs it on checkout, add and status"
	case "merge.driver":
		return "runs it to merge"
	case "mergetool.cmd", "mergetool.path", "difftool.cmd", "difftool.path", "guitool.cmd", "man.cmd", "man.path", "browser.cmd", "browser.path":
		return "runs it when that tool is asked for"
	case "credential.helper":
		return "runs it and hands it credentials"
	case "remote.uploadpack", "remote.receivepack", "remote.vcs":
		return "runs it on fetch and push"
	case "remote.proxy", "http.proxy":
		return "sends that remote's traffic there"
	case "url.insteadof", "url.pushinsteadof":
		return "rewrites remote URLs"
	case "includeif.path":
		return "reads more config from there"
	case "protocol.allow":
		return "allows that transport (ext:: runs a command)"
	case "submodule.update":
		if strings.HasPrefix(e.Value, "!") {
			return "runs it on git submodule update"
		}
	case "trailer.command", "trailer.cmd":
		return "runs it for git interpret-trailers"
	}
	return ""
}
