package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/net/idna"
)

// tlsPort is the port of plain entries: the router admits them by SNI.
const tlsPort = 443

// maxReportedErrors keeps a badly broken file from flooding the terminal.
const maxReportedErrors = 10

// entry is one normalised allowlist line.
type entry struct {
	// Host is lowercase ASCII without a trailing dot. For a wildcard it is
	// the parent domain: "*.example.com" has Host "example.com".
	Host     string
	Wildcard bool
	// Port is tlsPort for SNI-checked entries, anything else for raw TCP.
	Port int
}

func (e entry) String() string {
	name := e.Host
	if e.Wildcard {
		name = "*." + name
	}
	if e.Port == tlsPort {
		return name
	}
	return name + ":" + strconv.Itoa(e.Port)
}

// parseAllowlist reads and checks the allowlist at path.
func parseAllowlist(path string) ([]entry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read allowlist: %w", err)
	}
	return parseAllowlistFrom(bytes.NewReader(b), path)
}

// parseAllowlistFrom parses allowlist lines; name is the file name used in
// errors. Every bad line is reported, so one run shows the user all fixes.
func parseAllowlistFrom(r io.Reader, name string) ([]entry, error) {
	var (
		entries []entry
		errs    []string
		seen    = map[entry]bool{}
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		e, err := parseEntry(line)
		if err != nil {
			if len(errs) < maxReportedErrors {
				errs = append(errs, fmt.Sprintf("%s: line %d: %q: %v", name, n, line, err))
			}
			continue
		}
		if !seen[e] {
			seen[e] = true
			entries = append(entries, e)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "\n") +
			"\nfix or remove the line, or delete the file to start again from the defaults")
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].String() < entries[j].String() })
	return entries, nil
}

// parseEntry turns one non-empty, comment-free line into an entry.
func parseEntry(s string) (entry, error) {
	if strings.ContainsAny(s, " \t") {
		return entry{}, errors.New("one entry per line; put each host on its own line")
	}
	if strings.Contains(s, "://") || strings.Contains(s, "/") {
		return entry{}, errors.New("write a host name, not a URL (for example api.example.com)")
	}
	host, port := s, tlsPort
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		if strings.Count(s, ":") > 1 || strings.HasPrefix(s, "[") {
			return entry{}, errors.New("IP addresses are not allowed; name the host")
		}
		p, err := strconv.Atoi(s[i+1:])
		if err != nil || p < 1 || p > 65535 {
			return entry{}, fmt.Errorf("port %q is not a number from 1 to 65535", s[i+1:])
		}
		host, port = s[:i], p
	}
	wildcard := false
	if strings.HasPrefix(host, "*.") {
		wildcard, host = true, host[2:]
		if port != tlsPort {
			return entry{}, errors.New("a wildcard entry covers TLS on port 443 only; name each host that needs another port")
		}
	}
	if strings.Contains(host, "*") {
		return entry{}, errors.New(`"*" may only stand alone as the first label, as in *.example.com`)
	}
	name, err := normaliseHost(host)
	if err != nil {
		return entry{}, err
	}
	if wildcard && !strings.Contains(name, ".") {
		return entry{}, fmt.Errorf("*.%s would allow a whole top-level domain; name a domain under it", name)
	}
	return entry{Host: name, Wildcard: wildcard, Port: port}, nil
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
