package forge

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

var scope = Scope{Repos: map[string]bool{"me/proj": true, "org/tool": true}}

func allowing(rules ...string) Scope {
	s := Scope{Repos: scope.Repos, Allow: map[string]bool{}}
	for _, r := range rules {
		s.Allow[r] = true
	}
	return s
}

type checkCase struct {
	name  string
	role  Role
	r     Request
	s     *Scope // nil: scope
	rule  string // "" admits
	repo  string // checked when not ""
	allow string // the rule an admission passed by, when not ""
}

func req(method, path string) Request { return Request{Method: method, Path: path} }

func withQuery(r Request, q string) Request { r.RawQuery = q; return r }

func withBody(r Request, b string) Request { r.Body = []byte(b); return r }

func runChecks(t *testing.T, cases []checkCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := scope
			if c.s != nil {
				s = *c.s
			}
			d := Check(c.role, c.r, s)
			switch {
			case c.rule == "" && d.Refused:
				t.Fatalf("refused (%s, %d): %s", d.Rule, d.Status, d.Reason)
			case c.rule != "" && (!d.Refused || d.Rule != c.rule):
				t.Fatalf("decision %+v, want refusal by %s", d, c.rule)
			}
			if c.repo != "" && d.Repo != c.repo {
				t.Errorf("repo %q, want %q", d.Repo, c.repo)
			}
			if d.Allowed != c.allow {
				t.Errorf("allowed by %q, want %q", d.Allowed, c.allow)
			}
			if !d.Refused {
				return
			}
			want := 403
			if c.rule == "forge.unreadable" {
				want = 400
			}
			if d.Status != want && !(c.rule == "forge.unreadable" && (d.Status == 413 || d.Status == 415)) {
				t.Errorf("status %d, want %d", d.Status, want)
			}
			if d.Reason == "" || d.Fix == "" {
				t.Errorf("a refusal without a reason or a fix: %+v", d)
			}
		})
	}
}

