package main

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/allowlist"
	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
	"github.com/agent-sandbox/agent-sandbox/internal/projectdir"
	"github.com/agent-sandbox/agent-sandbox/internal/routerconf"
	"github.com/agent-sandbox/agent-sandbox/internal/routerlog"
	"github.com/agent-sandbox/agent-sandbox/router-image/routerd/forge"
)

// GitHub and the package registries: routerd's inspecting proxy adds the
// user's GitHub token to requests to GitHub's hosts (the agent holds a
// placeholder) and admits writes made with it only for the project's own
// repositories; it refuses publishing on the registries unless the user
// allows it for a host. The rules are router-image/routerd/forge's; this
// file is the launcher's face: the hosts and their roles, the scope read
// from the launch dir's git remotes and --repo, and what the session
// says at start and at exit.

var (
	// githubGit carries the token (credKinds); githubAPI and
	// githubUploads get it too. The tests name stand-ins for all three,
	// and for npm's registry, in AGENT_SANDBOX_API_HOSTS.
	githubGit     = &apiProvider{id: "github", host: "github.com", forge: true}
	githubAPI     = &apiProvider{id: "github-api", host: "api.github.com", forge: true}
	githubUploads = &apiProvider{id: "github-uploads", host: "uploads.github.com", forge: true}
	npmRegistry   = &apiProvider{id: "npm", host: "registry.npmjs.org"}

	forgeStandIns = []*apiProvider{githubAPI, githubUploads, npmRegistry}

	// registries are the shipped allowlist's package registries (and
	// PyPI's upload host, should a user add it): read-only unless
	// AGENT_SANDBOX_PUBLISH names the host.
	registries = []string{"pypi.org", "upload.pypi.org", "files.pythonhosted.org", "proxy.golang.org",
		"sum.golang.org", "crates.io", "index.crates.io", "static.crates.io"}
)

// githubHostsOf are GitHub's hosts that get the token, git's first (the
// credential's own host), in hosts' names (a test's stand-ins).
func githubHostsOf(hosts map[*apiProvider]string) []string {
	return []string{hosts[githubGit], hosts[githubAPI], hosts[githubUploads]}
}

// forgeTokenFile is the GitHub token's file in the router's credential
// dir: routerd reads it, nothing else mounts the dir.
const forgeTokenFile = "github.token"

// forgeSetup is what routerd needs for GitHub and the registries.
type forgeSetup struct {
	// roles maps a host to its forge.Role.
	roles map[string]forge.Role
	// gitHost is GitHub's git host (a stand-in in the tests), whose
	// remotes name the repositories in scope.
	gitHost string
	// repos are the repositories writes are admitted for, "owner/name".
	repos []string
	// publish are the registry hosts the user allows publishing to.
	publish []string
	// token says routerd adds the user's GitHub token; source is where
	// it came from, for the user.
	token  bool
	source string
}

// forgeSetupFor fixes the roles from the hosts (AGENT_SANDBOX_API_HOSTS's
// stand-ins included) and whether a token is added; the repositories come
// later, from the launch dir's scan (withRepos). GitHub's hosts whose
// token the user hands in with --env pass unread (handed) and get no role.
func forgeSetupFor(set settings, hosts map[*apiProvider]string, creds []credential, handed []string) (forgeSetup, error) {
	f := forgeSetup{roles: map[string]forge.Role{}, gitHost: hosts[githubGit]}
	for _, h := range registries {
		f.roles[h] = forge.Registry
	}
	f.roles[hosts[npmRegistry]] = forge.NPM
	if gh := githubHostsOf(hosts); !slices.Contains(handed, gh[0]) {
		f.roles[gh[0]] = forge.GitHubGit
		for _, h := range gh[1:] {
			f.roles[h] = forge.GitHubAPI
		}
	}
	for _, c := range creds {
		if c.kind.provider == githubGit {
			f.token, f.source = true, c.source
		}
	}
	f.publish = set.parsed.publish
	return f, nil
}

// parsePublish reads AGENT_SANDBOX_PUBLISH: the registry hosts the agent
// may publish to, comma-separated.
func parsePublish(v string) ([]string, error) {
	list, err := parseList("AGENT_SANDBOX_PUBLISH", v, "a host name", "registry.npmjs.org,crates.io", func(f string) (string, error) {
		e, err := allowlist.ParseEntry(f)
		if err == nil && (e.Wildcard || e.Port != allowlist.TLSPort) {
			err = fmt.Errorf("not a host name")
		}
		return e.Host, err
	})
	out := splitList(list)
	sort.Strings(out)
	return slices.Compact(out), err
}

// forgeHosts are the hosts that get the GitHub token, in a fixed order.
func (f forgeSetup) forgeHosts() []string {
	var out []string
	for h, r := range f.roles {
		if r == forge.GitHubGit || r == forge.GitHubAPI {
			out = append(out, h)
		}
	}
	sort.Strings(out)
	return out
}

