package main

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/allowlist"
	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
	"github.com/agent-sandbox/agent-sandbox/internal/routerlog"
	"github.com/agent-sandbox/agent-sandbox/router-image/routerd/apipolicy"
	"github.com/agent-sandbox/agent-sandbox/router-image/routerd/forge"
)

// Credentials never enter the sandbox. For an API whose credential the user
// gives on the host (in the launcher's environment or stored with
// `agent-sandbox secret set`), the agent talks HTTPS to the API host by its
// name; routerd's inspecting proxy ends that TLS, removes whatever
// credential the agent sent and passes the request to its API gate, and
// nginx behind the gate adds the user's and proxies to the real host over
// TLS with its certificate verified. The agent holds a placeholder, so
// that it starts without asking to log in.

// apiProvider is one API whose credential the router can add.
type apiProvider struct {
	id   string // as in AGENT_SANDBOX_API_HOSTS
	host string // the real API host
	// port is where routerd's API gate listens, on the router's session
	// address: the inspecting proxy sends the host's requests there.
	port int
	// baseURLEnv is the agent's variable for the API's base URL, and
	// basePath what follows the host in it.
	baseURLEnv, basePath string
	// headers are every request header the API takes a credential in:
	// whatever the agent sends in them is removed.
	headers []string
	// refuseArgs are query arguments the API also takes a credential in:
	// a request with any of them (or with a percent-encoded argument name,
	// which could spell one) is refused.
	refuseArgs []string
	// forge marks GitHub (forge.go): routerd's inspecting proxy adds its
	// token itself and scopes its writes; no gate, no nginx proxy.
	forge bool
}

// credKind is one kind of credential for a provider, in the order a
// provider's kinds are looked for.
type credKind struct {
	secret string // its name for `agent-sandbox secret`
	env    string // the launcher's variable that holds it
	// altEnv are further variables that hold it, looked at after env.
	altEnv []string
	// agentEnv is the agent's variable for the placeholder: env, but for
	// an Anthropic API key (see credKinds).
	agentEnv string
	provider *apiProvider
	header   string // the header the router sets
	bearer   bool   // the header's value is "Bearer " and the credential
	// placeholder is what the agent's env holds instead, in the
	// credential's usual format.
	placeholder string
}

var (
	anthropicAPI = &apiProvider{id: "anthropic", host: "api.anthropic.com", port: 81,
		baseURLEnv: "ANTHROPIC_BASE_URL", headers: []string{"x-api-key", "Authorization"}}
	openaiAPI = &apiProvider{id: "openai", host: "api.openai.com", port: 82,
		baseURLEnv: "OPENAI_BASE_URL", basePath: "/v1", headers: []string{"Authorization"}}
	geminiAPI = &apiProvider{id: "gemini", host: "generativelanguage.googleapis.com", port: 83,
		baseURLEnv: "GOOGLE_GEMINI_BASE_URL", headers: []string{"x-goog-api-key", "Authorization"},
		refuseArgs: []string{"key", "access_token", "oauth_token"}}

	apiProviders = []*apiProvider{anthropicAPI, openaiAPI, geminiAPI, githubGit}

	// credKinds: Claude Code itself prefers an API key to an OAuth token;
	// so does the launcher.
	credKinds = []*credKind{
		// The agent holds ANTHROPIC_AUTH_TOKEN, not ANTHROPIC_API_KEY:
		// with an API key it has not yet been asked to approve, Claude
		// Code's first interactive start checks that it reaches the
		// hard-wired https://api.anthropic.com (which the router closes
		// for a host with a credential) and exits when it does not, then
		// asks whether to use the key. With an auth token it does neither.
		// It sends the token as Authorization: Bearer, which the router
		// removes before it sets x-api-key.
		{secret: "anthropic", env: "ANTHROPIC_API_KEY", agentEnv: "ANTHROPIC_AUTH_TOKEN", provider: anthropicAPI, header: "x-api-key",
			placeholder: "sk-ant-api03-agent-sandbox-placeholder"},
		// Claude Code sends Authorization: Bearer and adds the oauth
		// anthropic-beta value itself when it holds CLAUDE_CODE_OAUTH_TOKEN,
		// so the router replaces only the token.
		{secret: "anthropic-oauth", env: "CLAUDE_CODE_OAUTH_TOKEN", provider: anthropicAPI, header: "Authorization", bearer: true,
			placeholder: "sk-ant-oat01-agent-sandbox-placeholder"},
		{secret: "openai", env: "OPENAI_API_KEY", provider: openaiAPI, header: "Authorization", bearer: true,
			placeholder: "sk-agent-sandbox-placeholder"},
		{secret: "gemini", env: "GEMINI_API_KEY", provider: geminiAPI, header: "x-goog-api-key",
			placeholder: "agent-sandbox-placeholder"},
		// gh reads GH_TOKEN before GITHUB_TOKEN; with the placeholder it
		// runs as logged in, and routerd replaces what it sends.
		{secret: "github", env: "GH_TOKEN", altEnv: []string{"GITHUB_TOKEN"}, provider: githubGit,
			placeholder: "ghp_agentsandboxplaceholder0000000000000"},
	}
)