func TestGitHubGit(t *testing.T) {
	g := GitHubGit
	open := allowing(Allowable...)
	runChecks(t, []checkCase{
		// Fetches, of anything.
		{"fetch advertisement", g, withQuery(req("GET", "/other/x.git/info/refs"), "service=git-upload-pack"), nil, "", "", ""},
		{"fetch", g, req("POST", "/other/x.git/git-upload-pack"), nil, "", "", ""},
		{"fetch without .git", g, req("POST", "/other/x/git-upload-pack"), nil, "", "", ""},
		{"dumb refs", g, req("GET", "/other/x/info/refs"), nil, "", "", ""},
		{"a web page", g, req("GET", "/other/x/blob/main/README.md"), nil, "", "", ""},
		{"a web page's query is not read", g, withQuery(req("GET", "/other/x/pulls"), "service=a&service=b&q=%zz"), nil, "", "", ""},
		{"HEAD", g, req("HEAD", "/other/x"), nil, "", "", ""},

		// Pushes.
		{"push advertisement in scope", g, withQuery(req("GET", "/me/proj.git/info/refs"), "service=git-receive-pack"), nil, "", "me/proj", ""},
		{"push advertisement out of scope", g, withQuery(req("GET", "/other/x.git/info/refs"), "service=git-receive-pack"), nil, "github.push", "other/x", ""},
		{"push advertisement, HEAD", g, withQuery(req("HEAD", "/other/x.git/info/refs"), "service=git-receive-pack"), nil, "github.push", "other/x", ""},
		{"push in scope", g, req("POST", "/me/proj.git/git-receive-pack"), nil, "", "me/proj", ""},
		{"push in scope, other case, no .git", g, req("POST", "/Me/PROJ/git-receive-pack"), nil, "", "me/proj", ""},
		{"push in scope, trailing slash", g, req("POST", "/me/proj.git/git-receive-pack/"), nil, "", "me/proj", ""},
		{"push in scope, endpoint in capitals", g, req("POST", "/me/proj.git/GIT-RECEIVE-PACK"), nil, "", "me/proj", ""},
		{"push out of scope", g, req("POST", "/other/x.git/git-receive-pack"), nil, "github.push", "other/x", ""},
		{"push out of scope is never allowed by name", g, req("POST", "/other/x.git/git-receive-pack"), &Scope{Allow: map[string]bool{"github.push": true, "github.web_write": true}}, "github.push", "other/x", ""},
		{"push out of scope with every allowable rule off", g, req("POST", "/other/x.git/git-receive-pack"), &open, "github.push", "other/x", ""},
		{"push to a wiki", g, req("POST", "/me/proj.wiki.git/git-receive-pack"), nil, "github.push", "me/proj.wiki", ""},
		{"push named in a fetch's query", g, withQuery(req("POST", "/other/x/git-upload-pack"), "service=git-receive-pack"), nil, "github.push", "other/x", ""},
		{"push, service in capitals", g, withQuery(req("GET", "/other/x/info/refs"), "SERVICE=git-receive-pack"), nil, "github.push", "other/x", ""},
		{"push, escaped service name", g, withQuery(req("GET", "/other/x/info/refs"), "servic%65=git-receive-pack"), nil, "github.push", "other/x", ""},
		{"push, escaped service value", g, withQuery(req("GET", "/other/x/info/refs"), "service=git-receive-pac%6B"), nil, "github.push", "other/x", ""},

		// What cannot be read.
		{"two services", g, withQuery(req("GET", "/me/proj/info/refs"), "service=git-upload-pack&service=git-receive-pack"), nil, "forge.unreadable", "", ""},
		{"two services split on ;", g, withQuery(req("GET", "/me/proj/info/refs"), "service=git-upload-pack;service=git-receive-pack"), nil, "forge.unreadable", "", ""},
		{"two services on a push", g, withQuery(req("POST", "/me/proj/git-receive-pack"), "service=git-receive-pack&service=x"), nil, "forge.unreadable", "", ""},
		{"a service that is not git's", g, withQuery(req("GET", "/me/proj/info/refs"), "service=git-upload-archive"), nil, "forge.unreadable", "", ""},
		{"a malformed query on refs", g, withQuery(req("GET", "/me/proj/info/refs"), "servic%6=git-receive-pack"), nil, "forge.unreadable", "", ""},
		{"refs through a dot segment", g, withQuery(req("GET", "/other/x/info/./refs"), "service=x"), nil, "forge.unreadable", "", ""},
		{"dot-dot into another repository", g, req("POST", "/me/proj.git/../../other/x.git/git-receive-pack"), nil, "forge.unreadable", "", ""},
		{"escaped dot-dot", g, req("POST", "/me/proj/%2e%2e/%2E%2E/other/x/git-receive-pack"), nil, "forge.unreadable", "", ""},
		{"escaped slashes in the name", g, req("POST", "/me/proj%2F..%2F..%2Fother%2Fx/git-receive-pack"), nil, "forge.unreadable", "", ""},
		{"an escape in the owner", g, req("POST", "/m%65/proj/git-receive-pack"), nil, "forge.unreadable", "", ""},
		{"double slash", g, req("POST", "//other/x.git/git-receive-pack"), nil, "forge.unreadable", "", ""},
		{"backslash", g, req("POST", `/me/proj\..\..\other\x/git-receive-pack`), nil, "forge.unreadable", "", ""},
		{"matrix parameter", g, req("POST", "/me/proj;x=1/git-receive-pack"), nil, "forge.unreadable", "", ""},
		{".git twice", g, req("POST", "/me/proj.git.git/git-receive-pack"), nil, "forge.unreadable", "", ""},
		{".GIT", g, req("POST", "/me/proj.GIT/git-receive-pack"), nil, "forge.unreadable", "", ""},
		{"a repository named ..", g, req("POST", "/me/../git-receive-pack"), nil, "forge.unreadable", "", ""},
		{"a repository named ...", g, req("POST", "/me/.../git-receive-pack"), nil, "github.push", "me/...", ""},
		{"an unknown method", g, req("PROPFIND", "/me/proj"), nil, "forge.unreadable", "", ""},
		{"a lowercase method", g, req("post", "/other/x/git-receive-pack"), nil, "forge.unreadable", "", ""},

		// Git LFS.
		{"LFS batch in scope", g, req("POST", "/me/proj.git/info/lfs/objects/batch"), nil, "", "me/proj", ""},
		{"LFS download out of scope", g, withBody(req("POST", "/other/x.git/info/lfs/objects/batch"), `{"operation":"download","transfers":["basic"],"objects":[{"oid":"ab","size":1}]}`), nil, "", "", ""},
		{"LFS upload out of scope", g, withBody(req("POST", "/other/x.git/info/lfs/objects/batch"), `{"operation":"upload","objects":[{"oid":"ab","size":1}]}`), nil, "github.lfs_upload", "other/x", ""},
		{"LFS operation in capitals", g, withBody(req("POST", "/other/x.git/info/lfs/objects/batch"), `{"operation":"Download"}`), nil, "github.lfs_upload", "other/x", ""},
		{"LFS without an operation", g, withBody(req("POST", "/other/x.git/info/lfs/objects/batch"), `{}`), nil, "github.lfs_upload", "other/x", ""},
		{"LFS operation in another case too", g, withBody(req("POST", "/other/x.git/info/lfs/objects/batch"), `{"operation":"download","Operation":"upload"}`), nil, "github.lfs_upload", "other/x", ""},
		{"LFS operation twice", g, withBody(req("POST", "/other/x.git/info/lfs/objects/batch"), `{"operation":"download","operation":"upload"}`), nil, "forge.unreadable", "", ""},
		{"LFS body not JSON", g, withBody(req("POST", "/other/x.git/info/lfs/objects/batch"), `operation=download`), nil, "forge.unreadable", "", ""},
		{"LFS body missing", g, req("POST", "/other/x.git/info/lfs/objects/batch"), nil, "forge.unreadable", "", ""},
		{"LFS body compressed", g, Request{Method: "POST", Path: "/other/x.git/info/lfs/objects/batch", ContentEncoding: "gzip", Body: []byte("\x1f\x8b")}, nil, "forge.unreadable", "", ""},
		{"LFS body too large", g, Request{Method: "POST", Path: "/other/x.git/info/lfs/objects/batch", Body: make([]byte, MaxBody+1)}, nil, "forge.unreadable", "", ""},
		{"LFS lock out of scope", g, req("POST", "/other/x.git/info/lfs/locks"), nil, "github.push", "other/x", ""},
		{"LFS unlock out of scope", g, req("POST", "/other/x.git/info/lfs/locks/12/unlock"), nil, "github.push", "other/x", ""},
		{"LFS lock verification in scope", g, req("POST", "/me/proj.git/info/lfs/locks/verify"), nil, "", "me/proj", ""},
		{"LFS locks listed", g, req("GET", "/other/x.git/info/lfs/locks"), nil, "", "", ""},
		{"LFS legacy upload out of scope", g, req("POST", "/other/x.git/info/lfs/objects"), nil, "github.lfs_upload", "other/x", ""},

		// The web.
		{"a web form", g, req("POST", "/other/x/issues/new"), nil, "github.web_write", "", ""},
		{"a web form in scope", g, req("POST", "/me/proj/settings/collaborators"), nil, "github.web_write", "", ""},
		{"sign in", g, req("POST", "/session"), nil, "github.web_write", "", ""},
		{"github.com's own GraphQL", g, req("POST", "/_graphql"), nil, "github.web_write", "", ""},
		{"a push by another method", g, req("PUT", "/me/proj/git-receive-pack"), nil, "github.web_write", "", ""},
		{"an escaped endpoint is not known", g, req("POST", "/me/proj/git-receive-pac%6B"), nil, "github.web_write", "", ""},
		{"a web write is not allowed by name", g, req("POST", "/other/x/issues/new"), &open, "github.web_write", "", ""},
	})
}

