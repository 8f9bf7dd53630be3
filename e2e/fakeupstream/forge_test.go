package main

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const forgeTestToken = "ghp-forge-nonce-1"

// The forge API answers the user's token (Bearer or token) on writes,
// refuses another token and none there, answers reads to anyone, and logs
// one line per request without the token; other names keep their answers.
func TestForgeAPI(t *testing.T) {
	f := startFake(t, func(o *options) { o.forgeAPIHosts, o.forgeToken = "api.forge.test, Forge.Test", forgeTestToken })
	f.wantLog(t, "ready", " forge=api.forge.test,forge.test forge-token=on")
	repo := `{"full_name":"octo/hello","name":"hello","node_id":"R_` + base64.RawURLEncoding.EncodeToString([]byte("octo/hello")) + `","owner":{"login":"octo"},"private":false}`
	refused := `{"message":"Requires authentication"}`
	for i, tc := range []struct {
		h2                 bool
		host, method, path string
		auth               string // the Authorization header, "" for none
		status             int
		logAuth            string
		body               string // the answer, as JSON
	}{
		// Writes with the user's token.
		{false, "api.forge.test", "POST", "/repos/octo/hello/issues", "Bearer " + forgeTestToken, 201, "user", `{"ok":true,"path":"/repos/octo/hello/issues"}`},
		{true, "api.forge.test", "POST", "/repos/octo/hello/pulls", "token " + forgeTestToken, 201, "user", `{"ok":true,"path":"/repos/octo/hello/pulls"}`},
		{false, "forge.test", "PATCH", "/repos/octo/hello/issues/1", "bearer " + forgeTestToken, 201, "user", `{"ok":true,"path":"/repos/octo/hello/issues/1"}`},
		{true, "api.forge.test", "DELETE", "/repos/octo/hello/issues/comments/7", "token " + forgeTestToken, 201, "user", `{"ok":true,"path":"/repos/octo/hello/issues/comments/7"}`},
		{false, "api.forge.test", "POST", "/gists", "token " + forgeTestToken, 201, "user", `{"ok":true,"path":"/gists"}`},
		{false, "api.forge.test", "POST", "/user/keys", "Bearer " + forgeTestToken, 201, "user", `{"ok":true,"path":"/user/keys"}`},
		{true, "api.forge.test", "POST", "/graphql", "Bearer " + forgeTestToken, 200, "user", `{"data":{}}`},
		{false, "forge.test", "POST", "/api/graphql", "Bearer " + forgeTestToken, 200, "user", `{"data":{}}`},
		{false, "api.forge.test", "PUT", "/user/starred-nothing", "token " + forgeTestToken, 201, "user", `{}`},
		{false, "api.forge.test", "GET", "/user", "token " + forgeTestToken, 200, "user", `{}`},
		// Writes with another token, a Basic one, two headers or none.
		{false, "api.forge.test", "POST", "/repos/octo/hello/issues", "Bearer agent-nonce-2", 401, "other", refused},
		{true, "api.forge.test", "POST", "/graphql", "token agent-nonce-2", 401, "other", refused},
		{false, "api.forge.test", "POST", "/repos/octo/hello/issues", "Basic " + base64.StdEncoding.EncodeToString([]byte("x:"+forgeTestToken)), 401, "other", refused},
		{false, "api.forge.test", "POST", "/gists", "", 401, "none", refused},
		// Reads answer anyone.
		{false, "api.forge.test", "GET", "/repos/octo/hello", "", 200, "none", repo},
		{true, "api.forge.test", "GET", "/repos/octo/hello", "Bearer agent-nonce-2", 200, "other", repo},
		{false, "forge.test", "GET", "/api/v3/repos/octo/hello", "token " + forgeTestToken, 200, "user", repo},
		{false, "api.forge.test", "GET", "/repos/octo/hello/issues?state=open", "", 200, "none", `{}`},
	} {
		name := tc.method + " " + tc.path + " " + tc.logAuth
		client := messagesClient(f, tc.host)
		if tc.h2 {
			client = h2Client(f, tc.host)
		}
		req, _ := http.NewRequest(tc.method, "https://"+tc.host+tc.path, strings.NewReader(`{"title":"t"}`))
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		req.Header.Set("X-Row", strconv.Itoa(i))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !sameJSON(t, body, tc.body) {
			t.Errorf("%s: %d %s, want %d %s", name, resp.StatusCode, body, tc.status, tc.body)
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("%s: content type %q", name, ct)
		}
		f.wantLog(t, "https headers method="+tc.method, `path="`+tc.path+`"`, "X-Row: "+strconv.Itoa(i))
		f.wantLog(t, "forge api method="+tc.method, `path="`+tc.path+`"`, " auth="+tc.logAuth+" ", " status="+strconv.Itoa(tc.status))
	}
	// The forge's own lines never hold a token, and the API hosts do not
	// take the generic write route.
	for _, line := range strings.Split(f.log.String(), "\n") {
		if strings.Contains(line, "forge api") && strings.Contains(line, "nonce") {
			t.Errorf("a forge line holds a token: %s", line)
		}
		if strings.Contains(line, "https write") || strings.Contains(line, "api request") {
			t.Errorf("a forge request went elsewhere: %s", line)
		}
	}
	// Other names keep the plain answer.
	body, err := httpsGet(t, f, "allowed.test", "/repos/octo/hello")
	if err != nil || body != "hello from allowed.test\npath /repos/octo/hello\n" {
		t.Errorf("allowed.test: %q, %v", body, err)
	}
}

func sameJSON(t *testing.T, got []byte, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		return false
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want %s: %v", want, err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	return string(gb) == string(wb)
}