// agentVar is the variable the agent holds k's placeholder in.
func (k *credKind) agentVar() string {
	if k.agentEnv != "" {
		return k.agentEnv
	}
	return k.env
}

func credKindBySecret(name string) *credKind {
	for _, k := range credKinds {
		if k.secret == name {
			return k
		}
	}
	return nil
}

func secretNames() []string {
	var out []string
	for _, k := range credKinds {
		out = append(out, k.secret)
	}
	return out
}

// routerCredentialDir is where the router mounts the launcher's credential
// dir: the nginx include files that hold the keys. Nothing else mounts it.
const routerCredentialDir = "/etc/router-credentials"

// routerConfigDir is where the router and the forwarder mount the
// session's config dir, read-only.
const routerConfigDir = "/etc/router"

// systemCABundle is the router image's CA bundle (ca-certificates).
const systemCABundle = "/etc/ssl/certs/ca-certificates.crt"

// upstreamCAFile is AGENT_SANDBOX_UPSTREAM_CA's copy in the session's
// config dir (/etc/router in the router): a certificate, not a secret.
const upstreamCAFile = "upstream-ca.pem"

// credential is one credential a session's router adds. Its value goes
// into one file, written 0600 into a dir that only the router mounts; never
// into a container spec, a log line or the dir the forwarder mounts.
type credential struct {
	kind *credKind
	host string // the API host: the provider's, or AGENT_SANDBOX_API_HOSTS's
	// also are further hosts it is added on (GitHub's API hosts).
	also   []string
	value  string
	source string // where it came from, for the user
}

// sessionCredentials is what a session injects.
type sessionCredentials struct {
	creds []credential
	// upstreamCA holds AGENT_SANDBOX_UPSTREAM_CA's certificates, which
	// then replace the router image's bundle (tests pin everything, as
	// with AGENT_SANDBOX_UPSTREAM_DNS).
	upstreamCA []byte
	// apiAllow are the API gate's rules the user turned off by name
	// (AGENT_SANDBOX_API_ALLOW), checked against apipolicy's list.
	apiAllow []string
	// dir is the launcher's dir that only the router mounts; "" when
	// nothing is injected.
	dir string
	// handed are the API hosts whose credential the user passes in with
	// --env: they pass unread (handedHosts).
	handed []string
	// forge is GitHub's and the registries' part (forge.go).
	forge forgeSetup
}

// credRoute is what the router config needs to know of a credential: no
// value.
type credRoute struct {
	kind *credKind
	host string
}

