package forge

import (
	"fmt"
	"testing"
)

func TestZZHostile(t *testing.T) {
	s := Scope{Repos: map[string]bool{"me/proj": true}}
	sOff := Scope{Repos: s.Repos, Allow: map[string]bool{"github.write_outside_repo": true}}
	type c struct {
		role Role
		r    Request
		sc   Scope
	}
	q := func(m, p, raw, body string) Request { return Request{Method: m, Path: p, RawQuery: raw, Body: []byte(body)} }
	cases := []c{
		{GitHubGit, q("POST", "/other/x.git/info/lfs/objects/batch", "", `{"operation":"download","Operation":"upload","objects":[]}`), s},
		{GitHubGit, q("POST", "/other/x.git/info/lfs/objects/batch", "", `{"operation":"download","OPERATION":"upload"}`), s},
		{GitHubAPI, q("POST", "/graphql", "", `{"query":"{ viewer { login } }","variables":{"a":"&query=mutation%7BaddStar(input:%7BstarrableId:%22X%22%7D)%7BclientMutationId%7D%7D%23"}}`), s},
		{GitHubAPI, q("GET", "/graphql.json", "query=mutation%7Bx%7D", ""), s},
		{GitHubAPI, q("POST", "/graphql.json", "", `{"query":"mutation{x}"}`), sOff},
		{GitHubAPI, q("POST", "/hub", "", "hub.mode=subscribe&hub.topic=https://github.com/other/x/events/push&hub.callback=https://evil.example/"), s},
		{GitHubAPI, q("POST", "/hub", "", "hub.mode=subscribe"), sOff},
		{GitHubAPI, q("POST", "/organizations/123/team/4/memberships/evil", "", ""), sOff},
		{GitHubAPI, q("POST", "/repos/me/proj/forks", "", `{"organization":"someorg","name":"copy"}`), s},
		{GitHubAPI, q("POST", "/repos/me/proj/deployments", "", `{"ref":"main","environment":"production"}`), s},
		{GitHubAPI, q("POST", "/repos/me/proj/releases", "", `{"tag_name":"v9.9.9"}`), s},
		{GitHubAPI, q("PUT", "/repos/me/proj/contents/.github/workflows/x.yml", "", `{}`), s},
		{GitHubAPI, q("POST", "/repos/me/proj/issues/5/labels", "", `{"labels":["safe-to-test"]}`), s},
		{GitHubAPI, q("POST", "/repos/me/proj/statuses/abc", "", `{"state":"success","context":"ci"}`), s},
		{GitHubAPI, q("POST", "/repos/me/proj/check-suites/1/rerequest", "", ``), s},
		{GitHubAPI, q("POST", "/repos/me/proj/pulls/3/reviews", "", `{"event":"APPROVE"}`), s},
		{GitHubAPI, q("DELETE", "/repos/me/proj/git/refs/heads/main", "", ``), s},
		{GitHubAPI, q("POST", "/repos/me/proj.git/hooks", "", ``), s},
		{GitHubAPI, q("POST", "/repos/me/proj/issues%2F..%2F..%2Fhooks", "", ``), s},
		{GitHubAPI, q("POST", "/repos/me/proj/issues%252F..%252Fhooks", "", ``), s},
		{GitHubAPI, q("POST", "/repos/me/proj/pulls/%c0%ae%c0%ae/%c0%ae%c0%ae/hooks", "", ``), s},
		{GitHubAPI, q("PATCH", "/repos/me/proj", "", `{"private":false}`), s},
		{GitHubAPI, q("PATCH", "/repos/me/proj/", "", `{"private":false}`), s},
		{GitHubGit, q("POST", "/me/proj.wiki.git/git-receive-pack", "", ""), s},
		{GitHubGit, q("POST", "/other/x/git-upload-pack", "service=git-receive-pack", ""), s},
		{GitHubGit, q("GET", "/other/x/info/refs", "service[]=git-receive-pack", ""), s},
		{GitHubGit, q("POST", "/other/x/git-receive-pack/", "", ""), s},
		{GitHubGit, q("GET", "/login/oauth/authorize", "client_id=evil&scope=repo", ""), s},
		{GitHubAPI, q("GET", "/copilot_internal/v2/token", "", ""), s},
		{GitHubAPI, q("POST", "/markdown", "", `{}`), s},
		{NPM, q("PUT", "/evilpkg", "", `{}`), s},
		{Registry, q("POST", "/api/v1/crates/new", "", `{}`), s},
		{GitHubAPI, q("POST", "/graphql", "", `{"query":"query Q { a } mutation M { b }","operationName":"Q"}`), s},
		{GitHubAPI, q("POST", "/graphql", "", `{"query":"#x\r mutation { b }"}`), s},
		{GitHubAPI, q("POST", "/graphql", "", "{\"query\":\"{ a(x:\\\"\\\\u{22} ) } mutation { b } #\\\") }\"}"), s},
	}
	for _, k := range cases {
		d := Check(k.role, k.r, k.sc)
		fmt.Printf("%-13s %-6s %-60s -> refused=%v rule=%s allowed=%s repo=%s\n", k.role, k.r.Method, k.r.Path+"?"+k.r.RawQuery, d.Refused, d.Rule, d.Allowed, d.Repo)
	}
	fmt.Println(RepoOfRemote("https://github.com/victim-org/other.git", "github.com"))
}
