package inspect

import (
	"net/http"
	"net/url"
	"strings"
	"sync"
)

// A signed URL carries a credential in its query (X-Amz-Signature with
// X-Amz-Credential, Azure's sig, Google's X-Goog-Signature, a jwt): an
// agent that holds an attacker's cloud key signs one offline and uploads
// into the attacker's bucket. strip takes such parameters away, except in
// a URL that an allowed host itself sent the agent to, in a redirect (a
// release download's): those the proxy remembers here.

// maxSignedURLs bounds the memory: the oldest is forgotten first.
const maxSignedURLs = 1024

type signedURLs struct {
	mu    sync.Mutex
	seen  map[string]bool
	order []string
}

func signedKey(host, path, rawQuery string) string {
	return strings.ToLower(host) + path + "?" + rawQuery
}

func (s *signedURLs) has(host, path, rawQuery string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[signedKey(host, path, rawQuery)]
}

func (s *signedURLs) add(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]bool{}
	}
	if s.seen[key] {
		return
	}
	if len(s.order) >= maxSignedURLs {
		delete(s.seen, s.order[0])
		s.order = s.order[1:]
	}
	s.seen[key] = true
	s.order = append(s.order, key)
}

// rememberRedirect records the HTTPS URL a redirect sends the agent to,
// unless the agent's request already held a value of its query: a host
// that echoes what it is asked (an open redirect) would otherwise sign
// whatever the agent likes.
func (s *signedURLs) rememberRedirect(resp *http.Response) {
	if resp.StatusCode < 300 || resp.StatusCode > 399 || resp.Request == nil {
		return
	}
	loc, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
	if err != nil || loc.Scheme != "https" || loc.RawQuery == "" || loc.Port() != "" && loc.Port() != "443" {
		return
	}
	asked := resp.Request.URL.RequestURI()
	plain, _ := url.QueryUnescape(asked)
	for _, vs := range loc.Query() {
		for _, v := range vs {
			if len(v) >= 8 && (strings.Contains(asked, v) || strings.Contains(plain, v)) {
				return
			}
		}
	}
	s.add(signedKey(loc.Hostname(), loc.EscapedPath(), loc.RawQuery))
}
