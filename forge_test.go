package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/projectdir"
	"github.com/agent-sandbox/agent-sandbox/router-image/routerd/forge"
)

func forgeTestSettings(env map[string]string) settings {
	return settingsFrom(env)
}

// The GitHub token goes to routerd alone: a file in the credential dir,
// no nginx line, no gate route; the agent gets a placeholder and no base
// URL; GitHub's three hosts get their roles, the registries theirs.
func TestGitHubTokenIsForRouterdOnly(t *testing.T) {
	set := forgeTestSettings(map[string]string{"GITHUB_TOKEN": "ghp_user", "HOME": t.TempDir(),
		"AGENT_SANDBOX_API_HOSTS": "github=git.forge.test,github-api=api.forge.test,npm=npm.forge.test",
		"AGENT_SANDBOX_PUBLISH":   "npm.forge.test"})
	s, warnings, err := sessionCredentialsFor(set, map[string]string{})
	if err != nil || len(warnings) > 0 {
		t.Fatal(err, warnings)
	}
	if len(s.creds) != 1 || s.creds[0].host != "git.forge.test" || s.creds[0].source != "GITHUB_TOKEN from your environment" {
		t.Fatalf("creds = %+v", s.creds)
	}
	if !slices.Equal(s.creds[0].also, []string{"api.forge.test", "uploads.github.com"}) {
		t.Errorf("also = %q", s.creds[0].also)
	}
	if p := s.plan(); len(p.routes) != 0 {
		t.Errorf("the GitHub token got an nginx route: %+v", p.routes)
	}
	env := agentCredentialEnv(s.creds)
	if env["GH_TOKEN"] != "ghp_agentsandboxplaceholder0000000000000" || len(env) != 1 {
		t.Errorf("agent env = %v", env)
	}
	want := map[string]forge.Role{"git.forge.test": forge.GitHubGit, "api.forge.test": forge.GitHubAPI, "uploads.github.com": forge.GitHubAPI, "npm.forge.test": forge.NPM, "pypi.org": forge.Registry}
	for h, r := range want {
		if s.forge.roles[h] != r {
			t.Errorf("role of %s = %q, want %q", h, s.forge.roles[h], r)
		}
	}
	if !s.forge.token || !slices.Equal(s.forge.publish, []string{"npm.forge.test"}) {
		t.Errorf("forge = %+v", s.forge)
	}
	dir, err := writeCredentialDir(t.TempDir(), "s", s)
	if err != nil {
		t.Fatal(err)
	}
	names, _ := os.ReadDir(dir)
	if len(names) != 1 || names[0].Name() != forgeTokenFile {
		t.Fatalf("credential dir holds %v", names)
	}
	b, _ := os.ReadFile(filepath.Join(dir, forgeTokenFile))
	if string(b) != "ghp_user\n" {
		t.Errorf("token file = %q", b)
	}
	fi, _ := os.Stat(filepath.Join(dir, forgeTokenFile))
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v", fi.Mode())
	}
}