// credPlan is the credential part of the router's plan, fixed for the
// session: which hosts get which kind of credential, and which CA bundle
// nginx verifies them with.
type credPlan struct {
	routes   []credRoute
	customCA bool
	apiAllow []string
	// upstreamCA is AGENT_SANDBOX_UPSTREAM_CA's certificates, which
	// routerFiles writes beside the config; nil for the image's bundle.
	upstreamCA []byte
	// handed are hosts passed unread whatever the allowlist says.
	handed []string
	// forge is what routerd needs to add the GitHub token and scope
	// writes (forge.go).
	forge forgeSetup
}

func (s sessionCredentials) plan() credPlan {
	p := credPlan{customCA: len(s.upstreamCA) > 0, apiAllow: s.apiAllow, upstreamCA: s.upstreamCA, handed: s.handed}
	for _, c := range s.creds {
		if !c.kind.provider.forge {
			p.routes = append(p.routes, credRoute{c.kind, c.host})
		}
	}
	p.forge = s.forge
	return p
}

// active is the routes whose host the allowlist admits now: only those
// get a proxy, so that `deny` cuts it as it cuts any other host.
func (p credPlan) active(entries []allowlist.Entry) []credRoute {
	var out []credRoute
	for _, r := range p.routes {
		if allowlist.Allows(r.host, entries) {
			out = append(out, r)
		}
	}
	return out
}

// withHanded marks the allowlist's entries for the handed hosts
// passthrough; a handed host that only a wildcard admits gets an exact
// passthrough entry of its own.
func (p credPlan) withHanded(entries []allowlist.Entry) []allowlist.Entry {
	if len(p.handed) == 0 {
		return entries
	}
	out := slices.Clone(entries)
	for _, h := range p.handed {
		exact := false
		for i, e := range out {
			if !e.Wildcard && e.Port == allowlist.TLSPort && e.Host == h {
				out[i].Passthrough, exact = true, true
			}
		}
		if !exact && allowlist.Allows(h, out) {
			out = append(out, allowlist.Entry{Host: h, Port: allowlist.TLSPort, Passthrough: true})
		}
	}
	return out
}

// unreadHosts says at start which hosts the router passes unread, where a
// key the agent brings works, and why; "" when there is none.
func unreadHosts(s sessionCredentials, entries []allowlist.Entry) string {
	var hosts []string
	for _, e := range entries {
		if e.Passthrough {
			hosts = append(hosts, e.String()+" (passthrough)")
		}
	}
	for _, h := range s.handed {
		if allowlist.Allows(h, entries) {
			hosts = append(hosts, h+" (its key is passed in with --env)")
		}
	}
	if len(hosts) == 0 {
		return ""
	}
	return "passed unread, where a key the agent brings works: " + strings.Join(hosts, ", ")
}

// loginWarning is for a session of Claude Code whose API host the router
// inspects without a credential of the user's for it: a login kept in the
// home volume is then a credential of the agent's, which the router
// removes. "" when that is not so.
func loginWarning(s sessionCredentials, entries []allowlist.Entry, cmd []string) string {
	if len(cmd) == 0 || filepath.Base(cmd[0]) != "claude" || slices.Contains(s.handed, anthropicAPI.host) {
		return ""
	}
	for _, c := range s.creds {
		if c.kind.provider == anthropicAPI {
			return ""
		}
	}
	for _, e := range entries {
		if e.Admits(anthropicAPI.host) && !e.Passthrough {
			return "the router removes the credentials the agent holds on " + anthropicAPI.host + ", so a Claude login kept in the home volume does not reach the API: " +
				"give the router yours (run `claude setup-token` on this machine, then `agent-sandbox secret set anthropic-oauth`), " +
				"or pass the host unread with `agent-sandbox allow --passthrough " + anthropicAPI.host + "` (then any key the agent brings works there)"
		}
	}
	return ""
}

// trustedCA is the bundle nginx verifies the API hosts' certificates with.
func (p credPlan) trustedCA() string {
	if p.customCA {
		return routerConfigDir + "/" + upstreamCAFile
	}
	return systemCABundle
}

