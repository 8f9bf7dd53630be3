// Package allowlist is the grammar of the allowlist: one host a line, a
// wildcard over a domain, a host:port relayed raw, the passthrough mark;
// the checks a line must pass, the warnings a valid line may draw, and what
// an entry admits. It reads no settings and writes nothing.
package allowlist

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/net/idna"
	"golang.org/x/net/publicsuffix"
)

// tlsPort is the port of plain entries: the router admits them by SNI.
const TLSPort = 443

// maxReportedErrors keeps a badly broken file from flooding the terminal.
const maxReportedErrors = 10

// entry is one normalised allowlist line.
type Entry struct {
	// Host is lowercase ASCII without a trailing dot. For a wildcard it is
	// the parent domain: "*.example.com" has Host "example.com".
	Host     string
	Wildcard bool
	// Port is tlsPort for SNI-checked entries, anything else for raw TCP.
	Port int
	// Passthrough marks a TLS entry the router passes by SNI, unread, as
	// for a tool that pins its certificates; every other TLS entry is
	// inspected (the router terminates TLS and removes the agent's own
	// credentials). Written `host passthrough`.
	Passthrough bool
}

// passthroughMark is the word after an entry that marks it passthrough.
const PassthroughMark = "passthrough"

// key is e without its mode: the same host and port however it is read,
// for deny and for merging duplicate lines.
func (e Entry) Key() Entry {
	e.Passthrough = false
	return e
}

// line is e as an allowlist line: its name and its mark.
func (e Entry) Line() string {
	if e.Passthrough {
		return e.String() + " " + PassthroughMark
	}
	return e.String()
}

func (e Entry) String() string {
	name := e.Host
	if e.Wildcard {
		name = "*." + name
	}
	if e.Port == TLSPort {
		return name
	}
	return name + ":" + strconv.Itoa(e.Port)
}

// ReadFile reads and checks the allowlist at path.
func ReadFile(path string) ([]Entry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read allowlist: %w", err)
	}
	return Parse(bytes.NewReader(b), path)
}

// Parse parses allowlist lines; name is the file name used in
// errors. Every bad line is reported, so one run shows the user all fixes.
func Parse(r io.Reader, name string) ([]Entry, error) {
	var (
		entries []named
		errs    []string
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		e, line, err := ParseLine(sc.Text())
		if line == "" {
			continue
		}
		if err != nil {
			if len(errs) < maxReportedErrors {
				errs = append(errs, fmt.Sprintf("%s: line %d: %q: %v", name, n, line, err))
			}
			continue
		}
		entries = append(entries, named{e.String(), e})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "\n") +
			"\nfix or remove the line, or delete the file to start again from the defaults")
	}
	return sortedByName(entries), nil
}

// named is an entry and its name as written (String), made once.
type named struct {
	name  string
	entry Entry
}

// sortedByName orders entries by name and makes one of the lines that
// name the same host and port: passed through if any of them asks. Each
// name is made once: a sort that made both for every comparison, and a
// map of what was seen, took most of a 5,000-entry list's parse, which
// is on the start's path.
func sortedByName(ns []named) []Entry {
	slices.SortFunc(ns, func(a, b named) int { return strings.Compare(a.name, b.name) })
	out := make([]Entry, 0, len(ns))
	for i, n := range ns {
		// The name says host, wildcard and port (a host has no '*'), all
		// of the key: equal names are one entry.
		if i > 0 && n.name == ns[i-1].name {
			out[len(out)-1].Passthrough = out[len(out)-1].Passthrough || n.entry.Passthrough
			continue
		}
		out = append(out, n.entry)
	}
	return out
}

// parseLine reads one line of the allowlist: a '#' starts a comment, and
// the space around the entry is dropped. text is what is left of the line;
// a line with no text has no entry and no error.
func ParseLine(line string) (e Entry, text string, err error) {
	if i := strings.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	if text = strings.TrimSpace(line); text == "" {
		return Entry{}, "", nil
	}
	e, err = ParseEntry(text)
	return e, text, err
}