func TestGitHubAPI(t *testing.T) {
	a := GitHubAPI
	settings := allowing("github.repo_settings")
	gist := allowing("github.gist")
	account := allowing("github.account")
	outside := allowing("github.write_outside_repo")
	open := allowing(Allowable...)
	never := allowing("github.push", "github.repo_write", "forge.unreadable")
	runChecks(t, []checkCase{
		{"a read", a, req("GET", "/repos/other/x/hooks"), nil, "", "", ""},
		{"a read of anything", a, req("GET", "//repos/../x"), nil, "", "", ""},

		// Content of the session's repositories.
		{"a pull request", a, req("POST", "/repos/me/proj/pulls"), nil, "", "me/proj", ""},
		{"a merge", a, req("PUT", "/repos/me/proj/pulls/3/merge"), nil, "", "me/proj", ""},
		{"an issue comment", a, req("POST", "/repos/me/proj/issues/1/comments"), nil, "", "me/proj", ""},
		{"a commit comment", a, req("PATCH", "/repos/me/proj/comments/5"), nil, "", "me/proj", ""},
		{"a release", a, req("POST", "/repos/me/proj/releases"), nil, "", "me/proj", ""},
		{"a release asset on uploads.github.com", a, withQuery(req("POST", "/repos/me/proj/releases/9/assets"), "name=a.tgz&label=x"), nil, "", "me/proj", ""},
		{"a ref", a, req("PATCH", "/repos/me/proj/git/refs/heads/main"), nil, "", "me/proj", ""},
		{"a ref, escaped slash", a, req("DELETE", "/repos/me/proj/git/refs/heads%2Ffeature"), nil, "", "me/proj", ""},
		{"a file", a, req("PUT", "/repos/me/proj/contents/docs/a%20b.md"), nil, "", "me/proj", ""},
		{"labels", a, req("POST", "/repos/me/proj/labels"), nil, "", "me/proj", ""},
		{"milestones", a, req("POST", "/repos/me/proj/milestones"), nil, "", "me/proj", ""},
		{"a status", a, req("POST", "/repos/me/proj/statuses/abc123"), nil, "", "me/proj", ""},
		{"a check run", a, req("POST", "/repos/me/proj/check-runs"), nil, "", "me/proj", ""},
		{"a check suite", a, req("POST", "/repos/me/proj/check-suites"), nil, "", "me/proj", ""},
		{"merges", a, req("POST", "/repos/me/proj/merges"), nil, "", "me/proj", ""},
		{"a fork makes a repository in an account", a, req("POST", "/repos/org/tool/forks"), nil, "github.account", "org/tool", ""},
		{"workflows through the contents API", a, req("PUT", "/repos/me/proj/contents/.github/workflows/ci.yml"), nil, "github.repo_settings", "me/proj", ""},
		{"workflows escaped", a, req("PUT", "/repos/me/proj/contents/%2Egithub/workflows/ci.yml"), nil, "github.repo_settings", "me/proj", ""},
		{"workflows with an escaped letter", a, req("PUT", "/repos/me/proj/contents/.githu%62/workflows/ci.yml"), nil, "github.repo_settings", "me/proj", ""},
		{"workflows with an escaped slash", a, req("PUT", "/repos/me/proj/contents/.github%2Fworkflows%2Fci.yml"), nil, "github.repo_settings", "me/proj", ""},
		{"a file named like it", a, req("PUT", "/repos/me/proj/contents/docs/.github.md"), nil, "", "me/proj", ""},
		{"workflows in other case", a, req("PUT", "/repos/me/proj/contents/.GitHub/workflows/ci.yml"), nil, "github.repo_settings", "me/proj", ""},
		{"a webhook by /hub", a, req("POST", "/hub"), nil, "github.account", "", ""},
		{"an organisation by number", a, req("PATCH", "/organizations/12/settings"), nil, "github.account", "", ""},
		{"a deployment status", a, req("POST", "/repos/me/proj/deployments/4/statuses"), nil, "", "me/proj", ""},
		{"other case", a, req("POST", "/REPOS/Me/PROJ/Issues"), nil, "", "me/proj", ""},
		{".git suffix", a, req("POST", "/repos/me/proj.git/issues"), nil, "", "me/proj", ""},
		{"trailing slash", a, req("POST", "/repos/me/proj/issues/"), nil, "", "me/proj", ""},

		// Other repositories.
		{"another repository", a, req("POST", "/repos/other/x/issues"), nil, "github.repo_write", "other/x", ""},
		{"another repository in capitals", a, req("POST", "/REPOS/Other/X/issues"), nil, "github.repo_write", "other/x", ""},
		{"another repository's settings", a, req("PATCH", "/repos/other/x"), nil, "github.repo_write", "other/x", ""},
		{"another repository's release asset", a, withQuery(req("POST", "/repos/other/x/releases/9/assets"), "name=a"), nil, "github.repo_write", "other/x", ""},
		{"another repository is never allowed by name", a, req("POST", "/repos/other/x/issues"), &never, "github.repo_write", "other/x", ""},
		{"another repository with every allowable rule off", a, req("POST", "/repos/other/x/issues"), &open, "github.repo_write", "other/x", ""},
		{"a repository by number", a, req("POST", "/repositories/123/issues"), &open, "github.repo_write", "", ""},

		// Settings and access of the session's repositories.
		{"the repository itself", a, req("PATCH", "/repos/me/proj"), nil, "github.repo_settings", "me/proj", ""},
		{"deleting it", a, req("DELETE", "/repos/me/proj/"), nil, "github.repo_settings", "me/proj", ""},
		{"hooks", a, req("POST", "/repos/me/proj/hooks"), nil, "github.repo_settings", "me/proj", ""},
		{"deploy keys", a, req("POST", "/repos/me/proj/keys"), nil, "github.repo_settings", "me/proj", ""},
		{"a collaborator", a, req("PUT", "/repos/me/proj/collaborators/someone"), nil, "github.repo_settings", "me/proj", ""},
		{"a transfer", a, req("POST", "/repos/me/proj/transfer"), nil, "github.repo_settings", "me/proj", ""},
		{"a secret", a, req("PUT", "/repos/me/proj/actions/secrets/TOKEN"), nil, "github.repo_settings", "me/proj", ""},
		{"a workflow dispatch", a, req("POST", "/repos/me/proj/actions/workflows/ci.yml/dispatches"), nil, "github.repo_settings", "me/proj", ""},
		{"a repository dispatch", a, req("POST", "/repos/me/proj/dispatches"), nil, "github.repo_settings", "me/proj", ""},
		{"pages", a, req("POST", "/repos/me/proj/pages"), nil, "github.repo_settings", "me/proj", ""},
		{"branch protection", a, req("DELETE", "/repos/me/proj/branches/main/protection"), nil, "github.repo_settings", "me/proj", ""},
		{"rulesets", a, req("POST", "/repos/me/proj/rulesets"), nil, "github.repo_settings", "me/proj", ""},
		{"topics", a, req("PUT", "/repos/me/proj/topics"), nil, "github.repo_settings", "me/proj", ""},
		{"an escaped kind is not known", a, req("POST", "/repos/me/proj/issue%73"), nil, "github.repo_settings", "me/proj", ""},
		{"settings allowed by name", a, req("POST", "/repos/me/proj/hooks"), &settings, "", "me/proj", "github.repo_settings"},

		// Outside any repository.
		{"a gist", a, req("POST", "/gists"), nil, "github.gist", "", ""},
		{"a gist edit", a, req("PATCH", "/Gists/abc"), nil, "github.gist", "", ""},
		{"a gist allowed by name", a, req("POST", "/gists"), &gist, "", "", "github.gist"},
		{"a key", a, req("POST", "/user/keys"), nil, "github.account", "", ""},
		{"a new repository", a, req("POST", "/user/repos"), nil, "github.account", "", ""},
		{"the user", a, req("PATCH", "/user"), nil, "github.account", "", ""},
		{"an org membership", a, req("PUT", "/orgs/acme/memberships/someone"), nil, "github.account", "", ""},
		{"a team", a, req("PUT", "/teams/1/repos/other/x"), nil, "github.account", "", ""},
		{"a user", a, req("PUT", "/users/someone/following"), nil, "github.account", "", ""},
		{"an authorization", a, req("POST", "/authorizations"), nil, "github.account", "", ""},
		{"an application token", a, req("DELETE", "/applications/1/token"), nil, "github.account", "", ""},
		{"an app", a, req("POST", "/app/installations/1/access_tokens"), nil, "github.account", "", ""},
		{"an app manifest", a, req("POST", "/app-manifests/code/conversions"), nil, "github.account", "", ""},
		{"an account change allowed by name", a, req("POST", "/user/keys"), &account, "", "", "github.account"},
		{"the account is not opened by write_outside_repo", a, req("POST", "/user/keys"), &outside, "github.account", "", ""},
		{"notifications", a, req("PUT", "/notifications"), nil, "github.write_outside_repo", "", ""},
		{"markdown", a, req("POST", "/markdown"), nil, "github.write_outside_repo", "", ""},
		{"outside allowed by name", a, req("PUT", "/notifications"), &outside, "", "", "github.write_outside_repo"},

		// What cannot be read.
		{"dot-dot into another repository", a, req("POST", "/repos/me/proj/../../other/x/issues"), &outside, "forge.unreadable", "", ""},
		{"dot-dot past /repos", a, req("POST", "/notifications/../repos/other/x/hooks"), &outside, "forge.unreadable", "", ""},
		{"a dot segment", a, req("POST", "/repos/me/./proj/issues"), nil, "forge.unreadable", "", ""},
		{"a trailing dot-dot", a, req("POST", "/repos/me/proj/issues/.."), nil, "forge.unreadable", "", ""},
		{"a trailing dot", a, req("POST", "/repos/me/proj/."), nil, "forge.unreadable", "", ""},
		{"escaped dot-dot in the tail", a, req("POST", "/repos/me/proj/issues/1%2F..%2F..%2F..%2F..%2Fother%2Fx%2Fhooks"), nil, "forge.unreadable", "", ""},
		{"double slash before repos", a, req("POST", "//repos/other/x/issues"), &outside, "forge.unreadable", "", ""},
		{"double slash inside", a, req("POST", "/repos/me//proj/issues"), nil, "forge.unreadable", "", ""},
		{"escaped slash in the name", a, req("POST", "/repos/other%2Fx/issues"), &open, "forge.unreadable", "", ""},
		{"escaped owner", a, req("POST", "/repos/%6De/proj/issues"), nil, "forge.unreadable", "", ""},
		{"escaped repos", a, req("POST", "/%72epos/other/x/issues"), &outside, "forge.unreadable", "", ""},
		{"repos and the name escaped together", a, req("POST", "/repos%2Fother%2Fx/hooks"), &outside, "forge.unreadable", "", ""},
		{"a backslash", a, req("POST", `/repos/me/proj\..\..\other\x/issues`), nil, "forge.unreadable", "", ""},
		{"a matrix parameter", a, req("POST", "/repos/me/proj;o=other/issues"), nil, "forge.unreadable", "", ""},
		{"no repository", a, req("POST", "/repos/me"), &open, "forge.unreadable", "", ""},
		{"a bad owner", a, req("POST", "/repos/m~e/proj/issues"), nil, "forge.unreadable", "", ""},
		{"an underscore in the owner", a, req("POST", "/repos/m_e/proj/issues"), nil, "forge.unreadable", "", ""},
		{"a repository named ..", a, req("POST", "/repos/me/%2E%2E/issues"), nil, "forge.unreadable", "", ""},
		{"an unknown method", a, req("PURGE", "/repos/me/proj/issues"), nil, "forge.unreadable", "", ""},
		{"a relative path", a, req("POST", "repos/me/proj/issues"), nil, "forge.unreadable", "", ""},
	})
}