// withRepos sets the scope: the repositories that `git push` in the
// launch dir's own repository goes to by its config (origin, pushDefault,
// pushRemote: projectdir's PushURLs), and those of --repo. Repositories
// further down the tree (a clone, a submodule, one the agent made in an
// earlier session) do not count: --repo names them.
func (f forgeSetup) withRepos(tree projectdir.Tree, flagRepos []string) forgeSetup {
	seen := map[string]bool{}
	for _, r := range tree.Repos {
		if r.Dir != ".git" {
			continue
		}
		for _, remote := range r.PushURLs {
			if repo, ok := forge.RepoOfRemote(remote, f.gitHost); ok {
				seen[repo] = true
			}
		}
	}
	for _, r := range flagRepos {
		seen[r] = true
	}
	f.repos = nil
	for r := range seen {
		f.repos = append(f.repos, r)
	}
	sort.Strings(f.repos)
	return f
}

// startLine says at start what the router does with the GitHub token; ""
// without one.
func (f forgeSetup) startLine() string {
	if !f.token {
		return ""
	}
	scope := "no repository: every write is refused (--repo OWNER/NAME admits one)"
	if len(f.repos) > 0 {
		scope = strings.Join(f.repos, ", ") + " (where git pushes from the launch dir, and --repo); others are refused"
	}
	return fmt.Sprintf("the router adds your GitHub token (%s) on %s; it admits writes to %s", f.source, strings.Join(f.forgeHosts(), ", "), scope)
}

func (f forgeSetup) doc(allow []string) *routerconf.Forge {
	if len(f.roles) == 0 {
		return nil
	}
	d := &routerconf.Forge{Roles: map[string]string{}, Repos: f.repos, Publish: f.publish}
	if d.Repos == nil {
		d.Repos = []string{}
	}
	for h, r := range f.roles {
		d.Roles[h] = string(r)
	}
	for _, a := range allow {
		if slices.Contains(forge.Allowable, a) {
			d.Allow = append(d.Allow, a)
		}
	}
	if f.token {
		d.TokenFile = routerCredentialDir + "/" + forgeTokenFile
	}
	return d
}

// gitRewriteEnv makes git inside reach a stand-in git host's ssh remotes
// over HTTPS, as the image's system config does for github.com; nothing
// for github.com itself.
func gitRewriteEnv(gitHost string) map[string]string {
	if gitHost == "" || gitHost == githubGit.host {
		return nil
	}
	base := "url.https://" + gitHost + "/.insteadOf"
	return map[string]string{
		"GIT_CONFIG_COUNT": "2",
		"GIT_CONFIG_KEY_0": base, "GIT_CONFIG_VALUE_0": "git@" + gitHost + ":",
		"GIT_CONFIG_KEY_1": base, "GIT_CONFIG_VALUE_1": "ssh://git@" + gitHost + "/",
	}
}

// forgeSummary says which writes the router made with the user's GitHub
// token, by repository, and which it refused on GitHub and the
// registries, each with how to allow it; "" when there was neither.
func forgeSummary(routerLog string) string {
	type key struct{ host, what, rule, fix string }
	refused := map[key]int{}
	wrote := map[string]int{}
	for _, line := range strings.Split(routerLog, "\n") {
		if host, repo, ok := routerlog.ForgeWrote(line); ok && routerlog.PrintableHost(host) {
			wrote[repo+" on "+host]++
			continue
		}
		r, ok := routerlog.ForgeRefused(line)
		if !ok || !routerlog.PrintableHost(r.Host) {
			continue
		}
		method, path := r.Method, r.Path
		if !routerlog.PrintableRequest(method, path) {
			method, path = "", "(a request that cannot be printed)"
		}
		refused[key{r.Host, strings.TrimSpace(method + " " + path), r.Rule, forgeFix(r.Rule, r.Repo, r.Host)}]++
	}
	var b strings.Builder
	if len(wrote) > 0 {
		var lines []string
		for where, n := range wrote {
			lines = append(lines, fmt.Sprintf("  %s: %s\n", where, plural(n, "write")))
		}
		sort.Strings(lines)
		b.WriteString("the agent wrote to GitHub in your name (your token, added by the router):\n" + strings.Join(lines, ""))
	}
	if len(refused) > 0 {
		var lines []string
		for k, n := range refused {
			lines = append(lines, fmt.Sprintf("  %s %s: rule %s, %s; to allow it: %s\n", k.host, k.what, k.rule, plural(n, "time"), k.fix))
		}
		sort.Strings(lines)
		b.WriteString("the router refused writes outside what this session admits:\n" + strings.Join(lines, ""))
	}
	return iostreams.Prefixed(b.String())
}

// forgeFix is how the user allows what rule refused.
func forgeFix(rule, repo, host string) string {
	switch {
	case (rule == "github.push" || rule == "github.repo_write" || rule == "github.lfs_upload") && repo != "":
		if _, err := forge.ParseRepo(repo); err == nil {
			return "start the session with --repo " + repo
		}
		return "start the session with --repo OWNER/NAME"
	case rule == "registry.publish":
		return "AGENT_SANDBOX_PUBLISH=" + host
	case slices.Contains(forge.Allowable, rule):
		return "AGENT_SANDBOX_API_ALLOW=" + rule
	}
	return "not possible in a session"
}
