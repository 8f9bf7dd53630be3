// Package routerlog reads what a session's router logs: the lines routerd
// writes for what it refused, removed, added and passed (its log format is
// the contract between the two programs), the denials of dnsmasq and
// nginx, and the lines that say why a helper failed. Every name and path in
// a line may come from the agent: the Printable checks say which may be
// echoed to the user's terminal as they are.
package routerlog

import (
	"regexp"
	"strconv"
	"strings"
)

// StartLine is routerd's first line: a log that lacks it has started over
// (it is capped in size) and no longer holds the whole session.
const StartLine = "routerd: starting"

// Denial is one refusal in the router's log: a lookup dnsmasq answered
// NXDOMAIN, or a TLS connection nginx closed for its SNI.
type Denial struct {
	Host   string
	Lookup bool
}

var (
	// dnsmasq with log-queries: "config NAME is NXDOMAIN".
	dnsmasqDenied = regexp.MustCompile(`\bconfig (\S+) is NXDOMAIN$`)
	// nginx, in the planner's log_format: an SNI without an upstream.
	nginxDenied = regexp.MustCompile(`\bport=443 sni="([^"]*)" upstream="-"`)
)

// ParseDenial reads a denial from one line, if it is one.
func ParseDenial(line string) (Denial, bool) {
	line = strings.TrimRight(line, "\r")
	if m := dnsmasqDenied.FindStringSubmatch(line); m != nil {
		return Denial{Host: m[1], Lookup: true}, true
	}
	if m := nginxDenied.FindStringSubmatch(line); m != nil && m[1] != "" && m[1] != "-" {
		return Denial{Host: m[1]}, true
	}
	return Denial{}, false
}

// credentialRequest is a request through the credential proxy, in the
// planner's nginx log format.
var credentialRequest = regexp.MustCompile(`^credentials host=(\S+) method=`)

// CredentialRequest reads the host of a request the credential proxy
// passed with the user's credential.
func CredentialRequest(line string) (host string, ok bool) {
	if m := credentialRequest.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
		return m[1], true
	}
	return "", false
}

// inspected is a request through routerd's inspecting proxy: the header
// and query names it removed, never their values.
var inspected = regexp.MustCompile(`^inspect host=(\S+) method=\S+ path="(?:[^"\\]|\\.)*" proto=\S+ status=\d+ removed="([^"]*)"$`)

// Inspected reads a request through the inspecting proxy: its host and
// the names it removed ("" or "-" for none), comma-separated.
func Inspected(line string) (host, removed string, ok bool) {
	if m := inspected.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
		return m[1], m[2], true
	}
	return "", "", false
}

// Refusal is a request routerd refused by a rule: to a model API
// (apiproxy.go) or a write on GitHub or a registry (forge). Method and Path
// are the agent's, unquoted; Repo is set for forge refusals.
type Refusal struct {
	Host, Method, Path, Rule, Repo string
}

var (
	apiRefused   = regexp.MustCompile(`^api-refused host=(\S+) method=("(?:[^"\\]|\\.)*") path=("(?:[^"\\]|\\.)*") rule=([a-z_.]+) status=(\d+)$`)
	forgeRefused = regexp.MustCompile(`^forge-refused host=(\S+) method=("(?:[^"\\]|\\.)*") path=("(?:[^"\\]|\\.)*") rule=([a-z_.]+) repo=(\S*) status=(\d+)$`)
	forgeWrote   = regexp.MustCompile(`^forge-wrote host=(\S+) method=("(?:[^"\\]|\\.)*") path=("(?:[^"\\]|\\.)*") repo=([a-z0-9._/-]+)$`)
)

// APIRefused reads a request the API gate refused: no header or body,
// only where and by which rule.
func APIRefused(line string) (Refusal, bool) {
	m := apiRefused.FindStringSubmatch(strings.TrimSpace(line))
	if m == nil {
		return Refusal{}, false
	}
	method, _ := strconv.Unquote(m[2])
	path, _ := strconv.Unquote(m[3])
	return Refusal{Host: m[1], Method: method, Path: path, Rule: m[4]}, true
}

// APITrimmed reads the host of a request whose web fetch tool's domains
// the API gate trimmed to the allowlist.
func APITrimmed(line string) (host string, ok bool) {
	h, ok := strings.CutPrefix(strings.TrimSpace(line), "api-changed host=")
	if !ok || !strings.Contains(h, "trimmed") {
		return "", false
	}
	host, _, _ = strings.Cut(h, " ")
	return host, true
}

// ForgeRefused reads a write routerd refused (inspect/forge.go): where,
// which rule and which repository.
func ForgeRefused(line string) (Refusal, bool) {
	m := forgeRefused.FindStringSubmatch(strings.TrimSpace(line))
	if m == nil {
		return Refusal{}, false
	}
	method, _ := strconv.Unquote(m[2])
	path, _ := strconv.Unquote(m[3])
	return Refusal{Host: m[1], Method: method, Path: path, Rule: m[4], Repo: m[5]}, true
}

// ForgeWrote reads a write routerd passed with the user's token: its host
// and repository.
func ForgeWrote(line string) (host, repo string, ok bool) {
	m := forgeWrote.FindStringSubmatch(strings.TrimSpace(line))
	if m == nil {
		return "", "", false
	}
	return m[1], m[4], true
}

var (
	// Only plain host names are echoed to the terminal: the names come from
	// the agent, which could otherwise write escape sequences.
	printableHost   = regexp.MustCompile(`^[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?$`)
	printableHeader = regexp.MustCompile(`^[A-Za-z0-9:_-]{1,64}$`)
	printableMethod = regexp.MustCompile(`^[A-Za-z-]{1,20}$`)
	printablePath   = regexp.MustCompile(`^/[A-Za-z0-9._~:/@!$&'()*+,;=%-]*$`)
)

// PrintableHost says a host name from a line may be echoed as it is.
func PrintableHost(s string) bool { return printableHost.MatchString(s) }

// PrintableHeader says a removed header's or query's name may be echoed
// (the agent chose the query's).
func PrintableHeader(s string) bool { return printableHeader.MatchString(s) }

// PrintableRequest says a request's method and path may be echoed.
func PrintableRequest(method, path string) bool {
	return printableMethod.MatchString(method) && printablePath.MatchString(path)
}