func TestGraphQLRequests(t *testing.T) {
	a := GitHubAPI
	allowed := allowing("github.graphql_mutation")
	post := func(body string) Request { return withBody(req("POST", "/graphql"), body) }
	runChecks(t, []checkCase{
		{"a query", a, post(`{"query":"query { viewer { login } }"}`), nil, "", "", ""},
		{"gh's shape", a, post(`{"query":"query($owner:String!){repository(owner:$owner,name:\"x\"){id}}","variables":{"owner":"me"}}`), nil, "", "", ""},
		{"operationName and variables null", a, post(`{"query":"query Q { a }","operationName":null,"variables":null}`), nil, "", "", ""},
		{"operationName", a, post(`{"query":"query Q { a } query R { b }","operationName":"R"}`), nil, "", "", ""},
		{"a mutation", a, post(`{"query":"mutation { addStar(input:{starrableId:\"x\"}) { clientMutationId } }"}`), nil, "github.graphql_mutation", "", ""},
		{"a query typed JSON", a, Request{Method: "POST", Path: "/graphql", ContentType: "application/json; charset=utf-8", Body: []byte(`{"query":"{ viewer { login } }"}`)}, nil, "", "", ""},
		{"a body typed as a form", a, Request{Method: "POST", Path: "/graphql", ContentType: "application/x-www-form-urlencoded", Body: []byte(`{"query":"{ viewer { login } }"}`)}, nil, "forge.unreadable", "", ""},
		{"a mutation after a query", a, post(`{"query":"query A { a } mutation B { b }","operationName":"A"}`), nil, "github.graphql_mutation", "", ""},
		{"a subscription", a, post(`{"query":"subscription { a }"}`), nil, "github.graphql_mutation", "", ""},
		{"a mutation allowed by name", a, post(`{"query":"mutation { a }"}`), &allowed, "", "", "github.graphql_mutation"},
		{"a mutation, escaped in JSON", a, post(`{"query":"\u006dutation { a }"}`), nil, "github.graphql_mutation", "", ""},
		{"another spelling of the path", a, withBody(req("POST", "/GraphQL/"), `{"query":"mutation { a }"}`), nil, "github.graphql_mutation", "", ""},
		{"a mutation in the URL of a GET", a, withQuery(req("GET", "/graphql"), "query=mutation%20%7B%20a%20%7D"), nil, "github.graphql_mutation", "", ""},
		{"a mutation in the URL of a GET, odd path", a, withQuery(req("GET", "/./graphql;x"), "query=mutation{a}"), nil, "github.graphql_mutation", "", ""},
		{"a mutation in the URL of a POST", a, withQuery(post(`{"query":"{ a }"}`), "query=mutation{a}"), nil, "github.graphql_mutation", "", ""},
		{"a mutation in a GET's body", a, withBody(req("GET", "/graphql"), `{"query":"mutation { a }"}`), nil, "github.graphql_mutation", "", ""},
		{"a query in the URL of a GET", a, withQuery(req("GET", "/graphql"), "query=%7Ba%7D"), nil, "", "", ""},
		{"a plain GET", a, req("GET", "/graphql"), nil, "", "", ""},
		{"a batch", a, post(`[{"query":"{ a }"},{"query":"mutation { b }"}]`), &allowed, "forge.unreadable", "", ""},
		{"not JSON", a, post(`query=mutation{a}`), nil, "forge.unreadable", "", ""},
		{"no body", a, req("POST", "/graphql"), nil, "forge.unreadable", "", ""},
		{"no query", a, post(`{"variables":{}}`), nil, "forge.unreadable", "", ""},
		{"query twice", a, post(`{"query":"{ a }","query":"mutation { a }"}`), nil, "forge.unreadable", "", ""},
		{"query not a string", a, post(`{"query":["mutation { a }"]}`), nil, "forge.unreadable", "", ""},
		{"an unknown key", a, post(`{"query":"{ a }","extensions":{"persistedQuery":{"sha256Hash":"ab"}}}`), nil, "forge.unreadable", "", ""},
		{"variables not an object", a, post(`{"query":"{ a }","variables":"{}"}`), nil, "forge.unreadable", "", ""},
		{"data after the object", a, post(`{"query":"{ a }"} {"query":"mutation { a }"}`), nil, "forge.unreadable", "", ""},
		{"invalid UTF-8", a, post("{\"query\":\"{ a }\xff\"}"), nil, "forge.unreadable", "", ""},
		{"an unterminated string", a, post(`{"query":"{ a(s: \"x) } mutation { b }"}`), &allowed, "forge.unreadable", "", ""},
		{"unbalanced braces", a, post(`{"query":"query { a } }"}`), nil, "forge.unreadable", "", ""},
		{"compressed", a, Request{Method: "POST", Path: "/graphql", ContentEncoding: "br", Body: []byte(`{"query":"{ a }"}`)}, nil, "forge.unreadable", "", ""},
		{"too large", a, post(`{"query":"{ a }","variables":{"x":"` + strings.Repeat("a", MaxBody) + `"}}`), nil, "forge.unreadable", "", ""},
		{"an unclean path", a, withBody(req("POST", "//graphql"), `{"query":"{ a }"}`), nil, "forge.unreadable", "", ""},
	})
}

