package main

import (
	"fmt"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// gitServer is git's smart HTTP protocol for the names in -git-hosts: `git
// http-backend` under net/http/cgi serves every bare repository under
// -git-root, fetch and push, without authentication. After a push it logs
// the repository's refs, so a row can see what arrived.
//
// The repositories in -git-auth-repos want an Authorization header: without
// one, a request gets 401 with a Basic challenge, the only thing that makes
// git send the credentials of a URL's userinfo. Without -forge-token any
// value passes; with it, in a repository under an owner (/OWNER/NAME.git),
// only the token does (forgeAuth: Basic with the token as password, Bearer
// or token), and another gets 401 too.
type gitServer struct {
	log       *eventLog
	root      string
	hosts     map[string]bool
	authRepos []string // cleaned paths, "/secret.git"
	token     string   // -forge-token; "" takes any Authorization
	cgi       *cgi.Handler
}

func newGitServer(log *eventLog, hosts, root, authRepos string) (*gitServer, error) {
	g := &gitServer{log: log, hosts: map[string]bool{}}
	for _, h := range strings.Split(hosts, ",") {
		if h = canonical(strings.TrimSpace(h)); h != "" {
			g.hosts[h] = true
		}
	}
	for _, p := range strings.Split(authRepos, ",") {
		if p = strings.TrimSpace(p); p != "" {
			g.authRepos = append(g.authRepos, path.Clean("/"+p))
		}
	}
	if len(g.hosts) == 0 {
		if len(g.authRepos) > 0 {
			return nil, fmt.Errorf("-git-auth-repos needs -git-hosts")
		}
		return nil, nil
	}
	if root == "" {
		return nil, fmt.Errorf("-git-hosts needs -git-root")
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("git root: %w", err)
	}
	bin, err := exec.LookPath("git")
	if err != nil {
		return nil, fmt.Errorf("-git-hosts needs git: %w", err)
	}
	g.root = root
	g.cgi = &cgi.Handler{
		Path: bin,
		Args: []string{"http-backend"},
		Dir:  root,
		Env: []string{
			"GIT_PROJECT_ROOT=" + root,
			"GIT_HTTP_EXPORT_ALL=1",
			// Push without REMOTE_USER, and from repositories that the
			// suite created as another user of the container.
			"GIT_CONFIG_COUNT=2",
			"GIT_CONFIG_KEY_0=http.receivepack", "GIT_CONFIG_VALUE_0=true",
			"GIT_CONFIG_KEY_1=safe.directory", "GIT_CONFIG_VALUE_1=*",
			"HOME=" + root,
		},
		Stderr: logWriter{log, "git stderr"},
	}
	return g, nil
}

// String is the ready line's part: " git=HOSTS:ROOT", or nothing.
func (g *gitServer) String() string {
	if g == nil {
		return ""
	}
	var hosts []string
	for h := range g.hosts {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	s := fmt.Sprintf(" git=%s:%s", strings.Join(hosts, ","), g.root)
	if len(g.authRepos) > 0 {
		s += " git-auth=" + strings.Join(g.authRepos, ",")
	}
	return s
}

// needsToken says whether a request path lies in a -git-auth-repos
// repository under an owner (/OWNER/NAME.git, as GitHub names them): with
// -forge-token only those take the token alone, so that a top-level one
// (/secret.git) still takes whatever credential an agent sends.
func (g *gitServer) needsToken(p string) bool {
	p = path.Clean("/" + p)
	for _, repo := range g.authRepos {
		if strings.Count(repo, "/") >= 2 && (p == repo || strings.HasPrefix(p, repo+"/")) {
			return true
		}
	}
	return false
}

// needsAuth says whether a request path lies in a -git-auth-repos repository.
func (g *gitServer) needsAuth(p string) bool {
	p = path.Clean("/" + p)
	for _, repo := range g.authRepos {
		if p == repo || strings.HasPrefix(p, repo+"/") {
			return true
		}
	}
	return false
}

// serves says whether a request for host belongs to git.
func (g *gitServer) serves(host string) bool {
	return g != nil && g.hosts[canonical(host)]
}

func (g *gitServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") == "" && g.needsAuth(r.URL.Path) {
		g.log.printf("git auth-required path=%q", r.URL.Path)
		w.Header().Set("WWW-Authenticate", `Basic realm="fake"`)
		http.Error(w, "authentication required", http.StatusUnauthorized)
		return
	}
	if g.token != "" && g.needsToken(r.URL.Path) && forgeAuth(r, g.token, true) != "user" {
		g.log.printf("git auth-refused path=%q", r.URL.Path)
		w.Header().Set("WWW-Authenticate", `Basic realm="fake"`)
		http.Error(w, "invalid credentials", http.StatusUnauthorized)
		return
	}
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	g.cgi.ServeHTTP(rec, r)
	g.log.printf("git %s path=%q status=%d", r.Method, r.URL.Path, rec.status)
	repo, ok := strings.CutSuffix(path.Clean("/"+r.URL.Path), "/git-receive-pack")
	if r.Method != http.MethodPost || !ok || rec.status != http.StatusOK {
		return
	}
	out, err := exec.Command("git", "-c", "safe.directory=*", "--git-dir", filepath.Join(g.root, filepath.FromSlash(repo)),
		"for-each-ref", "--format=%(refname)=%(objectname)").CombinedOutput()
	if err != nil {
		g.log.printf("git push repo=%q refs-error=%q", repo, out)
		return
	}
	g.log.printf("git push repo=%q refs=%s", repo, strings.Join(strings.Fields(string(out)), " "))
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// logWriter turns a child's stderr into log lines.
type logWriter struct {
	log    *eventLog
	prefix string
}

func (l logWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		l.log.printf("%s %q", l.prefix, line)
	}
	return len(p), nil
}
