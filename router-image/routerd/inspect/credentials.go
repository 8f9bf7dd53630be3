package inspect

import (
	"net/http"
	"net/url"
	"strings"
)

// The credentials an agent could hand an allowlisted host: with any of them
// the host takes the request as made by whoever owns the credential, so an
// agent holding an attacker's token could push the user's code into the
// attacker's account on a host the user allowed. Everything that names a
// credential is in this file; strip applies it.

// credentialHeaders are the request headers that carry a credential, by
// their canonical name (Go canonicalises names from HTTP/1 and HTTP/2 alike;
// a name spelt with underscores is matched too, see headerKey).
var credentialHeaders = []string{
	// RFC 9110: GitHub, GitLab, Gitea and Forgejo (`token ...`), Bitbucket,
	// npm (Bearer), PyPI uploads (Basic), crates.io, Docker and OCI
	// registries (Basic, Bearer), Hugging Face, JFrog (Bearer), and most
	// APIs.
	"Authorization",
	// RFC 9110: credentials for a proxy; some servers take them as
	// their own.
	"Proxy-Authorization",
	// APIs behind servers that drop Authorization (PHP under CGI) take
	// it here.
	"X-Authorization",
	// Anthropic, and many APIs' key header.
	"X-Api-Key",
	// Azure OpenAI and other Azure services.
	"Api-Key",
	// OpenStack (Keystone), Artifactory, and other APIs.
	"X-Auth-Token",
	// Many REST APIs' token header.
	"X-Access-Token",
	// GitLab: personal, project and group access tokens.
	"Private-Token",
	// GitLab: CI/CD job tokens (package registries, API).
	"Job-Token",
	// GitLab: deploy tokens (Maven and other package registries).
	"Deploy-Token",
	// Google APIs: API keys.
	"X-Goog-Api-Key",
	// AWS: the session token of temporary credentials (SigV4 signs with
	// Authorization, removed above).
	"X-Amz-Security-Token",
	// JFrog Artifactory: API keys.
	"X-Jfrog-Art-Api",
	// npm: the one-time password of two-factor publishing (npm-otp).
	"Npm-Otp",
	// HashiCorp Vault.
	"X-Vault-Token",
	// Sentry: a project's key, which lets events land in someone's project.
	"X-Sentry-Auth",
	// Datadog intake: an organisation's API key.
	"Dd-Api-Key",
	// RFC 2965's obsolete cookie header: nothing the host set is ever
	// sent in it.
	"Cookie2",
	// Cookie is not here: the cookies the host itself set in this session
	// are kept (see jar).
}

// Not in the table: X-Goog-AuthUser only picks which signed-in Google
// account a cookie speaks for; X-GitHub-Token is no header GitHub reads
// (its API takes Authorization); Gitea's and GitLab's two-factor headers
// come with an Authorization that is removed anyway.

// credentialQuery are the query parameters that carry a credential, by
// lowercase name; a parameter is matched without regard to case, after its
// escapes are undone. Signed URLs (X-Amz-Signature, Azure's sig, Google's
// X-Goog-Signature) are left alone: the hosts hand them out themselves,
// as the redirects of GitHub's release downloads do, and taking them away
// would break those downloads.
var credentialQuery = map[string]bool{
	// OAuth 2 bearer tokens in the query (RFC 6750): GitLab, Gitea,
	// Bitbucket, Google, Facebook, and many more.
	"access_token": true,
	// GitLab: personal access tokens.
	"private_token": true,
	// GitLab: CI/CD job tokens.
	"job_token": true,
	// OAuth 1, and APIs that kept the name.
	"oauth_token": true,
	// Gitea and Forgejo, GitLab (runner and job tokens), Slack, and
	// GitHub's raw files of private repositories.
	"token": true,
	// Many APIs' keys.
	"api_key": true,
	"apikey":  true,
	// OAuth 2 client secrets (GitHub took them in the query once).
	"client_secret": true,
}

// googleKeyQuery is Google's API key parameter, a credential only on
// Google's API hosts (elsewhere `key` is an ordinary word).
const googleKeyQuery = "key"

func googleAPIHost(host string) bool {
	return host == "googleapis.com" || strings.HasSuffix(host, ".googleapis.com")
}

var credentialHeader = func() map[string]string {
	m := make(map[string]string, len(credentialHeaders))
	for _, h := range credentialHeaders {
		m[h] = strings.ToLower(h)
	}
	return m
}()

// headerKey is the canonical form of a header name written with
// underscores: CGI, WSGI and Rack read X_Api_Key as X-Api-Key.
func headerKey(name string) string {
	return http.CanonicalHeaderKey(strings.ReplaceAll(name, "_", "-"))
}

// strip removes every credential of the table from r, and the cookies
// host did not set (jar), and says what it removed by name: never a value.
func strip(r *http.Request, host string, cookies *jar) []string {
	var removed []string
	for _, h := range credentialHeaders {
		if _, ok := r.Header[h]; ok {
			delete(r.Header, h)
			removed = append(removed, credentialHeader[h])
		}
	}
	for k := range r.Header {
		if strings.IndexByte(k, '_') < 0 {
			continue
		}
		if credentialHeader[headerKey(k)] != "" {
			delete(r.Header, k)
			removed = append(removed, strings.ToLower(k))
		}
	}
	if vs, ok := r.Header["Cookie"]; ok {
		kept, dropped := cookies.filter(host, vs)
		switch {
		case !dropped:
		case kept == "":
			delete(r.Header, "Cookie")
		default:
			r.Header["Cookie"] = []string{kept}
		}
		if dropped {
			removed = append(removed, "cookie")
		}
	}
	if r.URL.User != nil {
		// Go's client turns a URL's userinfo into Basic credentials.
		r.URL.User = nil
		removed = append(removed, "userinfo")
	}
	if r.URL.RawQuery != "" {
		var names []string
		r.URL.RawQuery, names = stripQuery(r.URL.RawQuery, googleAPIHost(host))
		for _, n := range names {
			removed = append(removed, "query:"+n)
		}
	}
	if len(r.Trailer) > 0 {
		// Trailers come after the body, too late to look at: a credential
		// could ride in one.
		r.Trailer = nil
		removed = append(removed, "trailer")
	}
	return removed
}

// stripQuery drops the credential parameters of a raw query and keeps the
// rest byte for byte. A parameter is cut at & and also at ; (which some
// servers still split on), and the whole &-piece goes if any part of it
// names a credential.
func stripQuery(raw string, google bool) (string, []string) {
	var names []string
	var kept []string
	for piece := range strings.SplitSeq(raw, "&") {
		if n := credentialParam(piece, google); n != "" {
			names = append(names, n)
			continue
		}
		kept = append(kept, piece)
	}
	if names == nil {
		return raw, nil
	}
	return strings.Join(kept, "&"), names
}

// credentialParam is the credential a query piece names ("" for none).
func credentialParam(piece string, google bool) string {
	for part := range strings.SplitSeq(piece, ";") {
		name, _, _ := strings.Cut(part, "=")
		if strings.ContainsAny(name, "%+") {
			if u, err := url.QueryUnescape(name); err == nil {
				name = u
			}
		}
		name = strings.ToLower(strings.TrimSpace(name))
		if credentialQuery[name] || google && name == googleKeyQuery {
			return name
		}
	}
	return ""
}