func TestRegistries(t *testing.T) {
	publish := Scope{Publish: true}
	runChecks(t, []checkCase{
		{"a download", Registry, req("GET", "/simple/requests/"), nil, "", "", ""},
		{"a PyPI upload", Registry, req("POST", "/legacy/"), nil, "registry.publish", "", ""},
		{"a crate", Registry, req("PUT", "/api/v1/crates/new"), nil, "registry.publish", "", ""},
		{"a yank", Registry, req("DELETE", "/api/v1/crates/x/1.0.0/yank"), nil, "registry.publish", "", ""},
		{"publishing allowed", Registry, req("POST", "/legacy/"), &publish, "", "", ""},
		{"publishing is not an API rule", Registry, req("POST", "/legacy/"), &Scope{Allow: map[string]bool{"registry.publish": true}}, "registry.publish", "", ""},
		{"npm audit is not the plain registry's", Registry, req("POST", "/-/npm/v1/security/audits/quick"), nil, "registry.publish", "", ""},
		{"an unclean path", Registry, req("POST", "/legacy/../x"), &publish, "forge.unreadable", "", ""},
		{"an npm download", NPM, req("GET", "/@scope%2fpkg"), nil, "", "", ""},
		{"npm audit", NPM, req("POST", "/-/npm/v1/security/audits"), nil, "", "", ""},
		{"npm audit quick", NPM, req("POST", "/-/npm/v1/security/audits/quick"), nil, "", "", ""},
		{"npm advisories", NPM, req("POST", "/-/npm/v1/security/advisories/bulk"), nil, "", "", ""},
		{"npm audit, another method", NPM, req("PUT", "/-/npm/v1/security/audits"), nil, "registry.publish", "", ""},
		{"npm audit, another case", NPM, req("POST", "/-/NPM/v1/security/audits"), nil, "registry.publish", "", ""},
		{"npm audit, dot-dot", NPM, req("POST", "/-/npm/v1/security/audits/../../../../pkg"), nil, "forge.unreadable", "", ""},
		{"npm audit, escaped", NPM, req("POST", "/-/npm/v1/security/audit%73"), nil, "registry.publish", "", ""},
		{"an npm publish", NPM, req("PUT", "/@scope%2fpkg"), nil, "registry.publish", "", ""},
		{"an npm unpublish", NPM, req("DELETE", "/pkg/-rev/3-abc"), nil, "registry.publish", "", ""},
		{"an npm dist-tag", NPM, req("PUT", "/-/package/pkg/dist-tags/latest"), nil, "registry.publish", "", ""},
		{"an npm publish allowed", NPM, req("PUT", "/@scope%2fpkg"), &publish, "", "", ""},
		{"an unknown method", NPM, req("MKCOL", "/pkg"), &publish, "forge.unreadable", "", ""},
	})
}