// agentCredentialEnv is what the agent gets for the credentials the router
// adds: each API's base URL, the host itself over HTTPS (the router
// inspects it and sends its requests through the API gate, which adds the
// key), and a placeholder where the credential would be. The base URL
// names the host the tests put in place of the real one, and tells Codex
// and Gemini CLI's recipes that the router holds the key.
func agentCredentialEnv(creds []credential) map[string]string {
	env := map[string]string{}
	for _, c := range creds {
		p := c.kind.provider
		if p.baseURLEnv != "" {
			env[p.baseURLEnv] = "https://" + c.host + p.basePath
		}
		env[c.kind.agentVar()] = c.kind.placeholder
	}
	return env
}

// credentialValue is what a credential may hold: the characters of API
// keys and tokens (base64 and base64url among them). Anything else could
// change the meaning of the nginx line it is written into.
var credentialValue = regexp.MustCompile(`^[A-Za-z0-9._~+/=-]+$`)

const maxCredentialLen = 4096

func checkCredentialValue(what, v string) error {
	if v == "" {
		return fmt.Errorf("%s is empty", what)
	}
	if len(v) > maxCredentialLen || !credentialValue.MatchString(v) {
		return fmt.Errorf("%s is not an API key or token: it may hold only letters, digits and . _ ~ + / = - (at most 4096 of them)", what)
	}
	return nil
}

// providerKinds are the credential kinds of p's API, in credKinds' order
// (which says which is preferred).
func providerKinds(p *apiProvider) []*credKind {
	var kinds []*credKind
	for _, k := range credKinds {
		if k.provider == p {
			kinds = append(kinds, k)
		}
	}
	return kinds
}

// apiHosts reads AGENT_SANDBOX_API_HOSTS, "anthropic=HOST,openai=HOST,...",
// which names other hosts for the APIs (the tests' *.test names).
func apiHosts(spec string) (map[*apiProvider]string, error) {
	hosts := map[*apiProvider]string{}
	named := append(slices.Clone(apiProviders), forgeStandIns...)
	var ids []string
	for _, p := range named {
		hosts[p] = p.host
		ids = append(ids, p.id)
	}
	for _, f := range splitList(spec) {
		id, host, ok := strings.Cut(f, "=")
		var p *apiProvider
		for _, q := range named {
			if q.id == strings.TrimSpace(id) {
				p = q
			}
		}
		if !ok || p == nil {
			return nil, fmt.Errorf("AGENT_SANDBOX_API_HOSTS: %q is not PROVIDER=HOST with PROVIDER one of %s", f, strings.Join(ids, ", "))
		}
		e, err := allowlist.ParseEntry(strings.TrimSpace(host))
		if err != nil || e.Wildcard || e.Port != allowlist.TLSPort {
			return nil, fmt.Errorf("AGENT_SANDBOX_API_HOSTS: %q is not a host name", host)
		}
		hosts[p] = e.Host
	}
	return hosts, nil
}

// resolveCredentials finds the credential for each API: from the
// launcher's environment, else stored with `agent-sandbox secret set`,
// an API key before an OAuth token. An API for which the user passes any of
// its variables in with --env (passed) gets none: the user chose to hand
// the agent that key, and gets a warning for it.
func resolveCredentials(getenv func(string) (string, bool), passed map[string]string, secrets string, hosts map[*apiProvider]string) (creds []credential, warnings []string, err error) {
	for _, p := range apiProviders {
		kinds := providerKinds(p)
		handed := handedIn(p, kinds, passed)
		for _, k := range kinds {
			for _, name := range append([]string{k.env}, k.altEnv...) {
				if _, ok := passed[name]; ok {
					warnings = append(warnings, fmt.Sprintf("%s goes into the sandbox (--env): the agent can read it and use it from any host it can reach; without --env the router adds it for %s and the agent gets a placeholder", name, hosts[p]))
				}
			}
		}
		if handed {
			continue
		}
		c, err := findCredential(getenv, secrets, kinds, hosts[p])
		if err != nil {
			return nil, warnings, err
		}
		if c != nil {
			creds = append(creds, *c)
		}
	}
	return creds, warnings, nil
}

