package inspect

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/router-image/routerd/forge"
)

// GitHub and the package registries: for a host the config gives a forge
// role, every request is put to forge.Check after the agent's credentials
// are gone; a refused one is answered here and never leaves, and on
// GitHub's hosts an admitted one gets the user's token, which routerd
// reads from the credential dir only the router mounts.

// forgeFile is inspect.json's "forge" part, as the launcher writes it.
type forgeFile struct {
	Roles     map[string]string `json:"roles"`
	Repos     []string          `json:"repos"`
	Publish   []string          `json:"publish"`
	Allow     []string          `json:"allow"`
	TokenFile string            `json:"token_file"`
}

// forgePolicy is that part loaded.
type forgePolicy struct {
	roles   map[string]forge.Role
	repos   map[string]bool
	publish map[string]bool
	allow   map[string]bool
	// token is the user's GitHub token, read with the config (it does
	// not change within a session); "" adds none.
	token string
}

func parseForge(f *forgeFile) (*forgePolicy, error) {
	fp := &forgePolicy{roles: map[string]forge.Role{}, repos: map[string]bool{}, publish: map[string]bool{}, allow: map[string]bool{}}
	if f == nil {
		return fp, nil
	}
	for h, r := range f.Roles {
		role, err := forge.ParseRole(r)
		if err != nil {
			return nil, fmt.Errorf("forge role of %s: %w", h, err)
		}
		fp.roles[normalName(h)] = role
	}
	for _, r := range f.Repos {
		fp.repos[strings.ToLower(r)] = true
	}
	for _, h := range f.Publish {
		fp.publish[normalName(h)] = true
	}
	for _, a := range f.Allow {
		fp.allow[a] = true
	}
	if f.TokenFile != "" {
		b, err := os.ReadFile(f.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("the user's token: %w", err)
		}
		fp.token = strings.TrimSpace(string(b))
		if fp.token == "" || strings.ContainsAny(fp.token, " \t\r\n") {
			return nil, fmt.Errorf("the user's token: %s holds no token", f.TokenFile)
		}
	}
	return fp, nil
}

// checkForge applies host's forge rules to r, whose credentials are gone
// already. It answers a refused request itself and returns false; an
// admitted one on GitHub's hosts leaves with the user's token.
func (p *Proxy) checkForge(w http.ResponseWriter, r *http.Request, host string) bool {
	fp := p.policy.Load().forge
	role, ok := fp.roles[host]
	if !ok {
		return true
	}
	scope := forge.Scope{Repos: fp.repos, Allow: fp.allow, Publish: fp.publish[host] || p.cfg.PublishOpen}
	// Headers that would make the host read the request as another
	// method than the rules did.
	for name := range r.Header {
		switch strings.ReplaceAll(strings.ToLower(name), "_", "-") {
		case "x-http-method-override", "x-http-method", "x-method-override":
			// Underscores too: some servers read them as dashes.
			r.Header.Del(name)
		}
	}
	req := forge.Request{Method: r.Method, Path: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery,
		ContentEncoding: strings.Join(r.Header.Values("Content-Encoding"), ","),
		ContentType:     strings.Join(r.Header.Values("Content-Type"), ",")}
	if forge.NeedsBody(role, r.Method, req.Path) {
		body, err := io.ReadAll(io.LimitReader(r.Body, forge.MaxBody+1))
		if err != nil {
			http.Error(w, "routerd: cannot read the request", http.StatusBadRequest)
			return false
		}
		if len(body) > forge.MaxBody {
			p.refuseForge(w, r, host, role, forge.Decision{Refused: true, Status: http.StatusRequestEntityTooLarge, Rule: "forge.unreadable",
				Reason: "the request's body is larger than the router reads to decide on it"})
			return false
		}
		req.Body = body
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.Header.Set("Content-Length", strconv.Itoa(len(body)))
		r.Header.Del("Transfer-Encoding")
	}
	d := forge.Check(role, req, scope)
	if d.Refused && p.cfg.ForgeScopeOff && (d.Rule == "github.push" || d.Rule == "github.repo_write") {
		d = forge.Decision{}
	}
	if d.Refused {
		p.refuseForge(w, r, host, role, d)
		return false
	}
	if d.Allowed != "" {
		fmt.Fprintf(p.cfg.Out, "forge-allowed host=%s method=%q path=%q rule=%s\n", host, r.Method, r.URL.EscapedPath(), d.Allowed)
	}
	tok := fp.token
	if tok == "" || (role != forge.GitHubGit && role != forge.GitHubAPI) {
		return true
	}
	if role == forge.GitHubGit {
		// What git sends a token in: Basic, with GitHub's user name for
		// tokens.
		r.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("x-access-token:"+tok)))
	} else {
		r.Header.Set("Authorization", "Bearer "+tok)
	}
	// The launcher counts these lines for its report, as nginx's
	// credential proxy's, and lists the writes made in the user's name.
	fmt.Fprintf(p.cfg.Out, "credentials host=%s method=%s\n", host, token(r.Method))
	if write := r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodOptions; write && d.Repo != "" {
		fmt.Fprintf(p.cfg.Out, "forge-wrote host=%s method=%q path=%q repo=%s\n", host, r.Method, r.URL.EscapedPath(), safeRepo(d.Repo))
	}
	return true
}

func (p *Proxy) refuseForge(w http.ResponseWriter, r *http.Request, host string, role forge.Role, d forge.Decision) {
	repo := safeRepo(d.Repo)
	fmt.Fprintf(p.cfg.Out, "forge-refused host=%s method=%q path=%q rule=%s repo=%s status=%d\n",
		host, r.Method, r.URL.EscapedPath(), d.Rule, repo, d.Status)
	ct, body := forge.ErrorBody(role, d)
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(d.Status)
	_, _ = w.Write(body)
}

// safeRepo is a repository's name as the log may print it, "-" for none.
func safeRepo(repo string) string {
	if repo == "" || strings.Trim(strings.ToLower(repo), "abcdefghijklmnopqrstuvwxyz0123456789._/-") != "" {
		return "-"
	}
	return repo
}