func TestUnknownRole(t *testing.T) {
	for _, m := range []string{"GET", "POST"} {
		if d := Check(Role("gitlab"), req(m, "/x"), Scope{Publish: true}); !d.Refused || d.Rule != "forge.role" {
			t.Errorf("%s to an unknown role: %+v", m, d)
		}
	}
}

func TestNeedsBody(t *testing.T) {
	for _, c := range []struct {
		role         Role
		method, path string
		want         bool
	}{
		{GitHubAPI, "POST", "/graphql", true},
		{GitHubAPI, "POST", "/GraphQL/", true},
		{GitHubAPI, "GET", "/graphql", true},
		{GitHubAPI, "POST", "/%67raphql", true},
		{GitHubAPI, "POST", "/repos/me/proj/issues", false},
		{GitHubAPI, "POST", "/repos/me/proj/info/lfs/objects/batch", false},
		{GitHubGit, "POST", "/other/x.git/info/lfs/objects/batch", true},
		{GitHubGit, "POST", "/other/x/info/lfs/objects/batch/", true},
		{GitHubGit, "GET", "/other/x.git/info/lfs/objects/batch", false},
		{GitHubGit, "POST", "/other/x.git/git-receive-pack", false},
		{GitHubGit, "POST", "/graphql", false},
		{Registry, "POST", "/graphql", false},
		{NPM, "POST", "/-/npm/v1/security/audits", false},
	} {
		if got := NeedsBody(c.role, c.method, c.path); got != c.want {
			t.Errorf("NeedsBody(%s, %s, %s) = %v, want %v", c.role, c.method, c.path, got, c.want)
		}
	}
}