// parseEntry turns one non-empty, comment-free line into an entry: a
// host, and for a TLS entry perhaps the mark passthrough after it.
func ParseEntry(s string) (Entry, error) {
	fields := strings.Fields(s)
	if len(fields) == 2 && fields[1] == PassthroughMark {
		e, err := parseHost(fields[0])
		if err == nil && e.Port != TLSPort {
			err = fmt.Errorf("%s is for TLS entries on port 443; a host:port entry is always relayed unread", PassthroughMark)
		}
		e.Passthrough = err == nil
		return e, err
	}
	if len(fields) > 1 {
		if len(fields) == 2 && !strings.ContainsAny(fields[1], ".:*") {
			return Entry{}, fmt.Errorf("unknown mark %q: the only mark is %s, as in: pinned.example.com %s", fields[1], PassthroughMark, PassthroughMark)
		}
		return Entry{}, errors.New("one entry per line; put each host on its own line")
	}
	return parseHost(s)
}

// parseHost turns one host entry, without a mark, into an entry.
func parseHost(s string) (Entry, error) {
	if strings.Contains(s, "://") || strings.Contains(s, "/") {
		return Entry{}, errors.New("write a host name, not a URL (for example api.example.com)")
	}
	host, port := s, TLSPort
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		if strings.Count(s, ":") > 1 || strings.HasPrefix(s, "[") {
			return Entry{}, errors.New("IP addresses are not allowed; name the host")
		}
		p, err := strconv.Atoi(s[i+1:])
		if err != nil || p < 1 || p > 65535 {
			return Entry{}, fmt.Errorf("port %q is not a number from 1 to 65535", s[i+1:])
		}
		host, port = s[:i], p
	}
	wildcard := false
	if strings.HasPrefix(host, "*.") {
		wildcard, host = true, host[2:]
		if port != TLSPort {
			return Entry{}, errors.New("a wildcard entry covers TLS on port 443 only; name each host that needs another port")
		}
	}
	if strings.Contains(host, "*") {
		return Entry{}, errors.New(`"*" may only stand alone as the first label, as in *.example.com`)
	}
	name, err := normaliseHost(host)
	if err != nil {
		return Entry{}, err
	}
	if wildcard && !strings.Contains(name, ".") {
		return Entry{}, fmt.Errorf("*.%s would allow a whole top-level domain; name a domain under it", name)
	}
	return Entry{Host: name, Wildcard: wildcard, Port: port}, nil
}

// normaliseHost lowercases, converts IDNA to ASCII, drops one trailing dot
// and checks the result is a DNS host name.
func normaliseHost(host string) (string, error) {
	host = strings.TrimSuffix(host, ".")
	if host == "" {
		return "", errors.New("empty host name")
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return "", errors.New("IP addresses are not allowed; name the host")
	}
	ascii := strings.ToLower(host)
	if !isASCII(host) {
		var err error
		if ascii, err = idna.Lookup.ToASCII(host); err != nil {
			return "", fmt.Errorf("not a valid host name: %v", err)
		}
	}
	if len(ascii) > 253 {
		return "", errors.New("host name is longer than 253 characters")
	}
	labels := strings.Split(ascii, ".")
	for _, l := range labels {
		if err := checkLabel(l); err != nil {
			return "", err
		}
	}
	if tld := labels[len(labels)-1]; strings.Trim(tld, "0123456789") == "" {
		return "", errors.New("IP addresses are not allowed; name the host")
	}
	return ascii, nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func checkLabel(l string) error {
	switch {
	case l == "":
		return errors.New("empty label (two dots in a row, or a leading dot)")
	case len(l) > 63:
		return fmt.Errorf("label %q is longer than 63 characters", l)
	case l[0] == '-' || l[len(l)-1] == '-':
		return fmt.Errorf("label %q starts or ends with '-'", l)
	}
	for _, c := range l {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("label %q has %q; host names use letters, digits and '-'", l, c)
		}
	}
	return nil
}

