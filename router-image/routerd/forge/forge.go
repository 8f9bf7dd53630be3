// Package forge decides what a request to GitHub or to a package registry
// may do when the router adds the user's token to it. The token can write
// wherever the user can, so the router scopes it: on GitHub, writes go
// only to the repositories the session was started with (--repo), and
// what would change who can reach or control one of them, the user's
// account, gists or anything GraphQL writes is refused unless the user
// turned that rule off by name; package registries are read-only unless
// the user allowed publishing to the host.
//
// Check is a pure function of the host's role, the request and the
// session's scope: the inspecting proxy calls it, with the body read
// (bounded by MaxBody) when NeedsBody says so, and sends on what it
// returns. Whatever two servers could read differently (an unclean path,
// a query naming git's service twice, a GraphQL document or JSON body
// that does not parse) is refused, not guessed at.
package forge

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Role is what a host is to the router, which says which rules apply.
type Role string

const (
	GitHubGit Role = "github-git"   // github.com: git smart HTTP, LFS, web
	GitHubAPI Role = "github-api"   // api.github.com and uploads.github.com: REST, GraphQL, release uploads
	Registry  Role = "registry"     // a package registry (PyPI, crates.io, Go proxy...): read-only
	NPM       Role = "registry-npm" // registry.npmjs.org: read-only but npm audit's POSTs
)

var roles = []Role{GitHubGit, GitHubAPI, Registry, NPM}

// ParseRole reads a role's name as the router's configuration spells it.
func ParseRole(s string) (Role, error) {
	names := make([]string, len(roles))
	for i, r := range roles {
		if string(r) == s {
			return r, nil
		}
		names[i] = string(r)
	}
	return "", fmt.Errorf("unknown forge role %q: the roles are %s", s, strings.Join(names, ", "))
}

// Scope is what the session may write to.
type Scope struct {
	Repos   map[string]bool // admitted repositories, "owner/name" lowercase
	Allow   map[string]bool // rules the user turned off by name (see Allowable)
	Publish bool            // this registry host may be published to
}

// Request is what Check needs of an HTTP request.
type Request struct {
	Method   string
	Path     string // the escaped path as sent (r.URL.EscapedPath())
	RawQuery string
	Body     []byte // only when NeedsBody said so; else nil
	// ContentEncoding is the request's Content-Encoding header: a body
	// Check must read is refused unless it is plain, since the server
	// would read what the router cannot.
	ContentEncoding string
	// ContentType is the request's Content-Type: a GraphQL body must say
	// JSON, since a server may read another type otherwise.
	ContentType string
}

// Decision is what to do with a request.
type Decision struct {
	Refused bool
	Status  int    // 403 normally; 400 for what cannot be read (413, 415 for a body too large or encoded)
	Rule    string // the rule that refused: "github.push", "registry.publish", "forge.unreadable", ...
	Repo    string // "owner/name" the request writes to, when known ("" otherwise)
	Reason  string // one sentence for the user: what was refused and why
	Fix     string // how to allow it
	// Allowed, on a request that was admitted, names the rule the user
	// turned off that would have refused it (Reason then says what it
	// would have refused), for the router's log.
	Allowed string
}

// MaxBody is the largest body Check reads (a GraphQL request, an LFS
// batch); a larger one is refused. Both are small: a query and its
// variables, a list of object ids.
const MaxBody = 1 << 20

// Allowable are the rules a user may turn off by name
// (AGENT_SANDBOX_API_ALLOW). github.push and github.repo_write are not
// among them: writes to a repository are opened one repository at a time
// with --repo. Nor are the rules that keep the check itself sound
// (forge.unreadable), the web's forms or registry.publish (opened per
// host with AGENT_SANDBOX_PUBLISH).
var Allowable = []string{
	"github.account", "github.gist", "github.graphql_mutation", "github.repo_settings", "github.write_outside_repo",
}

// allowable is Allowable as Check reads it: a switch, so that a caller
// changing the exported slice cannot open a rule that must stay closed.
func allowable(rule string) bool {
	switch rule {
	case "github.account", "github.gist", "github.graphql_mutation", "github.repo_settings", "github.write_outside_repo":
		return true
	}
	return false
}