// handedIn says whether the user passes any of p's variables in with --env:
// its key, the agent's variable for it, or its base URL. The user then
// routes or authenticates that API themselves.
func handedIn(p *apiProvider, kinds []*credKind, passed map[string]string) bool {
	if _, ok := passed[p.baseURLEnv]; ok {
		return true
	}
	for _, k := range kinds {
		for _, name := range append([]string{k.env, k.agentVar()}, k.altEnv...) {
			if _, ok := passed[name]; ok {
				return true
			}
		}
	}
	return false
}

// handedHosts are the API hosts whose credential the user hands the agent
// with --env: the router passes them unread, by SNI, since removing the
// agent's credential there would remove the user's.
func handedHosts(passed map[string]string, hosts map[*apiProvider]string) []string {
	var out []string
	for _, p := range apiProviders {
		kinds := providerKinds(p)
		switch {
		case !handedIn(p, kinds, passed):
		case p == githubGit:
			out = append(out, githubHostsOf(hosts)...)
		default:
			out = append(out, hosts[p])
		}
	}
	return out
}

func findCredential(getenv func(string) (string, bool), secrets string, kinds []*credKind, host string) (*credential, error) {
	for _, k := range kinds {
		for _, name := range append([]string{k.env}, k.altEnv...) {
			v, ok := getenv(name)
			if v = strings.TrimSpace(v); !ok || v == "" {
				continue
			}
			if err := checkCredentialValue(name+" in your environment", v); err != nil {
				return nil, fmt.Errorf("%v; unset it, or pass it in with --env %s", err, name)
			}
			return &credential{kind: k, host: host, value: v, source: name + " from your environment"}, nil
		}
	}
	for _, k := range kinds {
		v, err := readSecret(secrets, k.secret)
		if err != nil {
			return nil, err
		}
		if v == "" {
			continue
		}
		return &credential{kind: k, host: host, value: v, source: "the stored secret " + k.secret}, nil
	}
	return nil, nil
}

// readUpstreamCA reads AGENT_SANDBOX_UPSTREAM_CA: PEM certificates that
// replace the router image's CA bundle for the API hosts.
func readUpstreamCA(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("AGENT_SANDBOX_UPSTREAM_CA: %w", err)
	}
	rest, n := b, 0
	for {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			break
		}
		if _, err := x509.ParseCertificate(blk.Bytes); blk.Type != "CERTIFICATE" || err != nil {
			return nil, fmt.Errorf("AGENT_SANDBOX_UPSTREAM_CA: %s holds a PEM block that is not a certificate", path)
		}
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("AGENT_SANDBOX_UPSTREAM_CA: %s holds no PEM certificate", path)
	}
	return b, nil
}

// credentialsFor resolves what a session injects and writes the router's
// credential dir for it under runtimeDir (the caller removes s.dir); the
// warnings are for --env names that hand the agent a key.
func credentialsFor(set settings, passed map[string]string, runtimeDir, session string) (s sessionCredentials, warnings []string, err error) {
	s, warnings, err = sessionCredentialsFor(set, passed)
	if err != nil {
		return s, warnings, err
	}
	s.dir, err = writeCredentialDir(runtimeDir, session, s)
	return s, warnings, err
}

// sessionCredentialsFor resolves what a session injects, before anything
// is created; the warnings are for --env names that hand the agent a key.
func sessionCredentialsFor(set settings, passed map[string]string) (sessionCredentials, []string, error) {
	var s sessionCredentials
	hosts := set.parsed.apiHosts
	creds, warnings, err := resolveCredentials(set.lookup, passed, set.secretsDir(), hosts)
	if err != nil {
		return s, warnings, err
	}
	s.creds, s.handed = creds, handedHosts(passed, hosts)
	if s.forge, err = forgeSetupFor(set, hosts, creds, s.handed); err != nil {
		return s, warnings, err
	}
	for i, c := range s.creds {
		if c.kind.provider == githubGit {
			s.creds[i].also = githubHostsOf(hosts)[1:]
		}
	}
	s.apiAllow = set.parsed.apiAllow
	// Every session: the inspecting proxy verifies every inspected host
	// with it, not only the API hosts.
	s.upstreamCA = set.parsed.upstreamCA
	return s, warnings, nil
}

