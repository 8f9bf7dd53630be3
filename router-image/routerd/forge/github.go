package forge

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// contentKinds are the subresources of /repos/{owner}/{repo} whose writes
// are the work an agent does in a repository of the session: its
// content, its history and the conversation around them. A write to
// anything else under an admitted repository (the repository itself,
// hooks, deploy keys, collaborators, invitations, transfer, actions'
// secrets, variables, permissions and runners, workflow dispatches,
// environments, rulesets, branch protection, topics, security settings,
// autolinks, imports, codespaces, Pages, ...) changes who can reach or
// control it, or runs code with its secrets, so it is refused as
// github.repo_settings unless the user turns that rule off. An unknown
// kind is refused with them: the list is what passes, not what fails.
var contentKinds = map[string]string{
	"pulls":        "pull requests, their reviews, review comments and merges",
	"issues":       "issues, their comments, labels, assignees and reactions",
	"comments":     "commit comments",
	"releases":     "releases and their assets (uploads.github.com's POST .../releases/{id}/assets)",
	"git":          "the git data API: blobs, trees, commits, refs and tags, what a push writes",
	"contents":     "files committed through the API, what a push writes",
	"labels":       "the repository's issue labels",
	"milestones":   "the repository's milestones",
	"statuses":     "commit statuses, what CI reports on a commit",
	"check-runs":   "check runs, what CI reports on a commit",
	"check-suites": "check suites, what CI reports on a commit",
	"merges":       "merging one branch into another, what a push writes",
	"deployments":  "deployments and their statuses, a record the repository's CI reads",
	// Not forks: a fork is a new repository in the user's account or in
	// an organisation the body names (github.account).
}

// accountKinds are the first segments of the API's paths that write in
// the user's own name rather than a repository's: keys, tokens, new
// repositories, memberships, organisations and apps.
var accountKinds = map[string]bool{
	"user": true, "users": true, "orgs": true, "teams": true,
	"authorizations": true, "applications": true,
	"app": true, "apps": true, "app-manifests": true, "installation": true,
	"admin": true, "enterprises": true,
	// /hub subscribes a webhook to any repository the user administers;
	// /organizations/{id} is /orgs by number; /forks is not a path, but
	// a repository's forks are made in an account.
	"hub": true, "organizations": true,
}

// checkGit decides a request to github.com: git's smart HTTP, git LFS
// and the web.
func checkGit(r Request, s Scope) Decision {
	svc, d, ok := gitService(r)
	if !ok {
		return d
	}
	// The receive-pack advertisement is a GET, but it opens a push: refusing
	// it stops git before it sends the pack, with the message shown.
	push := svc == "git-receive-pack"
	if read(r.Method) && !push {
		return admit("")
	}
	if err := cleanPath(r.Path); err != nil {
		return unclean(r, err)
	}
	segs := segments(r.Path)
	if push {
		return gitWrite(segs, s, "github.push", "pushing to %s")
	}
	switch tail := gitTail(r.Path); {
	case r.Method == "POST" && tail == "git-upload-pack":
		return admit("") // a fetch: upload-pack only reads
	case r.Method == "POST" && tail == "git-receive-pack":
		return gitWrite(segs, s, "github.push", "pushing to %s")
	case r.Method == "POST" && tail == "info/lfs/objects/batch":
		return lfsBatch(segs, r, s)
	case tail == "info/lfs/locks" || strings.HasPrefix(tail, "info/lfs/locks/"):
		// Locks are taken and verified as part of a push.
		return gitWrite(segs, s, "github.push", "locking files in %s with git LFS")
	case tail == "info/lfs" || strings.HasPrefix(tail, "info/lfs/"):
		// Any other LFS write (the legacy API's uploads) stores objects.
		return gitWrite(segs, s, "github.lfs_upload", "storing LFS objects in %s")
	}
	return refuse("github.web_write", "", fmt.Sprintf("%s %s on github.com is a change through GitHub's web routes, which the sandbox cannot tie to a repository", r.Method, r.Path),
		"make the change with git or through api.github.com's REST API, which the sandbox scopes to the session's repositories")
}

