//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Issue 22: writes only where the user means. The router adds the user's
// GitHub token to requests to GitHub's hosts (here the fake forge:
// gitHost, forgeAPIHost) and admits writes made with it only for the
// repositories git pushes to from the launch dir (and --repo's); registries
// are read-only unless AGENT_SANDBOX_PUBLISH names the host. Two
// sessions run the same probes: the closed one, and the opened one
// (--repo other/lib, the GitHub rules allowed by name, publishing
// allowed), where every refused write arrives.

func TestForge(t *testing.T) {
	runSecRows(t, forgeRows...)
}

var forgeRows = []secRow{
	{44, "git push to the project's own repository works with the user's token, which the router adds: the agent holds a placeholder, and the token is nowhere it can look; without the token the same push is refused by the host", rowForgeOwnPush},
	{45, "a push with the user's token to a repository the project does not name is refused by the router and never arrives; with --repo it lands", rowForgeOtherPush},
	{46, "REST writes to another repository, a gist and a GraphQL mutation are refused and never arrive; REST writes to the project's repository, GraphQL queries and reads of any repository work; opened by --repo and AGENT_SANDBOX_API_ALLOW, they arrive", rowForgeREST},
	{47, "an ssh remote (git@host:owner/name) clones over HTTPS with no key; the image's system git config rewrites github.com's; without the rewrite the clone fails", rowForgeSSHRewrite},
	{48, "npm publish to a registry is refused by the router and never arrives; with AGENT_SANDBOX_PUBLISH naming the host it arrives", rowForgePublish},
	{49, "a remote in git's legacy files (.git/branches, .git/remotes), which the user's own git push would follow, cannot be written where the dir exists and is moved aside at the end where it was new; left in place, git on the host reads it", rowForgeLegacyRemotes},
}

