package main

import (
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGitSmartHTTP pushes to, fetches from and clones a bare repository of
// the git host with the real git client, over TLS with the test CA, and
// checks that every other name still gets the plain answer.
func TestGitSmartHTTP(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git here")
	}
	root := t.TempDir()
	f := startFake(t, func(o *options) { o.gitHosts, o.gitRoot = "Git.Allowed.Test", root })
	f.wantLog(t, "ready", " git=git.allowed.test:"+root)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, f.ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(f.r.tls.Addr().String())
	url := "https://git.allowed.test:" + port + "/project.git"
	// The client resolves the name to the fake and trusts only the test CA.
	git := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "http.sslCAInfo=" + caFile,
			"-c", "http.curloptResolve=git.allowed.test:" + port + ":127.0.0.1",
			"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"}, args...)...)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1", "HOME=" + t.TempDir()}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s\nfake log:\n%s", strings.Join(args, " "), err, out, f.log.String())
		}
		return strings.TrimSpace(string(out))
	}
	git(root, "init", "-q", "--bare", "project.git")
	work := t.TempDir()
	git(work, "init", "-q")
	git(work, "commit", "-q", "--allow-empty", "-m", "first")
	head := git(work, "rev-parse", "HEAD")
	git(work, "push", "-q", url, "main:refs/heads/topic")

	if got := git(filepath.Join(root, "project.git"), "rev-parse", "topic"); got != head {
		t.Errorf("the bare repository's topic = %s, want the pushed %s", got, head)
	}
	f.wantLog(t, "https request method=POST", `host="git.allowed.test:`+port+`"`, "git-receive-pack")
	f.wantLog(t, `git push repo="/project.git"`, "refs/heads/topic="+head)

	git(work, "fetch", "-q", url, "topic")
	if got := git(work, "rev-parse", "FETCH_HEAD"); got != head {
		t.Errorf("fetched %s, want %s", got, head)
	}
	f.wantLog(t, "git POST", `path="/project.git/git-upload-pack"`, "status=200")
	clone := filepath.Join(t.TempDir(), "clone")
	git(work, "clone", "-q", "-b", "topic", url, clone)
	if got := git(clone, "rev-parse", "HEAD"); got != head {
		t.Errorf("cloned %s, want %s", got, head)
	}

	// A repository that is not there, and a path out of the root, fail.
	for _, path := range []string{"/missing.git", "/../" + filepath.Base(root) + "/project.git"} {
		body, err := httpsGet(t, f, "git.allowed.test", path+"/info/refs?service=git-upload-pack")
		if err == nil && strings.Contains(body, "refs/heads/topic") {
			t.Errorf("%s served refs: %q", path, body)
		}
	}
	// Other names keep the plain answer.
	body, err := httpsGet(t, f, "allowed.test", "/project.git/info/refs")
	if err != nil || body != "hello from allowed.test\npath /project.git/info/refs\n" {
		t.Errorf("allowed.test: %q, %v", body, err)
	}
}

func TestGitHostsNeedARoot(t *testing.T) {
	if _, err := newGitServer(&eventLog{w: &syncBuf{}}, "git.allowed.test", "", ""); err == nil || !strings.Contains(err.Error(), "-git-root") {
		t.Fatalf("-git-hosts without -git-root: err = %v", err)
	}
	if g, err := newGitServer(&eventLog{w: &syncBuf{}}, " , ", "", ""); g != nil || err != nil || g.serves("git.allowed.test") {
		t.Fatalf("no git hosts: %v, %v", g, err)
	}
}

