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
	// Honeycomb: a team's API key (its name says nothing of a key).
	"X-Honeycomb-Team",
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

// The table names the headers and parameters known to carry credentials;
// a name it lacks but whose words say credential goes too: APIs invent
// their own (Ocp-Apim-Subscription-Key, X-Auth-Key, X-Nuget-Apikey,
// Circle-Token, X-Shopify-Access-Token, Statsig-Api-Key, ...).

// credentialWords: a header name with a word that holds one of these is a
// credential's ("auth" as a word's start: auth, authorization, authuser).
var credentialWords = []string{"token", "secret", "password", "passwd", "apikey", "credential", "signature", "jwt", "otp"}

// notCredentialHeaders hold those words but carry none: a cookie-bound
// anti-forgery token (the agent's cookies are filtered), a WebSocket
// handshake nonce, a retry key.
var notCredentialHeaders = map[string]bool{
	"x-csrf-token": true, "x-xsrf-token": true, "csrf-token": true, "x-csrftoken": true,
	"sec-websocket-key": true, "idempotency-key": true, "x-idempotency-key": true,
}

// credentialName says whether a header's name says it carries a
// credential: a word starting with "auth", a word holding one of
// credentialWords, or a last word "key" (X-Auth-Key, Apikey, Dd-Application-Key).
func credentialName(name string) bool {
	n := strings.ToLower(strings.ReplaceAll(name, "_", "-"))
	if notCredentialHeaders[n] {
		return false
	}
	words := strings.Split(n, "-")
	for _, w := range words {
		if strings.HasPrefix(w, "auth") {
			return true
		}
		for _, c := range credentialWords {
			if strings.Contains(w, c) {
				return true
			}
		}
	}
	last := words[len(words)-1]
	return last == "key" || strings.HasSuffix(last, "apikey")
}

// credentialSubprotocol says whether WebSocket subprotocols offered carry
// a credential: a word of credentialWords, "key", "bearer" or "auth" in
// any of them, or a bare "token" offer (Deepgram's "token, KEY").
func credentialSubprotocol(values []string) bool {
	for _, v := range values {
		for p := range strings.SplitSeq(v, ",") {
			p = strings.ToLower(strings.TrimSpace(p))
			if strings.Contains(p, "key") || strings.Contains(p, "bearer") || strings.Contains(p, "auth") {
				return true
			}
			for _, c := range credentialWords {
				if strings.Contains(p, c) {
					return true
				}
			}
		}
	}
	return false
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
// A query the host's own redirect gave (signed, see signedURLs) is kept.
func strip(r *http.Request, host string, cookies *jar, signed bool) []string {
	var removed []string
	for _, h := range credentialHeaders {
		if _, ok := r.Header[h]; ok {
			delete(r.Header, h)
			removed = append(removed, credentialHeader[h])
		}
	}
	for k := range r.Header {
		if credentialHeader[headerKey(k)] != "" || credentialName(k) {
			delete(r.Header, k)
			removed = append(removed, strings.ToLower(k))
		}
	}
	if vs, ok := r.Header["Sec-Websocket-Protocol"]; ok && credentialSubprotocol(vs) {
		// OpenAI's Realtime API (openai-insecure-api-key.KEY), Kubernetes
		// (base64url.bearer.authorization.k8s.io.TOKEN) and others take a
		// key as a WebSocket subprotocol.
		delete(r.Header, "Sec-Websocket-Protocol")
		removed = append(removed, "sec-websocket-protocol")
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
	if r.URL.RawQuery != "" && !signed {
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
		if credentialQuery[name] || google && name == googleKeyQuery || credentialParamName(name, google) {
			return name
		}
	}
	return ""
}

// queryName is a parameter's name as servers read it: PHP turns '.', ' '
// and a lone '[' into '_' and reads "name[]" as name; Google's front ends
// read "$key" as "key"; '-' is spelt '_' here.
func queryName(name string) string {
	name = strings.TrimPrefix(name, "$")
	name = strings.TrimSuffix(name, "[]")
	return strings.Map(func(r rune) rune {
		switch r {
		case '.', ' ', '[', '-':
			return '_'
		}
		return r
	}, name)
}

// paginationTokens name a position in a listing, not a credential.
var paginationTokens = map[string]bool{
	"page_token": true, "pagetoken": true, "next_token": true, "nexttoken": true,
	"continuation_token": true, "continuationtoken": true, "sync_token": true, "synctoken": true,
	"csrf_token": true, "xsrf_token": true, "resumption_token": true, "resumptiontoken": true,
}

// credentialParamName says whether a (lowercase) query parameter's name,
// read as servers read it, is a credential's: one of credentialQuery, a
// name holding token (not a listing's position), secret, password,
// apikey, api_key, auth or jwt, or "key" on Google's API hosts
// (Firebase's auth, Azure's subscription-key, Sentry's sentry_key,
// CircleCI's circle-token, ...).
func credentialParamName(name string, google bool) bool {
	n := queryName(name)
	if credentialQuery[n] || google && n == googleKeyQuery {
		return true
	}
	if paginationTokens[n] {
		return false
	}
	words := strings.Split(n, "_")
	for _, w := range words {
		// token, accesstoken, apitoken; not tokens, max_tokens.
		if strings.HasSuffix(w, "token") || w == "auth" || w == "authorization" {
			return true
		}
		// signature and credential: a signed URL's (X-Amz-Signature,
		// X-Goog-Credential), kept only where the host redirected to it.
		for _, c := range []string{"secret", "password", "passwd", "apikey", "jwt", "credential", "signature", "accesskeyid", "accessid"} {
			if strings.Contains(w, c) {
				return true
			}
		}
	}
	// Azure's shared access signature.
	if n == "sig" {
		return true
	}
	// api_key, sentry_key, subscription_key: a last word "key" after
	// another (a lone key is Google's alone).
	return len(words) > 1 && words[len(words)-1] == "key" && n != "idempotency_key" && n != "sort_key"
}