// multiTenant are suffixes under which anyone can get a name, beyond what
// the public suffix list already says (it misses parents such as
// amazonaws.com, whose wildcard covers every S3 bucket).
var multiTenant = map[string]string{
	"amazonaws.com":         "every AWS customer's S3 buckets, API gateways and load balancers",
	"s3.amazonaws.com":      "every S3 bucket",
	"cloudfront.net":        "every CloudFront distribution",
	"windows.net":           "every Azure customer's storage and sites",
	"core.windows.net":      "every Azure storage account",
	"blob.core.windows.net": "every Azure blob container",
	"azurewebsites.net":     "every Azure web app",
	"azureedge.net":         "every Azure CDN endpoint",
	"googleusercontent.com": "every Google-hosted user content and Cloud Run app",
	"appspot.com":           "every App Engine app",
	"googleapis.com":        "every Google Cloud storage bucket and API behind one front",
	"github.io":             "every GitHub Pages site",
	"githubusercontent.com": "every GitHub user's content",
	"gitlab.io":             "every GitLab Pages site",
	"workers.dev":           "every Cloudflare Worker",
	"pages.dev":             "every Cloudflare Pages site",
	"r2.dev":                "every Cloudflare R2 bucket",
	"herokuapp.com":         "every Heroku app",
	"vercel.app":            "every Vercel deployment",
	"netlify.app":           "every Netlify site",
	"firebaseapp.com":       "every Firebase app",
	"web.app":               "every Firebase site",
	"fly.dev":               "every Fly.io app",
	"onrender.com":          "every Render app",
	"glitch.me":             "every Glitch project",
	"repl.co":               "every Replit",
	"deno.dev":              "every Deno Deploy app",
	"railway.app":           "every Railway app",
	"blogspot.com":          "every Blogger blog",
}

// exfilServices accept data from anyone and let anyone read it back: paste
// bins, request catchers, file drops and tunnels.
var exfilServices = map[string]string{
	"pastebin.com":         "a paste service",
	"paste.ee":             "a paste service",
	"hastebin.com":         "a paste service",
	"dpaste.org":           "a paste service",
	"termbin.com":          "a paste service",
	"ix.io":                "a paste service",
	"0x0.st":               "a file drop",
	"transfer.sh":          "a file drop",
	"file.io":              "a file drop",
	"temp.sh":              "a file drop",
	"webhook.site":         "a request catcher",
	"requestbin.com":       "a request catcher",
	"requestbin.net":       "a request catcher",
	"requestcatcher.com":   "a request catcher",
	"pipedream.net":        "a request catcher",
	"beeceptor.com":        "a request catcher",
	"hookbin.com":          "a request catcher",
	"ptsv2.com":            "a request catcher",
	"ptsv3.com":            "a request catcher",
	"postb.in":             "a request catcher",
	"interact.sh":          "an out-of-band interaction catcher",
	"oast.fun":             "an out-of-band interaction catcher",
	"oast.pro":             "an out-of-band interaction catcher",
	"oast.live":            "an out-of-band interaction catcher",
	"oast.site":            "an out-of-band interaction catcher",
	"oast.online":          "an out-of-band interaction catcher",
	"oast.me":              "an out-of-band interaction catcher",
	"oastify.com":          "an out-of-band interaction catcher",
	"burpcollaborator.net": "an out-of-band interaction catcher",
	"dnslog.cn":            "an out-of-band interaction catcher",
	"canarytokens.com":     "an out-of-band interaction catcher",
	"ngrok.io":             "a tunnel to someone's machine",
	"ngrok.app":            "a tunnel to someone's machine",
	"ngrok.dev":            "a tunnel to someone's machine",
	"ngrok-free.app":       "a tunnel to someone's machine",
	"ngrok-free.dev":       "a tunnel to someone's machine",
	"trycloudflare.com":    "a tunnel to someone's machine",
	"loca.lt":              "a tunnel to someone's machine",
	"localtunnel.me":       "a tunnel to someone's machine",
	"serveo.net":           "a tunnel to someone's machine",
	"localhost.run":        "a tunnel to someone's machine",
	"lhr.life":             "a tunnel to someone's machine",
	"pagekite.me":          "a tunnel to someone's machine",
	"bore.pub":             "a tunnel to someone's machine",
	"tunnelto.dev":         "a tunnel to someone's machine",
	"telebit.cloud":        "a tunnel to someone's machine",
	"devtunnels.ms":        "a tunnel to someone's machine",
}