// forgeEnv is the launcher environment of the forge rows: the fake forge's
// names in place of GitHub's and npm's, its CA, the user's token, plus
// extra.
func forgeEnv(extra map[string]string) map[string]string {
	env := map[string]string{
		"AGENT_SANDBOX_API_HOSTS":   "github=" + gitHost + ",github-api=" + forgeAPIHost + ",npm=" + npmHost,
		"AGENT_SANDBOX_UPSTREAM_CA": filepath.Join(harness.fakeDir, "ca.pem"),
		"GH_TOKEN":                  harness.forgeToken,
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

const forgeAllowlist = gitHost + "\n" + forgeAPIHost + "\n" + npmHost + "\n"

type forgeSuite struct {
	once   sync.Once
	n      map[string]string // nonces by probe
	closed forgeRun
	opened forgeRun
	// anon is the push of the project's branch without the user's token.
	anon forgeRun
	// dir is the closed session's launch dir.
	dir string
}

type forgeRun struct {
	res        map[string]probeResult
	stdout     string
	stderr     string
	log        string // the fake's log of this session
	helperLogs string
	specs      string
	held       heldSession
}

var forgeS forgeSuite

// forgeProject is a launch dir whose repository's origin is the own
// repository on the fake forge, served from its git root with the
// project's history.
func forgeProject(t *testing.T) string {
	dir := gitProject(t)
	if err := os.WriteFile(filepath.Join(dir, "cred.py"), []byte(credPy), 0o644); err != nil {
		t.Fatal(err)
	}
	mustGit(t, dir, "remote", "set-url", "origin", "https://"+gitHost+"/"+ownRepo+".git")
	// Neither a remote the user only fetches from nor a repository down
	// the tree (a clone, one an agent made in an earlier session) widens
	// the scope.
	mustGit(t, dir, "remote", "add", "upstream", "https://"+gitHost+"/"+otherRepo+".git")
	nested := filepath.Join(dir, "nested", "lib")
	mustGit(t, dir, "init", "-q", nested)
	mustGit(t, nested, "remote", "add", "origin", "https://"+gitHost+"/"+otherRepo+".git")
	// As git init made it before 2.45 (row 49 writes there): a newer git
	// makes no branches/.
	if err := os.MkdirAll(filepath.Join(dir, ".git", "branches"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// serveForgeRepos puts the two repositories on the fake forge, once.
func serveForgeRepos(t *testing.T) {
	src := gitProject(t)
	for _, r := range forgeRepos {
		bare := filepath.Join(gitRoot(), r+".git")
		if _, err := os.Stat(bare); err == nil {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(bare), 0o755); err != nil {
			t.Fatal(err)
		}
		mustGit(t, src, "clone", "-q", "--bare", src, bare)
	}
}

func (s *forgeSuite) probes() []probe {
	n := s.n
	api := "https://" + forgeAPIHost
	curl := `curl -sS --max-time 15 -o /dev/null -w '%{http_code}' -H "Authorization: token $GH_TOKEN" -H "Content-Type: application/json" `
	return []probe{
		{"placeholder", `echo "GH_TOKEN=$GH_TOKEN"`},
		{"own push", "git push -q origin HEAD:refs/heads/" + n["own"] + " 2>&1 && echo pushed"},
		{"other push", "git push -q https://" + gitHost + "/" + otherRepo + ".git HEAD:refs/heads/" + n["other"] + " 2>&1; echo rc=$?"},
		{"rest own", curl + `-X POST -d '{"title":"t"}' "` + api + "/repos/" + ownRepo + "/issues?n=" + n["rest-own"] + `"`},
		{"rest other", curl + `-X POST -d '{"title":"t"}' "` + api + "/repos/" + otherRepo + "/issues?n=" + n["rest-other"] + `"`},
		{"rest other message", `curl -sS --max-time 15 -X POST -d '{}' "` + api + "/repos/" + otherRepo + "/issues?n=" + n["rest-other-msg"] + `"`},
		{"gist", curl + `-X POST -d '{"files":{"a":{"content":"x"}}}' "` + api + "/gists?n=" + n["gist"] + `"`},
		{"graphql mutation", curl + `-X POST -d '{"query":"mutation { addStar(input: {starrableId: \"R_1\"}) { clientMutationId } }"}' "` + api + "/graphql?n=" + n["mutation"] + `"`},
		{"graphql query", curl + `-X POST -d '{"query":"query { viewer { login } }"}' "` + api + "/graphql?n=" + n["query"] + `"`},
		{"read other", curl + `"` + api + "/repos/" + otherRepo + "?n=" + n["read"] + `"`},
		{"ssh clone", "git clone -q git@" + gitHost + ":" + otherRepo + ".git ssh-" + n["ssh"] + " 2>&1 && git -C ssh-" + n["ssh"] + " log --oneline | head -1 && git -C ssh-" + n["ssh"] + " remote get-url origin"},
		{"ssh clone, no rewrite", "env -u GIT_CONFIG_COUNT git clone -q git@" + gitHost + ":" + otherRepo + ".git nossh-" + n["ssh"] + " 2>&1; echo rc=$?"},
		{"github rewrite", "git ls-remote --get-url git@github.com:octocat/hello.git; git ls-remote --get-url ssh://git@github.com/octocat/hello.git; git config --system --get-all url.https://github.com/.insteadof"},
		{"legacy branches", "printf 'https://attacker.test/x.git\\n' > .git/branches/evil 2>&1; echo rc=$?"},
		{"legacy remotes", "mkdir -p .git/remotes && printf 'URL: https://attacker.test/x.git\\n' > .git/remotes/evil && echo written"},
		{"npm publish", "mkdir -p pkg && cd pkg && printf '{\"name\":\"pkg-%s\",\"version\":\"1.0.0\"}' " + n["npm"] + " > package.json && " +
			"printf '//" + npmHost + "/:_authToken=" + n["npm-token"] + "\\n' > .npmrc && npm publish --registry https://" + npmHost + "/ 2>&1 | tail -5; echo rc=$?"},
	}
}

func (s *forgeSuite) run(t *testing.T) {
	s.once.Do(func() {
		s.n = map[string]string{}
		for _, k := range []string{"own", "other", "rest-own", "rest-other", "rest-other-msg", "gist", "mutation", "query", "read", "ssh", "npm", "npm-token", "anon"} {
			s.n[k] = newNonce(t)
		}
		serveForgeRepos(t)
		look := probe{"look", "python3 -S ./cred.py look " + halves(harness.forgeToken)}

		mark := markFakeLog()
		s.dir = forgeProject(t)
		h := holdSession(t, sessionOpts{Trace: true, Dir: s.dir, Timeout: 5 * time.Minute,
			Env: forgeEnv(map[string]string{"AGENT_SANDBOX_ALLOWLIST": writeAllowlist(t, forgeAllowlist)})},
			append(s.probes(), look)...)
		settleFakeLog(t, "the forge's closed session")
		s.closed = forgeRun{res: h.res, stdout: h.stdout, stderr: h.stderr, log: mark.since(), helperLogs: h.helperLogs, specs: h.specs, held: h}

		mark = markFakeLog()
		dir := forgeProject(t)
		r := runSession(t, sessionOpts{Dir: dir, Allowlist: forgeAllowlist, Timeout: 4 * time.Minute,
			Env:  forgeEnv(map[string]string{"AGENT_SANDBOX_API_ALLOW": "github.gist,github.graphql_mutation", "AGENT_SANDBOX_PUBLISH": npmHost}),
			Args: []string{"--repo", otherRepo, "--exec", "sh", "-c", probeScript(s.probes()...)}})
		wantCode(t, r, 0)
		settleFakeLog(t, "the forge's opened session")
		s.opened = forgeRun{res: parseProbes(r.Stdout()), stdout: r.Stdout(), stderr: r.Stderr(), log: mark.since()}

		// Without the user's token the host itself refuses the push.
		mark = markFakeLog()
		r = runSession(t, sessionOpts{Dir: forgeProject(t), Allowlist: forgeAllowlist, Timeout: 3 * time.Minute,
			Env: forgeEnv(map[string]string{"GH_TOKEN": ""}),
			Cmd: []string{"sh", "-c", probeScript(probe{"anon push", "GIT_TERMINAL_PROMPT=0 git push -q origin HEAD:refs/heads/" + s.n["anon"] + " 2>&1; echo rc=$?"})}})
		settleFakeLog(t, "the forge's session without a token")
		s.anon = forgeRun{res: parseProbes(r.Stdout()), stdout: r.Stdout(), stderr: r.Stderr(), log: mark.since()}
	})
}

// pushed is the fake's line for a push that landed branch in repo.
func pushed(log, repo, branch string) bool {
	for _, l := range linesWith(log, `git push repo="/`+repo+`.git"`) {
		if strings.Contains(l, "refs/heads/"+branch+"=") {
			return true
		}
	}
	return false
}

func rowForgeOwnPush(t *testing.T, ev *evidence) {
	forgeS.run(t)
	c := forgeS.closed
	n := forgeS.n
	wantOK(t, c.res, "own push", "pushed")
	if !pushed(c.log, ownRepo, n["own"]) {
		t.Errorf("the push to the own repository did not land:\n%s", indent(strings.Join(linesWith(c.log, ownRepo), "\n")))
	}
	// The fake saw the user's token, as git's Basic credentials, on the
	// push: the router added it.
	if got := linesWith(c.log, `basic="x-access-token:`+harness.forgeToken+`"`); len(got) == 0 {
		t.Errorf("the fake never saw the user's token on the push: the router did not add it")
	}
	if p := c.res["placeholder"]; strings.Contains(p.Out, harness.forgeToken) || !strings.Contains(p.Out, "GH_TOKEN=ghp_agentsandboxplaceholder") {
		t.Errorf("the agent's GH_TOKEN is not the placeholder: %s", p)
	}
	files := c.held.wantKeyOutOfReach(t, "look", harness.forgeToken, gitHost)
	if !strings.Contains(c.stderr, "the router adds your GitHub token (GH_TOKEN from your environment)") || !strings.Contains(c.stderr, ownRepo) {
		t.Errorf("the start does not say the router adds the token for %s:\n%s", ownRepo, indent(c.stderr))
	}
	// Opened path: without the token the host refuses the same push.
	a := forgeS.anon
	if p := a.res["anon push"]; strings.Contains(p.Out, "rc=0") || pushed(a.log, ownRepo, n["anon"]) {
		t.Errorf("without the user's token the push landed: the fake checks no token, the row is blind: %s", p)
	}
	if len(linesWith(a.log, "git auth-required")) == 0 {
		t.Errorf("without the user's token the fake never asked for one:\n%s", indent(a.log))
	}
	if !t.Failed() {
		ev.add("the push of a branch to %s landed (fake's refs line) with Basic x-access-token:<the user's token> that the router added; GH_TOKEN inside is the placeholder; the token absent from env, /proc, %s readable files, the router's and forwarder's logs, the specs and the launcher's output; without the token the same push got the host's 401 (opened path)", ownRepo, files)
	}
}

func rowForgeOtherPush(t *testing.T, ev *evidence) {
	forgeS.run(t)
	c, o := forgeS.closed, forgeS.opened
	n := forgeS.n
	if !strings.Contains(c.stderr, "it admits writes to "+ownRepo+" (") {
		t.Errorf("the start does not admit %s alone (the launch dir also has an upstream remote and a nested repository for %s):\n%s", ownRepo, otherRepo, indent(c.stderr))
	}
	p := c.res["other push"]
	if strings.Contains(p.Out, "rc=0") || !strings.Contains(p.Out, "403") {
		t.Errorf("the push to %s: want it refused with 403: %s", otherRepo, p)
	}
	if !strings.Contains(p.Out, "--repo "+otherRepo) {
		t.Errorf("the refusal does not say how to allow it (--repo %s): %s", otherRepo, p)
	}
	for _, l := range linesWith(c.log, otherRepo+".git") {
		if strings.Contains(l, "receive-pack") {
			t.Errorf("LEAK: the push to %s reached the fake: %s", otherRepo, l)
		}
	}
	if pushed(c.log, otherRepo, n["other"]) {
		t.Errorf("LEAK: the push to %s landed", otherRepo)
	}
	if !strings.Contains(c.stderr, "the router refused writes") || !strings.Contains(c.stderr, "rule github.push") || !strings.Contains(c.stderr, "--repo "+otherRepo) {
		t.Errorf("the exit report does not list the refused push with its fix:\n%s", indent(c.stderr))
	}
	// Opened path: --repo admits it, and it lands with the token.
	if !pushed(o.log, otherRepo, n["other"]) {
		t.Errorf("with --repo %s the push did not land: the row is blind: %s", otherRepo, o.res["other push"])
	}
	if !t.Failed() {
		ev.add("the launch dir's repository fetches from %s (upstream remote) and holds a nested repository whose origin is %s, yet the start admitted %s alone; git push to %s got the router's 403 naming --repo %s, no receive-pack request for it in the fake's log, the exit report lists it (rule github.push); with --repo %s it landed (opened path)", otherRepo, otherRepo, ownRepo, otherRepo, otherRepo, otherRepo)
	}
}

func rowForgeREST(t *testing.T, ev *evidence) {
	forgeS.run(t)
	c, o := forgeS.closed, forgeS.opened
	n := forgeS.n
	for name, want := range map[string]string{"rest own": "201", "graphql query": "200", "read other": "200"} {
		if p := c.res[name]; strings.TrimSpace(p.Out) != want {
			t.Errorf("%s: want %s: %s", name, want, p)
		}
	}
	for _, k := range []string{"rest-own", "query", "read"} {
		if got := linesWith(c.log, n[k]); !strings.Contains(strings.Join(got, "\n"), "auth=user") {
			t.Errorf("%s: the fake did not see it with the user's token:\n%s", k, strings.Join(got, "\n"))
		}
	}
	for name, k := range map[string]string{"rest other": "rest-other", "gist": "gist", "graphql mutation": "mutation"} {
		if p := c.res[name]; strings.TrimSpace(p.Out) != "403" {
			t.Errorf("%s: want the router's 403: %s", name, p)
		}
		if got := linesWith(c.log, n[k]); len(got) > 0 {
			t.Errorf("LEAK: %s reached the fake:\n%s", name, strings.Join(got, "\n"))
		}
		if got := linesWith(o.log, n[k]); !strings.Contains(strings.Join(got, "\n"), "auth=user") {
			t.Errorf("%s: opened (--repo, AGENT_SANDBOX_API_ALLOW), it did not arrive with the user's token: the row is blind: %s", name, o.res[name])
		}
	}
	if p := c.res["rest other message"]; !strings.Contains(p.Out, "github.repo_write") || !strings.Contains(p.Out, "--repo "+otherRepo) {
		t.Errorf("the REST refusal does not name its rule and fix: %s", p)
	}
	for _, want := range []string{"rule github.repo_write", "rule github.gist", "AGENT_SANDBOX_API_ALLOW=github.gist", "rule github.graphql_mutation",
		"the agent wrote to GitHub in your name", ownRepo + " on " + forgeAPIHost + ": 1 write", ownRepo + " on " + gitHost + ": 1 write"} {
		if !strings.Contains(c.stderr, want) {
			t.Errorf("the exit report lacks %q:\n%s", want, indent(c.stderr))
		}
	}
	if !t.Failed() {
		ev.add("POST issues on %s 201, a GraphQL query 200 and GET of %s 200, each with the user's token (fake: auth=user); POST issues on %s, POST /gists and a GraphQL mutation got the router's 403 (rules github.repo_write, github.gist, github.graphql_mutation, each in the exit report with its fix) and never arrived; opened by --repo and AGENT_SANDBOX_API_ALLOW they arrived with the token", ownRepo, otherRepo, otherRepo)
	}
}

func rowForgeSSHRewrite(t *testing.T, ev *evidence) {
	forgeS.run(t)
	c := forgeS.closed
	wantOK(t, c.res, "ssh clone", "https://"+gitHost+"/"+otherRepo+".git")
	if p := c.res["ssh clone"]; !strings.Contains(p.Out, "first") {
		t.Errorf("the ssh remote's clone has not the repository's history: %s", p)
	}
	if p := c.res["github rewrite"]; strings.Count(p.Out, "https://github.com/octocat/hello.git") != 2 {
		t.Errorf("the image's system git config does not rewrite github.com's ssh remotes to HTTPS: %s", p)
	}
	if p := c.res["ssh clone, no rewrite"]; strings.Contains(p.Out, "rc=0") {
		t.Errorf("without the rewrite the ssh remote cloned all the same: the row is blind: %s", p)
	}
	if !t.Failed() {
		ev.add("git clone git@%s:%s.git cloned over HTTPS (origin https://%s/%s.git, its history) with no key; git ls-remote --get-url turns git@github.com:… and ssh://git@github.com/… into https://github.com/… (the image's /etc/gitconfig); without the rewrite the clone failed (opened path)", gitHost, otherRepo, gitHost, otherRepo)
	}
}

func rowForgePublish(t *testing.T, ev *evidence) {
	forgeS.run(t)
	c, o := forgeS.closed, forgeS.opened
	n := forgeS.n
	p := c.res["npm publish"]
	if !strings.Contains(p.Out, "403") {
		t.Errorf("npm publish: want the router's 403: %s", p)
	}
	if got := linesWith(c.log, "pkg-"+n["npm"]); len(got) > 0 {
		t.Errorf("LEAK: the publish reached the fake:\n%s", strings.Join(got, "\n"))
	}
	if got := linesWith(c.log, n["npm-token"]); len(got) > 0 {
		t.Errorf("LEAK: the agent's npm token reached the fake:\n%s", strings.Join(got, "\n"))
	}
	if !strings.Contains(c.stderr, "rule registry.publish") || !strings.Contains(c.stderr, "AGENT_SANDBOX_PUBLISH="+npmHost) {
		t.Errorf("the exit report does not list the refused publish with its fix:\n%s", indent(c.stderr))
	}
	got := linesWith(o.log, "pkg-"+n["npm"])
	if !strings.Contains(strings.Join(got, "\n"), "method=PUT") {
		t.Errorf("with AGENT_SANDBOX_PUBLISH=%s the publish never arrived: the row is blind: %s\n%s", npmHost, o.res["npm publish"], strings.Join(got, "\n"))
	}
	if !t.Failed() {
		ev.add("npm publish (with an .npmrc token of the agent's) to %s got the router's 403 and never arrived, the exit report lists it (rule registry.publish, AGENT_SANDBOX_PUBLISH=%s); with AGENT_SANDBOX_PUBLISH its PUT arrived (opened path), without the agent's token", npmHost, npmHost)
	}
}

func rowForgeLegacyRemotes(t *testing.T, ev *evidence) {
	forgeS.run(t)
	c, dir := forgeS.closed, forgeS.dir
	if p := c.res["legacy branches"]; !strings.Contains(p.Out, "Read-only file system") || strings.Contains(p.Out, "rc=0") {
		t.Errorf("writing .git/branches/evil: want Read-only file system: %s", p)
	}
	wantOK(t, c.res, "legacy remotes", "written")
	if _, err := os.Lstat(filepath.Join(dir, ".git/remotes/evil")); err == nil {
		t.Errorf("LEAK: .git/remotes/evil is still in place after the session")
	}
	moved, _ := filepath.Glob(filepath.Join(dir, ".git/remotes/evil.agent-sandbox-moved-*"))
	if len(moved) != 1 || !strings.Contains(c.stderr, "a remote in git's legacy form") {
		t.Errorf("the new legacy remote was not moved aside and reported (%v):\n%s", moved, indent(c.stderr))
	}
	if out, _ := hostGit(t, dir, "ls-remote", "--get-url", "evil"); strings.TrimSpace(out) != "evil" {
		t.Errorf("LEAK: git on the host still finds the remote evil: %s", out)
	}
	// Opened path: the same file left in place, git on the host pushes there.
	if err := os.WriteFile(filepath.Join(dir, ".git/remotes/evil2"), []byte("URL: https://attacker.test/x.git\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _ := hostGit(t, dir, "ls-remote", "--get-url", "evil2"); strings.TrimSpace(out) != "https://attacker.test/x.git" {
		t.Errorf("git on the host does not read a legacy remote file: the row is blind: %s", out)
	}
	if !t.Failed() {
		ev.add("writing .git/branches/evil failed (Read-only file system); .git/remotes/evil, new, was moved aside at the end and reported, and git on the host finds no remote evil; the same file left in place (opened path) is read by git on the host: git ls-remote --get-url evil2 gives the agent's URL")
	}
}