func TestErrorBody(t *testing.T) {
	d := Check(GitHubAPI, req("POST", "/repos/other/x/issues"), scope)
	ct, body := ErrorBody(GitHubAPI, d)
	if !strings.HasPrefix(ct, "application/json") {
		t.Errorf("content type %q", ct)
	}
	var v struct {
		Message          string  `json:"message"`
		DocumentationURL *string `json:"documentation_url"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, body)
	}
	for _, want := range []string{"agent-sandbox: ", "github.repo_write", "other/x", "--repo other/x"} {
		if !strings.Contains(v.Message, want) {
			t.Errorf("message %q lacks %q", v.Message, want)
		}
	}
	if !strings.HasPrefix(v.Message, "agent-sandbox: ") || v.DocumentationURL == nil {
		t.Errorf("not in GitHub's shape: %s", body)
	}

	for _, c := range []struct {
		role      Role
		r         Request
		rule, fix string
	}{
		{GitHubGit, req("POST", "/other/x.git/git-receive-pack"), "github.push", "start the session with --repo other/x"},
		{GitHubAPI, req("POST", "/gists"), "github.gist", "AGENT_SANDBOX_API_ALLOW=github.gist"},
		{GitHubAPI, withBody(req("POST", "/graphql"), `{"query":"mutation{a}"}`), "github.graphql_mutation", "gh api repos/OWNER/NAME/pulls"},
		{GitHubAPI, req("POST", "/repos/me/proj/hooks"), "github.repo_settings", "AGENT_SANDBOX_API_ALLOW=github.repo_settings"},
		{Registry, req("POST", "/legacy/"), "registry.publish", "AGENT_SANDBOX_PUBLISH"},
		{NPM, req("PUT", "/pkg"), "registry.publish", "AGENT_SANDBOX_PUBLISH"},
	} {
		d := Check(c.role, c.r, scope)
		ct, body := ErrorBody(c.role, d)
		text := string(body)
		if c.role == GitHubAPI {
			var v map[string]any
			if err := json.Unmarshal(body, &v); err != nil {
				t.Fatalf("not JSON: %v: %s", err, body)
			}
			text, _ = v["message"].(string)
		} else if !strings.HasPrefix(ct, "text/plain") || !strings.HasSuffix(text, "\n") {
			t.Errorf("%s: content type %q, body %q", c.rule, ct, body)
		}
		for _, want := range []string{c.rule, c.fix, strings.TrimSuffix(d.Reason, ".")} {
			if !strings.Contains(text, want) {
				t.Errorf("%s: %q lacks %q", c.rule, text, want)
			}
		}
	}
}

func TestParseRole(t *testing.T) {
	for _, r := range []Role{GitHubGit, GitHubAPI, Registry, NPM} {
		if got, err := ParseRole(string(r)); err != nil || got != r {
			t.Errorf("ParseRole(%q) = %q, %v", r, got, err)
		}
	}
	_, err := ParseRole("GitHub")
	if err == nil {
		t.Fatal("an unknown role parsed")
	}
	for _, want := range []string{"github-git", "github-api", "registry", "registry-npm"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

func TestAllowable(t *testing.T) {
	for _, rule := range Allowable {
		if !allowable(rule) {
			t.Errorf("%s is listed but not allowable", rule)
		}
	}
	for _, rule := range []string{"github.push", "github.repo_write", "github.lfs_upload", "github.web_write", "registry.publish", "forge.unreadable"} {
		if allowable(rule) || slices.Contains(Allowable, rule) {
			t.Errorf("%s is allowable", rule)
		}
	}
}

func TestCleanPath(t *testing.T) {
	for p, ok := range map[string]bool{
		"/":                       true,
		"/repos/o/r/":             true,
		"/repos/o/r/contents/a.b": true,
		"/repos/o/r/contents/..a": true,
		"/a%20b":                  true,
		"":                        false,
		"a":                       false,
		"//":                      false,
		"/a//b":                   false,
		"/a/./b":                  false,
		"/a/../b":                 false,
		"/a/.":                    false,
		"/a/..":                   false,
		"/a/%2e%2E":               false,
		"/a%2F%2Fb":               false,
		"/a%2f..%2fb":             false,
		"/a%5Cb":                  false,
		"/a%3Bb":                  false,
		"/a%00":                   false,
		"/a%zz":                   false,
		"/a b":                    false,
		"/a\tb":                   false,
		"/\u00e9":                 false,
	} {
		if err := cleanPath(p); (err == nil) != ok {
			t.Errorf("cleanPath(%q) = %v, want clean %v", p, err, ok)
		}
	}
}