// Without -forge-token the API takes any Authorization as the user's;
// writes still want one.
func TestForgeAPIWithoutToken(t *testing.T) {
	f := startFake(t, func(o *options) { o.forgeAPIHosts = "api.forge.test" })
	f.wantLog(t, "ready", " forge=api.forge.test")
	if strings.Contains(f.log.String(), "forge-token") {
		t.Errorf("ready line says a token is set:\n%s", f.log.String())
	}
	client := messagesClient(f, "api.forge.test")
	for _, tc := range []struct {
		auth, logAuth string
		status        int
	}{{"Bearer anything", "user", 201}, {"", "none", 401}} {
		req, _ := http.NewRequest("POST", "https://api.forge.test/repos/o/r/issues", strings.NewReader("{}"))
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("Authorization %q: %d, want %d", tc.auth, resp.StatusCode, tc.status)
		}
		f.wantLog(t, `forge api method=POST path="/repos/o/r/issues" auth=`+tc.logAuth+" status="+strconv.Itoa(tc.status))
	}
}

// With -forge-token a -git-auth-repos repository takes only the token: as
// the Basic password (git's URL userinfo), Bearer or token; another gets
// 401 and "git auth-refused", none the challenge as before.
func TestForgeTokenGitAuth(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("no git here: the fake's git route needs it")
	}
	root := t.TempDir()
	f := startFake(t, func(o *options) {
		o.gitHosts, o.gitRoot, o.gitAuthRepos = "git.forge.test", root, "/octo/secret.git"
		o.forgeAPIHosts, o.forgeToken = "api.forge.test", forgeTestToken
	})
	f.wantLog(t, "ready", " git=git.forge.test:"+root+" git-auth=/octo/secret.git forge=api.forge.test forge-token=on")
	git, mustGit := gitClient(t, f, "git.forge.test")
	_, port, _ := net.SplitHostPort(f.r.tls.Addr().String())
	if err := os.MkdirAll(filepath.Join(root, "octo"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustGit(root, "init", "-q", "--bare", "octo/secret.git")
	work := t.TempDir()
	mustGit(work, "init", "-q")
	mustGit(work, "commit", "-q", "--allow-empty", "-m", "first")
	head := mustGit(work, "rev-parse", "HEAD")
	url := func(userinfo string) string {
		return "https://" + userinfo + "git.forge.test:" + port + "/octo/secret.git"
	}

	// The user's token as the password: the push lands.
	mustGit(work, "push", "-q", url("x-access-token:"+forgeTestToken+"@"), "main:refs/heads/with-token")
	f.wantLog(t, `git push repo="/octo/secret.git"`, "refs/heads/with-token="+head)
	// Another token: refused after the challenge, nothing lands.
	if out, err := git(work, "push", "-q", url("x-access-token:agent-nonce-3@"), "main:refs/heads/wrong-token"); err == nil {
		t.Errorf("a push with another token worked: %s", out)
	}
	f.wantLog(t, `git auth-required path="/octo/secret.git/info/refs"`)
	f.wantLog(t, `git auth-refused path="/octo/secret.git/info/refs"`)
	f.wantLog(t, "https headers", `basic="x-access-token:agent-nonce-3"`)
	if strings.Contains(f.log.String(), "refs/heads/wrong-token=") {
		t.Errorf("the push with another token landed:\n%s", f.log.String())
	}

	// By hand, each scheme.
	client := messagesClient(f, "git.forge.test")
	basic := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	for _, tc := range []struct {
		auth   string
		status int
	}{
		{"", 401},
		{basic("anyone", forgeTestToken), 200},
		{"Bearer " + forgeTestToken, 200},
		{"token " + forgeTestToken, 200},
		{basic(forgeTestToken, "x"), 401},
		{"Bearer agent-nonce-4", 401},
		{"token " + forgeTestToken + "x", 401},
	} {
		req, _ := http.NewRequest("GET", "https://git.forge.test/octo/secret.git/info/refs?service=git-upload-pack", nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || (tc.status == 200) != strings.Contains(string(body), "refs/heads/with-token") {
			t.Errorf("Authorization %q: %d %q, want %d", tc.auth, resp.StatusCode, body, tc.status)
		}
		if tc.status == 401 && resp.Header.Get("WWW-Authenticate") != `Basic realm="fake"` {
			t.Errorf("Authorization %q: no challenge: %v", tc.auth, resp.Header)
		}
	}
}

func TestForgeFlags(t *testing.T) {
	log := &eventLog{w: &syncBuf{}}
	if f := newForgeServer(log, " , ", ""); f != nil || f.serves("api.forge.test") || f.String() != "" {
		t.Errorf("no forge flags: %v", f)
	}
	if err := checkForge(newForgeServer(log, "", "tok"), nil); err == nil {
		t.Error("-forge-token alone: no error")
	}
	g, err := newGitServer(log, "forge.test", t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := checkForge(newForgeServer(log, "Forge.Test", ""), g); err == nil {
		t.Error("a name in both -git-hosts and -forge-api-hosts: no error")
	}
	for _, tc := range []struct{ pattern, path, stars string }{
		{"/repos/*/*", "/repos/o/r", "o,r"},
		{"/repos/*/*", "/repos/o/r/", "o,r"},
		{"/repos/*/*", "/repos/o", "-"},
		{"/repos/*/*", "/repos/o/r/issues", "-"},
		{"/repos/**", "/repos/o/r/issues/1", "o/r/issues/1"},
		{"/repos/**", "/repos", "-"},
		{"/gists", "/gists", ""},
		{"", "/", ""},
	} {
		stars, ok := matchForgePath(tc.pattern, tc.path)
		got := strings.Join(stars, ",")
		if !ok {
			got = "-"
		}
		if got != tc.stars {
			t.Errorf("matchForgePath(%q, %q) = %q, want %q", tc.pattern, tc.path, got, tc.stars)
		}
	}
}