// NeedsBody says whether Check reads the body of a request: a GraphQL
// request (any method: a server that read a GET's body must not find an
// unread mutation there) and an LFS batch (which, to a repository out of
// scope, is admitted only as a download).
func NeedsBody(role Role, method, path string) bool {
	switch role {
	case GitHubAPI:
		return graphQLPath(path)
	case GitHubGit:
		return method == "POST" && gitTail(path) == "info/lfs/objects/batch"
	}
	return false
}

// Check decides what to do with a request to a host of the role.
func Check(role Role, r Request, s Scope) Decision {
	if !read(r.Method) && !write(r.Method) {
		return unreadable(fmt.Sprintf("the method %q is not one the sandbox reads", r.Method), "send the request with GET, HEAD, OPTIONS, POST, PUT, PATCH or DELETE")
	}
	switch role {
	case GitHubGit:
		return checkGit(r, s)
	case GitHubAPI:
		return checkAPI(r, s)
	case Registry, NPM:
		return checkRegistry(role, r, s)
	}
	return Decision{Refused: true, Status: 403, Rule: "forge.role", Reason: fmt.Sprintf("the router has no rules for the role %q", role), Fix: "name one of the roles " + fmt.Sprint(roles) + " in the router's configuration"}
}

// read methods change nothing on any of the hosts: they are admitted
// wherever the allowlist admits the host.
func read(method string) bool {
	return method == "GET" || method == "HEAD" || method == "OPTIONS"
}

// write methods are those the rules read; any other (a WebDAV verb, a
// lowercase "post") is refused rather than guessed at.
func write(method string) bool {
	switch method {
	case "POST", "PUT", "PATCH", "DELETE":
		return true
	}
	return false
}

func admit(repo string) Decision { return Decision{Repo: repo} }

// refuse is a refusal by a rule the user cannot turn off.
func refuse(rule, repo, reason, fix string) Decision {
	return Decision{Refused: true, Status: 403, Rule: rule, Repo: repo, Reason: reason, Fix: fix}
}

// refusable refuses by rule unless the user turned it off by name.
func refusable(s Scope, rule, repo, reason string) Decision {
	if allowable(rule) && s.Allow[rule] {
		return Decision{Repo: repo, Reason: reason, Allowed: rule}
	}
	return refuse(rule, repo, reason, "set AGENT_SANDBOX_API_ALLOW="+rule)
}

// unreadable refuses what the router cannot read the way the server
// would: the user's fix is the request's plain form, not a switch.
func unreadable(reason, fix string) Decision {
	return Decision{Refused: true, Status: 400, Rule: "forge.unreadable", Reason: reason, Fix: fix}
}

// readableBody refuses a body Check cannot read whole: encoded, or over
// MaxBody (the caller reads MaxBody+1 bytes to show that).
func readableBody(r Request) (Decision, bool) {
	if enc := strings.ToLower(strings.TrimSpace(r.ContentEncoding)); enc != "" && enc != "identity" {
		d := unreadable("a request body in Content-Encoding "+r.ContentEncoding+" is not read, so it is not sent", "send the body uncompressed")
		d.Status = 415
		return d, false
	}
	if len(r.Body) > MaxBody {
		d := unreadable(fmt.Sprintf("a request body over %d KiB is not read, so it is not sent", MaxBody>>10), "send a smaller request")
		d.Status = 413
		return d, false
	}
	return Decision{}, true
}

// ErrorBody is the refusal's answer. For GitHubAPI it is an error object
// like GitHub's own, which gh and the API clients show by its message;
// for the others it is text/plain, which git prints as "remote: ..." and
// package managers print as the server's answer.
func ErrorBody(role Role, d Decision) (contentType string, body []byte) {
	msg := message(d)
	if role == GitHubAPI {
		b, _ := json.Marshal(struct {
			Message          string `json:"message"`
			DocumentationURL string `json:"documentation_url"`
			Status           string `json:"status"`
		}{msg, "", strconv.Itoa(d.Status)})
		return "application/json; charset=utf-8", b
	}
	return "text/plain; charset=utf-8", []byte(msg + "\n")
}

// message says the rule, the reason and the fix in one line.
func message(d Decision) string {
	if !d.Refused {
		return "agent-sandbox: admitted"
	}
	msg := fmt.Sprintf("agent-sandbox: refused by rule %s: %s.", d.Rule, strings.TrimSuffix(d.Reason, "."))
	if d.Fix != "" {
		msg += " To allow it, " + strings.TrimSuffix(d.Fix, ".") + "."
	}
	return msg
}