// lintAllowlist warns about entries that let the agent reach hosts anyone
// can run: a wildcard over a suffix shared by many tenants, and services
// made for dropping or tunnelling data. They are valid, so the session
// still starts; each line names the entry and says why.
func Lint(entries []Entry) []string {
	var out []string
	for _, e := range entries {
		if why := exfilService(e); why != "" {
			out = append(out, fmt.Sprintf("allowlist entry %s: %s; anything the agent sends there, anyone can fetch; remove it unless you need it", e, why))
			continue
		}
		if e.Port == 22 && (e.Host == "github.com" || e.Host == "gitlab.com" || e.Host == "bitbucket.org" || e.Host == "ssh.github.com") {
			// Lists copied from the default before issue 22 still have it.
			out = append(out, fmt.Sprintf("allowlist entry %s relays git over ssh unread: any key the agent brings pushes anywhere there; the sandbox's git uses HTTPS, where the router adds your token and scopes writes (agent-sandbox deny %s)", e, e))
			continue
		}
		if !e.Wildcard {
			continue
		}
		if why := sharedSuffix(e.Host); why != "" {
			out = append(out, fmt.Sprintf("allowlist entry %s: the wildcard covers %s, so the agent can send data to a host anyone can set up; name the exact hosts you need instead", e, why))
		}
	}
	return out
}

// exfilService names the service an entry reaches: the host is one, lies
// under one, or is a wildcard over one.
func exfilService(e Entry) string {
	// The host and each of its parents, looked up: a list of thousands
	// of names is linted on every session's start.
	for d := e.Host; d != ""; {
		if why, ok := exfilServices[d]; ok {
			return fmt.Sprintf("%s (%s)", why, d)
		}
		_, d, _ = strings.Cut(d, ".")
	}
	if !e.Wildcard {
		return ""
	}
	// A wildcard over a parent of a service: the services in a fixed
	// order, so that the warning is the same from one start to the next.
	for _, svc := range sortedExfilServices() {
		if under(svc, e.Host) {
			return fmt.Sprintf("%s (%s)", exfilServices[svc], svc)
		}
	}
	return ""
}

// sortedExfilServices are exfilServices' names in order, sorted once.
var sortedExfilServices = sync.OnceValue(func() []string {
	svcs := make([]string, 0, len(exfilServices))
	for svc := range exfilServices {
		svcs = append(svcs, svc)
	}
	sort.Strings(svcs)
	return svcs
})

// sharedSuffix says whom a wildcard over host lets in, or "" if no one
// else: host is, or is a parent of, a multi-tenant suffix.
func sharedSuffix(host string) string {
	var names []string
	for suffix := range multiTenant {
		if under(suffix, host) {
			names = append(names, suffix)
		}
	}
	if len(names) > 0 {
		// The narrowest suffix says it best: *.s3.amazonaws.com is about buckets.
		sort.Slice(names, func(i, j int) bool { return len(names[i]) > len(names[j]) })
		for _, n := range names {
			if n == host {
				return multiTenant[n]
			}
		}
		return multiTenant[names[len(names)-1]] + " and more"
	}
	// A name directly under host is, or lies under, a public suffix: a
	// registry or hosting provider hands out names there.
	if ps, _ := publicsuffix.PublicSuffix("x." + host); under(ps, host) {
		return "every name registered under " + host + " (a public suffix)"
	}
	return ""
}

// under reports whether name is domain or a name below it.
func under(name, domain string) bool {
	return name == domain || strings.HasSuffix(name, "."+domain)
}

// admits reports whether the router lets TLS to host through e: a plain
// entry by its exact name, *.domain for any name below domain, not domain
// itself.
func (e Entry) Admits(host string) bool {
	switch {
	case e.Port != TLSPort:
		return false
	case e.Wildcard:
		return host != e.Host && under(host, e.Host)
	}
	return host == e.Host
}

// allowlisted reports whether TLS to name is allowed by entries.
func Allows(name string, entries []Entry) bool {
	for _, e := range entries {
		if e.Admits(name) {
			return true
		}
	}
	return false
}
