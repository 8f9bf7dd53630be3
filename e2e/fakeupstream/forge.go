package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path"
	"sort"
	"strings"
)

// The fake forge: a small GitHub for the rows that use a user's forge
// token. The names in -forge-api-hosts get a GitHub-like REST and GraphQL
// API; -forge-token is the one token the forge accepts, there and on the
// -git-auth-repos repositories (git.go). A request carrying it is the
// user's; one without Authorization is anonymous; any other is refused
// where it matters (a write, an auth repository). Without -forge-token any
// Authorization counts as the user's, as git's auth repositories always did.
//
// Every API request logs one line, after its headers line:
//
//	forge api method=M path="P" auth=user|none|other status=N
//
// which never holds the token: the headers line already shows what came.

// forgeServer answers the API hosts; nil when neither flag is set.
type forgeServer struct {
	log   *eventLog
	token string
	hosts map[string]bool
}

func newForgeServer(log *eventLog, hosts, token string) *forgeServer {
	f := &forgeServer{log: log, token: token, hosts: map[string]bool{}}
	for _, h := range strings.Split(hosts, ",") {
		if h = canonical(strings.TrimSpace(h)); h != "" {
			f.hosts[h] = true
		}
	}
	if len(f.hosts) == 0 && token == "" {
		return nil
	}
	return f
}

// serves says whether a request for host belongs to the forge API.
func (f *forgeServer) serves(host string) bool {
	return f != nil && f.hosts[canonical(host)]
}

// String is the ready line's part: " forge=HOSTS" and " forge-token=on"
// (never the token), or nothing.
func (f *forgeServer) String() string {
	if f == nil {
		return ""
	}
	var hosts []string
	for h := range f.hosts {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	s := ""
	if len(hosts) > 0 {
		s = " forge=" + strings.Join(hosts, ",")
	}
	if f.token != "" {
		s += " forge-token=on"
	}
	return s
}

// forgeAuth classifies a request's Authorization against token: "none"
// without one; "user" for Bearer TOKEN or token TOKEN (the scheme in any
// case) and, when basic, Basic with TOKEN as password and any user name;
// "other" for anything else, two Authorization headers included. Without a
// token every Authorization is "user".
func forgeAuth(r *http.Request, token string, basic bool) string {
	values := r.Header.Values("Authorization")
	switch {
	case len(values) == 0 || (len(values) == 1 && values[0] == ""):
		return "none"
	case token == "":
		return "user"
	case len(values) > 1:
		return "other"
	}
	scheme, cred, _ := strings.Cut(strings.TrimSpace(values[0]), " ")
	switch {
	case strings.EqualFold(scheme, "Bearer") || strings.EqualFold(scheme, "token"):
		if strings.TrimSpace(cred) == token {
			return "user"
		}
	case basic && strings.EqualFold(scheme, "Basic"):
		if _, pass, ok := r.BasicAuth(); ok && pass == token {
			return "user"
		}
	}
	return "other"
}

// isForgeRead: the methods an anonymous (or refused) caller may use.
func isForgeRead(m string) bool { return m == http.MethodGet || m == http.MethodHead }

// forgeRoute is one row of the API: a method ("GET" takes HEAD too;
// "write" is POST, PUT, PATCH or DELETE; "" is any) and a path pattern
// ("*" is one segment, a final "**" one or more, "" any path), answered
// with status and what answer makes of the request path and the segments
// the stars matched.
type forgeRoute struct {
	method, pattern string
	status          int
	answer          func(p string, stars []string) any
}

var forgeRoutes = []forgeRoute{
	{"GET", "/repos/*/*", http.StatusOK, forgeRepo},
	{"POST", "/graphql", http.StatusOK, func(string, []string) any { return map[string]any{"data": map[string]any{}} }},
	{"POST", "/gists", http.StatusCreated, forgeOK},
	{"POST", "/user/keys", http.StatusCreated, forgeOK},
	{"write", "/repos/**", http.StatusCreated, forgeOK},
	{"GET", "", http.StatusOK, forgeEmpty},
	{"", "", http.StatusCreated, forgeEmpty},
}

func forgeRepo(_ string, stars []string) any {
	full := stars[0] + "/" + stars[1]
	return map[string]any{
		"full_name": full, "name": stars[1], "owner": map[string]any{"login": stars[0]},
		"node_id": "R_" + base64.RawURLEncoding.EncodeToString([]byte(full)), "private": false,
	}
}

func forgeOK(p string, _ []string) any { return map[string]any{"ok": true, "path": p} }
func forgeEmpty(string, []string) any  { return map[string]any{} }
func forgeRefused() any                { return map[string]any{"message": "Requires authentication"} }

func (rt forgeRoute) matchesMethod(m string) bool {
	switch rt.method {
	case "":
		return true
	case "write":
		return isWriteMethod(m)
	case http.MethodGet:
		return isForgeRead(m)
	}
	return rt.method == m
}

// matchForgePath matches p against pattern, returning the segments its
// stars took.
func matchForgePath(pattern, p string) ([]string, bool) {
	if pattern == "" {
		return nil, true
	}
	want := strings.Split(strings.Trim(pattern, "/"), "/")
	got := strings.Split(strings.Trim(p, "/"), "/")
	if len(got) == 1 && got[0] == "" {
		got = nil
	}
	var stars []string
	for i, w := range want {
		switch {
		case w == "**" && i == len(want)-1:
			if len(got) <= i {
				return nil, false
			}
			return append(stars, strings.Join(got[i:], "/")), true
		case i >= len(got):
			return nil, false
		case w == "*":
			stars = append(stars, got[i])
		case w != got[i]:
			return nil, false
		}
	}
	return stars, len(got) == len(want)
}

// forgeAnswer is the first route's answer for a request; GitHub
// Enterprise's prefixes (/api/v3/..., /api/graphql) name the same routes.
func forgeAnswer(method, p string) (int, any) {
	route := path.Clean("/" + p)
	if rest, ok := strings.CutPrefix(route, "/api/v3/"); ok {
		route = "/" + rest
	} else if route == "/api/graphql" {
		route = "/graphql"
	}
	for _, rt := range forgeRoutes {
		if !rt.matchesMethod(method) {
			continue
		}
		if stars, ok := matchForgePath(rt.pattern, route); ok {
			return rt.status, rt.answer(p, stars)
		}
	}
	return http.StatusNotFound, map[string]any{"message": "Not Found"} // not reached: the last row takes all
}

func (f *forgeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, writeBodyMax))
	auth := forgeAuth(r, f.token, false)
	status, body := http.StatusUnauthorized, forgeRefused()
	if auth == "user" || isForgeRead(r.Method) {
		status, body = forgeAnswer(r.Method, r.URL.Path)
	}
	f.log.printf("forge api method=%s path=%q auth=%s status=%d", r.Method, bound(r.URL.RequestURI(), headersLogMax), auth, status)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// checkForge refuses flag combinations that would be silently ignored or
// ambiguous.
func checkForge(f *forgeServer, g *gitServer) error {
	if f == nil {
		return nil
	}
	if len(f.hosts) == 0 && (g == nil || len(g.authRepos) == 0) {
		return fmt.Errorf("-forge-token needs -forge-api-hosts or -git-auth-repos")
	}
	for h := range f.hosts {
		if g.serves(h) {
			return fmt.Errorf("%s is in both -git-hosts and -forge-api-hosts", h)
		}
	}
	return nil
}