// gitService is the service a request names in its query (git's
// service=git-upload-pack or service=git-receive-pack). Git's http-backend
// and GitHub read the first service argument, a proxy might read
// another: more than one is refused, as is one that is not git's on a
// refs advertisement. A read that is not an advertisement is not
// looked at: it is a web page's query.
func gitService(r Request) (string, Decision, bool) {
	refs := strings.HasSuffix(normalised(r.Path), "/info/refs")
	if read(r.Method) && !refs {
		return "", Decision{}, true
	}
	fix := "send one service=git-upload-pack or service=git-receive-pack, as git does"
	vals, err := queryValues(r.RawQuery, "service")
	switch {
	case err != nil:
		return "", unreadable(err.Error(), fix), false
	case len(vals) > 1:
		return "", unreadable("the query names git's service more than once", fix), false
	case len(vals) == 0:
		return "", Decision{}, true
	case vals[0] == "git-upload-pack" || vals[0] == "git-receive-pack":
		return vals[0], Decision{}, true
	case refs:
		return "", unreadable(fmt.Sprintf("the service %q is neither git-upload-pack nor git-receive-pack", vals[0]), fix), false
	}
	return "", Decision{}, true
}

// gitTail is what follows /{owner}/{repo} in a github.com path, without
// case: git's and LFS's endpoints, matched literally, so that an escape
// in them makes a request the rules do not know (refused as a web
// write), not one they misread.
func gitTail(p string) string {
	segs := segments(p)
	if len(segs) < 3 {
		return ""
	}
	return strings.ToLower(strings.Join(segs[2:], "/"))
}

// scopedRepo is the repository a git path names, or the refusal of a
// path that names none the rules can read.
func scopedRepo(segs []string) (string, Decision, bool) {
	if len(segs) < 2 {
		return "", unreadable("the path names no repository", "name the repository as OWNER/NAME"), false
	}
	repo, ok := repoName(segs[0], segs[1])
	if !ok {
		return "", unreadable(fmt.Sprintf("%q is not a repository name the sandbox reads (GitHub's letters, digits, '-', and in the name '_' and '.', unescaped)", segs[0]+"/"+segs[1]),
			"name the repository plainly, as OWNER/NAME"), false
	}
	return repo, Decision{}, true
}

// gitWrite admits a write to a repository of the session; what says the
// write, with %s for the repository.
func gitWrite(segs []string, s Scope, rule, what string) Decision {
	repo, d, ok := scopedRepo(segs)
	if !ok {
		return d
	}
	if s.Repos[repo] {
		return admit(repo)
	}
	return outOfScope(rule, repo, fmt.Sprintf(what, repo), s)
}

// outOfScope refuses a write to a repository the session was not
// started with: never turned off by name, only opened with --repo.
func outOfScope(rule, repo, what string, s Scope) Decision {
	return refuse(rule, repo, fmt.Sprintf("%s is refused: the session writes only to the repositories it was started with (%s)", what, scopeList(s)),
		"start the session with --repo "+repo)
}

