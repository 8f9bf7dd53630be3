package inspect

import (
	"encoding/base64"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// GitHub's hosts get the user's token in place of the agent's, and only
// for writes the scope admits; a refused write never leaves the router
// and says why; a registry is read-only unless publishing is allowed.
func TestForgeAddsTheTokenAndRefusesWritesOutOfScope(t *testing.T) {
	u := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	tokenFile := filepath.Join(t.TempDir(), "github.token")
	if err := os.WriteFile(tokenFile, []byte("ghp_USERTOKEN\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := defaultConfig(u)
	c.forge = &forgeFile{
		Roles:     map[string]string{"allowed.test": "github-git", "api.example.com": "github-api", "removed.test": "registry-npm"},
		Repos:     []string{"me/proj"},
		TokenFile: tokenFile,
	}
	e := startEnv(t, c)
	cl := e.client(false)
	do := func(method, url string) (*http.Response, string) {
		req, _ := http.NewRequest(method, url, strings.NewReader(`{"title":"x"}`))
		req.Header.Set("Authorization", "token AGENT-PLACEHOLDER")
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}

	resp, _ := do("POST", "https://api.example.com/repos/Me/Proj/issues")
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("own repository: status %d", resp.StatusCode)
	}
	if got := u.last(t).Header.Get("Authorization"); got != "Bearer ghp_USERTOKEN" {
		t.Errorf("API host got Authorization %q, want the user's token", got)
	}
	resp, _ = do("POST", "https://allowed.test/me/proj.git/git-receive-pack")
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("own push: status %d", resp.StatusCode)
	}
	if got, want := u.last(t).Header.Get("Authorization"), "Basic "+base64.StdEncoding.EncodeToString([]byte("x-access-token:ghp_USERTOKEN")); got != want {
		t.Errorf("git host got Authorization %q, want %q", got, want)
	}

	before := u.hits.Load()
	resp, body := do("POST", "https://api.example.com/repos/other/lib/issues")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "--repo other/lib") {
		t.Errorf("another repository: status %d, body %q", resp.StatusCode, body)
	}
	resp, body = do("POST", "https://allowed.test/other/lib.git/git-receive-pack")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "github.push") {
		t.Errorf("another repository's push: status %d, body %q", resp.StatusCode, body)
	}
	resp, _ = do("PUT", "https://removed.test/left-pad")
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a publish: status %d", resp.StatusCode)
	}
	if n := u.hits.Load(); n != before {
		t.Errorf("%d refused requests reached the upstream", n-before)
	}
	e.waitOut(t, `forge-refused host=api.example.com method="POST" path="/repos/other/lib/issues" rule=github.repo_write repo=other/lib status=403`)
	e.waitOut(t, `forge-refused host=removed.test method="PUT" path="/left-pad" rule=registry.publish repo=- status=403`)
	e.waitOut(t, "credentials host=api.example.com method=POST")
	e.waitOut(t, `forge-wrote host=api.example.com method="POST" path="/repos/Me/Proj/issues" repo=me/proj`)
	e.waitOut(t, `forge-wrote host=allowed.test method="POST" path="/me/proj.git/git-receive-pack" repo=me/proj`)
	if strings.Contains(e.out.String(), "USERTOKEN") || strings.Contains(e.logs.String(), "USERTOKEN") {
		t.Error("LEAK: the token is in the router's log")
	}

	// A method override, in any spelling, does not reach the host.
	req, _ := http.NewRequest("POST", "https://api.example.com/repos/me/proj/issues", strings.NewReader("{}"))
	req.Header["X_HTTP_METHOD_OVERRIDE"] = []string{"DELETE"}
	req.Header.Set("X-Http-Method-Override", "DELETE")
	if resp, err := cl.Do(req); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	for name := range u.last(t).Header {
		if strings.Contains(strings.ToLower(name), "override") {
			t.Errorf("%s reached the upstream", name)
		}
	}

	// A read of any repository passes, with the token.
	resp, _ = do("GET", "https://api.example.com/repos/other/lib")
	if resp.StatusCode != http.StatusCreated || u.last(t).Header.Get("Authorization") != "Bearer ghp_USERTOKEN" {
		t.Errorf("a read: status %d, Authorization %q", resp.StatusCode, u.last(t).Header.Get("Authorization"))
	}
}

// Without a token file nothing is added, and the rules hold all the same.
func TestForgeWithoutATokenAddsNothing(t *testing.T) {
	u := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	c := defaultConfig(u)
	c.forge = &forgeFile{Roles: map[string]string{"api.example.com": "github-api"}, Repos: []string{"me/proj"}}
	e := startEnv(t, c)
	req, _ := http.NewRequest("POST", "https://api.example.com/repos/me/proj/issues", strings.NewReader("{}"))
	req.Header.Set("Authorization", "token ATTACKER")
	resp, err := e.client(false).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := u.last(t).Header.Get("Authorization"); got != "" {
		t.Errorf("Authorization %q reached the upstream", got)
	}
	req, _ = http.NewRequest("POST", "https://api.example.com/gists", strings.NewReader("{}"))
	resp, err = e.client(false).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a gist without a token: status %d", resp.StatusCode)
	}
}

func TestForgeConfigRefusesAnUnknownRole(t *testing.T) {
	if _, err := parsePolicy(&file{Forge: &forgeFile{Roles: map[string]string{"x.test": "forge-of-doom"}}}); err == nil {
		t.Error("an unknown role was taken")
	}
}

// The token is read with the config: a file that is missing or holds no
// token fails the load (routerd does not start; a reload keeps the old
// config), never a request later.
func TestForgeConfigReadsTheTokenOnce(t *testing.T) {
	dir := t.TempDir()
	good, empty := filepath.Join(dir, "good"), filepath.Join(dir, "empty")
	_ = os.WriteFile(good, []byte("ghp_X\n"), 0o600)
	_ = os.WriteFile(empty, []byte(" \n"), 0o600)
	p, err := parsePolicy(&file{Forge: &forgeFile{TokenFile: good}})
	if err != nil || p.forge.token != "ghp_X" {
		t.Fatalf("token %q, %v", p.forge.token, err)
	}
	for _, bad := range []string{empty, filepath.Join(dir, "missing")} {
		if _, err := parsePolicy(&file{Forge: &forgeFile{TokenFile: bad}}); err == nil || !strings.Contains(err.Error(), "the user's token") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
