package forge

import (
	"errors"
	"net/url"
	"path"
	"strings"
)

// cleanPath refuses a path that two servers could read as different
// resources: a proxy's rules match one spelling, the server may
// normalise another. Dot segments and empty segments ("//") are what
// a normaliser removes, escaped or not; a backslash is a separator to
// some; ";" starts a matrix parameter to others. A trailing slash is
// kept: it names the same resource to every reader.
func cleanPath(p string) error {
	if !strings.HasPrefix(p, "/") {
		return errors.New("the path does not start with /")
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c >= 0x7f {
			return errors.New("the path holds a space, a control character or an unescaped non-ASCII byte")
		}
	}
	if strings.ContainsAny(p, `\;`) {
		return errors.New(`the path holds a backslash or a ";"`)
	}
	dec, err := url.PathUnescape(p)
	if err != nil {
		return errors.New("the path holds a malformed percent-escape")
	}
	for i := 0; i < len(dec); i++ {
		if c := dec[i]; c < ' ' || c == 0x7f || c == '\\' || c == ';' {
			return errors.New(`the path escapes a control character, a backslash or a ";"`)
		}
	}
	for _, s := range []string{p, dec} {
		if !cleanSegments(s) {
			return errors.New(`the path holds an empty, "." or ".." segment (plain or escaped)`)
		}
	}
	return nil
}

// cleanSegments reports whether no segment of p is ".", ".." or empty,
// but for the last (a trailing slash).
func cleanSegments(p string) bool {
	segs := strings.Split(p[1:], "/")
	for i, s := range segs {
		if s == "." || s == ".." || (s == "" && i < len(segs)-1) {
			return false
		}
	}
	return true
}

// segments are an escaped path's segments, less a trailing slash's
// empty one.
func segments(p string) []string {
	p = strings.TrimPrefix(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(p, "/"), "/")
}

// repoName is a repository's "owner/name" as the scope holds it
// (lowercase: GitHub's names are case-insensitive), from two escaped path
// segments. Only GitHub's characters are read, so an escape, a dot
// segment or anything a server could decode differently is refused
// (false). One ".git" suffix is dropped, as GitHub does; a name that
// still ends in ".git" in any case is refused rather than guessed at.
func repoName(owner, name string) (string, bool) {
	name = strings.TrimSuffix(name, ".git")
	if !validOwner(owner) || !validRepo(name) || strings.HasSuffix(strings.ToLower(name), ".git") {
		return "", false
	}
	return strings.ToLower(owner + "/" + name), true
}

// validOwner: GitHub's user and organisation names, at most 39 letters,
// digits and hyphens, not starting with a hyphen.
func validOwner(s string) bool {
	return s != "" && len(s) <= 39 && s[0] != '-' && strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-") == ""
}

// validRepo: at most 100 letters, digits, ".", "_" and "-", never "." or
// "..".
func validRepo(s string) bool {
	return s != "" && len(s) <= 100 && s != "." && s != ".." && strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.") == ""
}

// queryValues are the values of every query argument whose name is
// name, decoded, compared without case and spaces, and split on ";" as
// well as "&": whichever way a server splits and decodes the query, the
// router counts at least the arguments it would find.
func queryValues(raw, name string) ([]string, error) {
	var out []string
	if raw == "" {
		return nil, nil
	}
	for _, part := range strings.FieldsFunc(raw, func(r rune) bool { return r == '&' || r == ';' }) {
		k, v, _ := strings.Cut(part, "=")
		k, err := url.QueryUnescape(k)
		if err != nil {
			return nil, errors.New("the query holds a malformed percent-escape")
		}
		if !strings.EqualFold(strings.TrimSpace(k), name) {
			continue
		}
		v, err = url.QueryUnescape(v)
		if err != nil {
			return nil, errors.New("the query holds a malformed percent-escape")
		}
		out = append(out, v)
	}
	return out, nil
}

// normalised is how a lenient server could read a path: decoded, dot
// segments, repeated slashes and matrix parameters removed, backslashes
// read as slashes, without case or a trailing slash. The rules match on
// it where matching less would pass a request a server still routes
// (GraphQL, git's refs advertisement).
func normalised(p string) string {
	dec, err := url.PathUnescape(p)
	if err != nil {
		dec = p
	}
	segs := strings.Split(strings.ReplaceAll(dec, `\`, "/"), "/")
	for i, s := range segs {
		segs[i], _, _ = strings.Cut(s, ";")
	}
	return strings.ToLower(path.Clean("/" + strings.Join(segs, "/")))
}

// graphQLPath is GitHub's GraphQL endpoint, however spelled.
func graphQLPath(p string) bool {
	return normalised(p) == "/graphql"
}