// A token handed in with --env passes GitHub's hosts unread, with the
// model keys' warning; GH_TOKEN wins over GITHUB_TOKEN.
func TestGitHubTokenPrecedenceAndHandedIn(t *testing.T) {
	set := forgeTestSettings(map[string]string{"GH_TOKEN": "ghp_a", "GITHUB_TOKEN": "ghp_b", "HOME": t.TempDir()})
	s, _, err := sessionCredentialsFor(set, map[string]string{})
	if err != nil || len(s.creds) != 1 || s.creds[0].value != "ghp_a" {
		t.Fatalf("creds = %+v, %v", s.creds, err)
	}
	s, warnings, err := sessionCredentialsFor(set, map[string]string{"GITHUB_TOKEN": "ghp_b"})
	if err != nil || len(s.creds) != 0 {
		t.Fatalf("creds = %+v, %v", s.creds, err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "GITHUB_TOKEN goes into the sandbox (--env)") {
		t.Errorf("warnings = %q", warnings)
	}
	for _, h := range []string{"github.com", "api.github.com", "uploads.github.com"} {
		if !slices.Contains(s.handed, h) {
			t.Errorf("%s not handed: %q", h, s.handed)
		}
		if _, ok := s.forge.roles[h]; ok {
			t.Errorf("%s still has a forge role", h)
		}
	}
}

func TestForgeScopeComesFromTheRemotesAndRepo(t *testing.T) {
	f := forgeSetup{gitHost: "github.com", token: true, source: "GH_TOKEN from your environment", roles: map[string]forge.Role{"github.com": forge.GitHubGit, "api.github.com": forge.GitHubAPI}}
	tree := projectdir.Tree{Repos: []projectdir.Repo{
		{Dir: ".git", PushURLs: []string{"git@github.com:Me/Proj.git", "https://gitlab.com/me/proj.git"}},
		// A repository down the tree (a clone, one the agent made) does
		// not widen the scope.
		{Dir: "vendor/x/.git", PushURLs: []string{"https://github.com/victim/infra"}},
	}}
	f = f.withRepos(tree, []string{"octo/extra"})
	if !slices.Equal(f.repos, []string{"me/proj", "octo/extra"}) {
		t.Errorf("repos = %q", f.repos)
	}
	if line := f.startLine(); !strings.Contains(line, "the router adds your GitHub token (GH_TOKEN from your environment) on api.github.com, github.com; it admits writes to me/proj, octo/extra (where git pushes from the launch dir, and --repo)") {
		t.Errorf("start line = %q", line)
	}
	if line := (forgeSetup{token: true}).startLine(); !strings.Contains(line, "every write is refused (--repo OWNER/NAME admits one)") {
		t.Errorf("start line without repos = %q", line)
	}
	if line := (forgeSetup{}).startLine(); line != "" {
		t.Errorf("start line without a token = %q", line)
	}
}

func TestParsePublish(t *testing.T) {
	got, err := parsePublish(" Registry.npmjs.org, crates.io,registry.npmjs.org ")
	if err != nil || !slices.Equal(got, []string{"crates.io", "registry.npmjs.org"}) {
		t.Errorf("got %q, %v", got, err)
	}
	for _, bad := range []string{"*.npmjs.org", "registry.npmjs.org:8443", "a b"} {
		if _, err := parsePublish(bad); err == nil || !strings.Contains(err.Error(), "AGENT_SANDBOX_PUBLISH") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestForgeSummarySaysHowToAllowEachRefusal(t *testing.T) {
	log := strings.Join([]string{
		`forge-refused host=github.com method="POST" path="/other/lib.git/git-receive-pack" rule=github.push repo=other/lib status=403`,
		`forge-refused host=github.com method="GET" path="/other/lib.git/info/refs" rule=github.push repo=other/lib status=403`,
		`forge-refused host=api.github.com method="POST" path="/gists" rule=github.gist repo=- status=403`,
		`forge-refused host=registry.npmjs.org method="PUT" path="/left-pad" rule=registry.publish repo=- status=403`,
		`forge-refused host=api.github.com method="POST" path="/x\n" rule=github.write_outside_repo repo=- status=403`,
		`inspect host=github.com method=GET path="/" proto=HTTP/1.1 status=200 removed="-"`,
		`forge-wrote host=github.com method="POST" path="/me/proj.git/git-receive-pack" repo=me/proj`,
		`forge-wrote host=api.github.com method="POST" path="/repos/me/proj/issues" repo=me/proj`,
		`forge-wrote host=api.github.com method="POST" path="/repos/me/proj/pulls" repo=me/proj`,
	}, "\n")
	got := forgeSummary(log)
	for _, want := range []string{
		"agent-sandbox: the router refused writes outside what this session admits:\n",
		"github.com POST /other/lib.git/git-receive-pack: rule github.push, 1 time; to allow it: start the session with --repo other/lib\n",
		"api.github.com POST /gists: rule github.gist, 1 time; to allow it: AGENT_SANDBOX_API_ALLOW=github.gist\n",
		"registry.npmjs.org PUT /left-pad: rule registry.publish, 1 time; to allow it: AGENT_SANDBOX_PUBLISH=registry.npmjs.org\n",
		"(a request that cannot be printed)",
		"agent-sandbox: the agent wrote to GitHub in your name (your token, added by the router):\nagent-sandbox:   me/proj on api.github.com: 2 writes\nagent-sandbox:   me/proj on github.com: 1 write\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if forgeSummary("inspect host=x method=GET") != "" {
		t.Error("a summary without refusals")
	}
}

func TestGitRewriteEnvOnlyForAStandIn(t *testing.T) {
	if env := gitRewriteEnv("github.com"); env != nil {
		t.Errorf("github.com: %v (the image's system config has it)", env)
	}
	env := gitRewriteEnv("git.forge.test")
	if env["GIT_CONFIG_VALUE_0"] != "git@git.forge.test:" || env["GIT_CONFIG_KEY_1"] != "url.https://git.forge.test/.insteadOf" {
		t.Errorf("env = %v", env)
	}
}
