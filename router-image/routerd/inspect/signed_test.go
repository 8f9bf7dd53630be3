package inspect

import (
	"net/http"
	"net/url"
	"testing"
)

// A signed URL in the agent's request loses its signature, unless an
// allowed host redirected the agent to exactly that URL; a redirect that
// echoes what the agent asked (an open redirect) is not remembered.
func TestSignedURLsOnlyFromTheHostsRedirects(t *testing.T) {
	const signed = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAHOST%2F20261202&X-Amz-Signature=0123456789abcdef"
	var s signedURLs
	redirect := func(asked, location string) {
		u, _ := url.Parse(asked)
		s.rememberRedirect(&http.Response{StatusCode: http.StatusFound, Header: http.Header{"Location": {location}}, Request: &http.Request{URL: u}})
	}
	redirect("https://github.com/o/r/releases/download/v1/a.tgz", "https://objects.example.test/asset/1?"+signed)
	// The agent's own signature, echoed by an open redirect.
	redirect("https://github.com/login?return_to=https://bucket.example.test/up?X-Amz-Signature=fedcba9876543210", "https://bucket.example.test/up?X-Amz-Signature=fedcba9876543210")

	for _, tc := range []struct {
		url  string
		kept bool
	}{
		{"https://objects.example.test/asset/1?" + signed, true},
		{"https://objects.example.test/asset/2?" + signed, false},
		{"https://bucket.example.test/up?X-Amz-Signature=fedcba9876543210", false},
		{"https://acct.blob.example.test/c/b?sv=2022-11-02&sp=cw&sig=ab", false},
	} {
		u, _ := url.Parse(tc.url)
		query := u.RawQuery
		r := &http.Request{URL: u, Header: http.Header{}}
		strip(r, u.Hostname(), newJar(), s.has(u.Hostname(), u.EscapedPath(), u.RawQuery))
		if kept := r.URL.RawQuery == query; kept != tc.kept {
			t.Errorf("%s: query now %q, want kept %v", tc.url, r.URL.RawQuery, tc.kept)
		}
	}
}