// A -git-auth-repos repository answers 401 Basic to a request without
// Authorization, so that git sends its URL's userinfo, and then serves
// with any Authorization; every git request logs its headers, over
// HTTP/1.1 and HTTP/2 alike; the other repositories need nothing.
func TestGitAuthRepos(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("no git here: the fake's git route needs it")
	}
	root := t.TempDir()
	f := startFake(t, func(o *options) {
		o.gitHosts, o.gitRoot, o.gitAuthRepos = "git.allowed.test", root, "secret.git/, /other/"
	})
	f.wantLog(t, "ready", " git=git.allowed.test:"+root+" git-auth=/secret.git,/other")
	git, mustGit := gitClient(t, f, "git.allowed.test")
	_, port, _ := net.SplitHostPort(f.r.tls.Addr().String())
	mustGit(root, "init", "-q", "--bare", "secret.git")
	mustGit(root, "init", "-q", "--bare", "open.git")
	work := t.TempDir()
	mustGit(work, "init", "-q")
	mustGit(work, "commit", "-q", "--allow-empty", "-m", "first")
	head := mustGit(work, "rev-parse", "HEAD")

	// Without credentials the push fails at the 401.
	if out, err := git(work, "push", "-q", "https://git.allowed.test:"+port+"/secret.git", "main:refs/heads/anon"); err == nil {
		t.Errorf("a push without credentials worked: %s", out)
	}
	f.wantLog(t, `git auth-required path="/secret.git/info/refs"`)

	for _, version := range []struct{ config, proto string }{{"HTTP/1.1", "HTTP/1.1"}, {"HTTP/2", "HTTP/2.0"}} {
		nonce := "tok-nonce-" + strings.NewReplacer("/", "", ".", "").Replace(version.config)
		branch := "refs/heads/" + nonce
		mustGit(work, "-c", "http.version="+version.config, "push", "-q", "https://user:"+nonce+"@git.allowed.test:"+port+"/secret.git", "main:"+branch)
		// Basic user:NONCE.
		auth := "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("user:"+nonce))
		f.wantLog(t, "https headers method=POST", "proto="+version.proto, `path="/secret.git/git-receive-pack"`, `basic="user:`+nonce+`"`, auth)
		f.wantLog(t, `git push repo="/secret.git"`, branch+"="+head)
		f.wantLog(t, "https headers method=GET", "proto="+version.proto, `path="/secret.git/info/refs?service=git-receive-pack"`, "User-Agent: git/")
	}
	// The open repository needs nothing.
	mustGit(work, "push", "-q", "https://git.allowed.test:"+port+"/open.git", "main:refs/heads/open")
	f.wantLog(t, `git push repo="/open.git"`, "refs/heads/open="+head)
	if strings.Contains(f.log.String(), `git auth-required path="/open.git`) {
		t.Errorf("the open repository asked for credentials:\n%s", f.log.String())
	}

	// By hand: 401 with the challenge, then 200 with any Authorization.
	client := messagesClient(f, "git.allowed.test")
	for _, auth := range []string{"", "Bearer anything"} {
		req, _ := http.NewRequest("GET", "https://git.allowed.test/secret.git/info/refs?service=git-upload-pack", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case auth == "" && (resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") != `Basic realm="fake"`):
			t.Errorf("without Authorization: %d %v", resp.StatusCode, resp.Header)
		case auth != "" && (resp.StatusCode != 200 || !strings.Contains(string(body), "refs/heads/")):
			t.Errorf("with Authorization: %d %q", resp.StatusCode, body)
		}
	}
	if _, err := newGitServer(&eventLog{w: &syncBuf{}}, "", root, "/secret.git"); err == nil {
		t.Error("-git-auth-repos without -git-hosts: no error")
	}
}

// gitClient runs git against the fake's git host over its TLS, trusting
// the fake's CA: git returns the output and error, mustGit fails the test.
func gitClient(t *testing.T, f *fixture, host string) (git func(dir string, args ...string) (string, error), mustGit func(dir string, args ...string) string) {
	t.Helper()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, f.ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(f.r.tls.Addr().String())
	git = func(dir string, args ...string) (string, error) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "http.sslCAInfo=" + caFile,
			"-c", "http.curloptResolve=" + host + ":" + port + ":127.0.0.1",
			"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"}, args...)...)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1", "HOME=" + t.TempDir(), "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=", "SSH_ASKPASS="}
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	mustGit = func(dir string, args ...string) string {
		t.Helper()
		out, err := git(dir, args...)
		if err != nil {
			t.Fatalf("git %s: %v\n%s\nfake log:\n%s", strings.Join(args, " "), err, out, f.log.String())
		}
		return out
	}
	return git, mustGit
}
