package forge

import (
	"fmt"
	"net/url"
	"strings"
)

// The repositories a session may write to are named by the launch dir's
// git remotes and by --repo. Both are read by the launcher, which hands
// routerd the list; these are the launcher's parsers, kept beside the
// rules that use their result.

// ParseRepo reads OWNER/NAME as --repo takes it, and returns it as the
// scope holds it (repoName: lowercased, one ".git" dropped).
func ParseRepo(s string) (string, error) {
	owner, name, ok := strings.Cut(strings.TrimSpace(s), "/")
	repo, valid := repoName(owner, name)
	if !ok || !valid {
		return "", fmt.Errorf("%q is not a repository: want OWNER/NAME, as in --repo octocat/hello-world", s)
	}
	return repo, nil
}

// RepoOfRemote is the OWNER/NAME (lowercased) that a git remote URL names
// on gitHost, in any form git takes: https://HOST/O/N(.git),
// ssh://[user@]HOST[:22]/O/N, [user@]HOST:O/N and git://HOST/O/N. A URL
// for another host, or one that is not a repository's, gives false.
func RepoOfRemote(remote, gitHost string) (string, bool) {
	remote = strings.TrimSpace(remote)
	gitHost = strings.ToLower(gitHost)
	var host, path string
	if i := strings.Index(remote, "://"); i >= 0 {
		u, err := url.Parse(remote)
		if err != nil {
			return "", false
		}
		switch u.Scheme {
		case "https", "http", "git", "ssh", "git+ssh", "ssh+git":
		default:
			return "", false
		}
		port := u.Port()
		if port != "" && port != "443" && port != "22" && port != "80" && port != "9418" {
			return "", false
		}
		host, path = u.Hostname(), u.Path
	} else {
		// scp-like: [user@]host:path, where the host part has no slash.
		h, p, ok := strings.Cut(remote, ":")
		if !ok || strings.Contains(h, "/") {
			return "", false
		}
		if _, after, found := strings.Cut(h, "@"); found {
			h = after
		}
		host, path = h, p
	}
	if strings.ToLower(strings.TrimSuffix(host, ".")) != gitHost {
		return "", false
	}
	path = strings.TrimSuffix(strings.Trim(path, "/"), "/")
	repo, err := ParseRepo(path)
	if err != nil || strings.Count(path, "/") != 1 {
		return "", false
	}
	return repo, true
}