// parseAPIAllow reads AGENT_SANDBOX_API_ALLOW: comma-separated names of the
// API gate's rules the user turns off (apipolicy.Allowable).
func parseAPIAllow(v string) ([]string, error) {
	var out []string
	rules := append(slices.Clone(apipolicy.Allowable), forge.Allowable...)
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !slices.Contains(rules, f) {
			return nil, fmt.Errorf("AGENT_SANDBOX_API_ALLOW: %q is not a rule that can be turned off; the rules are %s", f, strings.Join(rules, ", "))
		}
		out = append(out, f)
	}
	sort.Strings(out)
	return slices.Compact(out), nil
}

// writeCredentialDir makes the dir that only the router mounts, 0700, and
// writes each credential's nginx include file into it, 0600: the one line
// that sets its header. It returns the dir ("" when there is nothing to
// inject); the caller removes it.
func writeCredentialDir(runtimeDir, session string, s sessionCredentials) (string, error) {
	if len(s.creds) == 0 {
		return "", nil
	}
	dir, err := os.MkdirTemp(runtimeDir, session+"-cred.")
	if err != nil {
		return "", err
	}
	for name, body := range credentialFiles(s.creds) {
		if err := writePrivate(filepath.Join(dir, name), body); err != nil {
			_ = os.RemoveAll(dir)
			return "", fmt.Errorf("cannot write the router's credential file: %w", err)
		}
	}
	return dir, nil
}

// credentialFiles are the router's credential files by name: for each
// model API the nginx include that sets its header, for GitHub the token
// that routerd reads itself (forge.go).
func credentialFiles(creds []credential) map[string]string {
	files := map[string]string{}
	for _, c := range creds {
		if c.kind.provider.forge {
			files[forgeTokenFile] = c.value + "\n"
			continue
		}
		v := c.value
		if c.kind.bearer {
			v = "Bearer " + v
		}
		files[c.kind.provider.id+".conf"] = fmt.Sprintf("proxy_set_header %s \"%s\";\n", c.kind.header, v)
	}
	return files
}