func scopeList(s Scope) string {
	var names []string
	for name, ok := range s.Repos {
		if ok {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// lfsBatch admits an LFS batch to a repository of the session, and to
// any other only as a download (a read that the batch API makes a POST).
func lfsBatch(segs []string, r Request, s Scope) Decision {
	repo, d, ok := scopedRepo(segs)
	if !ok {
		return d
	}
	if s.Repos[repo] {
		return admit(repo)
	}
	if d, ok := readableBody(r); !ok {
		return d
	}
	doc, err := parseObject(r.Body)
	if err != nil {
		return unreadable("the LFS batch request is not JSON the sandbox can read: "+err.Error(), "send the batch request as git-lfs does")
	}
	// The server may read keys without regard to case (Go's JSON does):
	// only one key that spells operation, and that one in lowercase.
	ops := 0
	for k := range doc {
		if strings.EqualFold(k, "operation") {
			ops++
		}
	}
	if op, _ := doc["operation"].(string); op == "download" && ops == 1 {
		return admit("")
	}
	return outOfScope("github.lfs_upload", repo, "uploading LFS objects to "+repo, s)
}

// checkAPI decides a request to api.github.com or uploads.github.com.
func checkAPI(r Request, s Scope) Decision {
	gql := graphQLPath(r.Path)
	if read(r.Method) && !gql {
		return admit("")
	}
	if write(r.Method) {
		if err := cleanPath(r.Path); err != nil {
			return unclean(r, err)
		}
	}
	if gql {
		return checkGraphQL(r, s)
	}
	segs := segments(r.Path)
	first := ""
	if len(segs) > 0 {
		first = strings.ToLower(segs[0])
	}
	what := r.Method + " " + r.Path
	switch {
	case strings.Contains(first, "%"):
		// It could spell repos, gists or user to the server.
		return unclean(r, fmt.Errorf("the path's first segment is percent-escaped"))
	case first == "repos":
		return repoWrite(r, segs, s)
	case first == "repositories":
		// /repositories/{id}/... is the same API by the repository's
		// number, which the router cannot tie to a name.
		return refuse("github.repo_write", "", what+" names a repository by its number, which the sandbox cannot tie to a name",
			"name the repository in the path (/repos/OWNER/NAME/...) and start the session with --repo OWNER/NAME")
	case first == "gists":
		return refusable(s, "github.gist", "", what+" writes a gist, which is outside the session's repositories and can be public")
	case accountKinds[first]:
		return refusable(s, "github.account", "", what+" changes your account or an organisation (a key, a repository, a membership in your name)")
	}
	return refusable(s, "github.write_outside_repo", "", what+" writes outside the session's repositories")
}

// repoWrite decides a write under /repos/{owner}/{repo}.
func repoWrite(r Request, segs []string, s Scope) Decision {
	if len(segs) < 3 {
		return unclean(r, fmt.Errorf("a write under /repos/ must name OWNER/NAME"))
	}
	repo, d, ok := scopedRepo(segs[1:])
	if !ok {
		return d
	}
	if !s.Repos[repo] {
		return outOfScope("github.repo_write", repo, fmt.Sprintf("%s %s (a write to %s)", r.Method, r.Path, repo), s)
	}
	kind := ""
	if len(segs) > 3 {
		kind = strings.ToLower(segs[3])
	}
	if kind == "forks" {
		return refusable(s, "github.account", repo, fmt.Sprintf("%s %s makes a new repository in your account or an organisation", r.Method, r.Path))
	}
	if kind == "contents" && len(segs) > 4 && underDotGitHub(segs[4:]) {
		// The files there are the repository's automation (workflows
		// run with its secrets) and its settings (CODEOWNERS,
		// dependabot): a change through the API is a change of control.
		return refusable(s, "github.repo_settings", repo, fmt.Sprintf("%s %s changes %s's workflows or settings under .github", r.Method, r.Path, repo))
	}
	if _, ok := contentKinds[kind]; ok {
		return admit(repo)
	}
	return refusable(s, "github.repo_settings", repo, fmt.Sprintf("%s %s changes who can reach or control %s rather than its content, which could hand the repository to someone else", r.Method, r.Path, repo))
}

// unclean refuses a path the rules cannot read the way every server
// would.
func unclean(r Request, err error) Decision {
	return unreadable(fmt.Sprintf("%s %q is refused: %s", r.Method, r.Path, err.Error()),
		`send the plain path: no "//", "." or ".." segments, ";", backslashes or escapes in the owner or name`)
}

// underDotGitHub says whether a contents path (its escaped segments) lies
// under .github/, as the server reads it once decoded: %2E, %62 and an
// escaped slash spell it too. One that does not decode is taken to.
func underDotGitHub(segs []string) bool {
	p, err := url.PathUnescape(strings.Join(segs, "/"))
	if err != nil {
		return true
	}
	first, _, _ := strings.Cut(strings.TrimLeft(p, "/"), "/")
	return strings.EqualFold(first, ".github")
}