// writePrivate creates path 0600 and writes body to it.
func writePrivate(path, body string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// credentialSummary says, at the end of a session, which hosts the router
// added credentials for and how often, from the router's log; and how many
// direct TLS connections to those hosts it closed. Empty when nothing was
// injected.
func credentialSummary(routerLog string, creds []credential, entries []allowlist.Entry) string {
	if len(creds) == 0 {
		return ""
	}
	requests, closed := map[string]int{}, map[string]int{}
	for _, line := range strings.Split(routerLog, "\n") {
		if host, ok := routerlog.CredentialRequest(line); ok {
			requests[host]++
		} else if d, ok := routerlog.ParseDenial(line); ok && !d.Lookup {
			closed[strings.TrimSuffix(strings.ToLower(d.Host), ".")]++
		}
	}
	var lines []string
	for _, c := range creds {
		for i, host := range append([]string{c.host}, c.also...) {
			// GitHub's other hosts are listed only when used.
			if requests[host] == 0 && (i > 0 || !allowlist.Allows(host, entries)) {
				continue
			}
			line := fmt.Sprintf("  %s  %s, %s", host, c.source, plural(requests[host], "request"))
			if n := closed[host]; n > 0 {
				line += fmt.Sprintf("; %s straight to it closed (use the base URL)", plural(n, "TLS connection"))
			}
			lines = append(lines, line+"\n")
		}
	}
	if len(lines) == 0 {
		return ""
	}
	sort.Strings(lines)
	return iostreams.Prefixed("the router added your credentials (the agent held placeholders):\n" + strings.Join(lines, ""))
}

// removedSummary says, at the end of a session, on which hosts the router
// removed credentials the agent sent of its own, in how many requests and
// which: the agent acted there anonymously (or as the user) instead.
// Empty when it removed none. The hosts the router adds the user's
// credential for are left out: the agent's placeholder is replaced there
// on every request, and credentialSummary says so.
func removedSummary(routerLog string, creds []credential) string {
	type removal struct {
		requests int
		what     map[string]bool
	}
	byHost := map[string]*removal{}
	for _, line := range strings.Split(routerLog, "\n") {
		host, removed, ok := routerlog.Inspected(line)
		if !ok || removed == "-" || removed == "" || !routerlog.PrintableHost(host) || slices.ContainsFunc(creds, func(c credential) bool { return c.host == host || slices.Contains(c.also, host) }) {
			continue
		}
		r := byHost[host]
		if r == nil {
			r = &removal{what: map[string]bool{}}
			byHost[host] = r
		}
		r.requests++
		for _, w := range strings.Split(removed, ",") {
			if routerlog.PrintableHeader(w) {
				r.what[w] = true
			}
		}
	}
	if len(byHost) == 0 {
		return ""
	}
	var lines []string
	for host, r := range byHost {
		what := make([]string, 0, len(r.what))
		for w := range r.what {
			what = append(what, w)
		}
		sort.Strings(what)
		lines = append(lines, fmt.Sprintf("  %s  %s (%s): removed\n", host, plural(r.requests, "request"), strings.Join(what, ", ")))
	}
	sort.Strings(lines)
	return iostreams.Prefixed("the agent sent credentials of its own, which the router removed (it acts on allowed hosts anonymously or as you):\n" + strings.Join(lines, ""))
}

// apiGateSummary says which requests to the model APIs the router refused
// (those the provider would have made reach out on the agent's behalf, or
// endpoints off the list) and what it trimmed, with how to allow a rule;
// nothing when there was none. Paths come from the agent: only printable
// ones are shown.
func apiGateSummary(routerLog string, allowed []string) string {
	type key struct{ host, rule, method, path string }
	refused := map[key]int{}
	trimmed := map[string]int{}
	unprintable := 0
	for _, line := range strings.Split(routerLog, "\n") {
		if r, ok := routerlog.APIRefused(line); ok {
			method, path := r.Method, r.Path
			if !routerlog.PrintableRequest(method, path) {
				unprintable++
				method, path = "", "(a request that cannot be printed)"
			}
			refused[key{r.Host, r.Rule, method, path}]++
		} else if host, ok := routerlog.APITrimmed(line); ok {
			trimmed[host]++
		}
	}
	var b strings.Builder
	if len(allowed) > 0 {
		fmt.Fprintf(&b, "the API rules %s were off for this session (AGENT_SANDBOX_API_ALLOW)\n", strings.Join(allowed, ", "))
	}
	if len(refused) > 0 {
		b.WriteString("the router refused requests to the model APIs that your key would have signed:\n")
		var lines []string
		for k, n := range refused {
			what := strings.TrimSpace(k.method + " " + k.path)
			lines = append(lines, fmt.Sprintf("  %s %s: rule %s, %s; to allow it: AGENT_SANDBOX_API_ALLOW=%s\n", k.host, what, k.rule, plural(n, "time"), k.rule))
		}
		sort.Strings(lines)
		b.WriteString(strings.Join(lines, ""))
	}
	var hosts []string
	for h := range trimmed {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	for _, h := range hosts {
		fmt.Fprintf(&b, "the router trimmed a web fetch tool's domains to the allowlist in %s to %s\n", plural(trimmed[h], "request"), h)
	}
	return iostreams.Prefixed(b.String())
}
