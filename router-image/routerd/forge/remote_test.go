package forge

import "testing"

func TestRepoOfRemoteTakesEveryFormGitTakes(t *testing.T) {
	cases := []struct {
		remote, want string
		ok           bool
	}{
		{"https://github.com/Me/Proj.git", "me/proj", true},
		{"https://github.com/me/proj", "me/proj", true},
		{"https://github.com/me/proj/", "me/proj", true},
		{"https://user@github.com/me/proj.git", "me/proj", true},
		{"http://github.com/me/proj", "me/proj", true},
		{"ssh://git@github.com/me/proj.git", "me/proj", true},
		{"ssh://git@github.com:22/me/proj.git", "me/proj", true},
		{"git@github.com:me/proj.git", "me/proj", true},
		{"github.com:me/proj", "me/proj", true},
		{"git://github.com/me/proj", "me/proj", true},
		{"GIT@GitHub.com:me/proj.git", "me/proj", true},
		{"https://gitlab.com/me/proj.git", "", false},
		{"https://github.com.evil.test/me/proj", "", false},
		{"https://github.com:8443/me/proj", "", false},
		{"https://github.com/me/proj/tree/main", "", false},
		{"https://github.com/me", "", false},
		{"https://github.com/me/..", "", false},
		{"file:///github.com/me/proj", "", false},
		{"/srv/git/me/proj.git", "", false},
		{"../proj", "", false},
		{"git@evil.test:github.com/me/proj", "", false},
	}
	for _, c := range cases {
		got, ok := RepoOfRemote(c.remote, "github.com")
		if got != c.want || ok != c.ok {
			t.Errorf("RepoOfRemote(%q) = %q, %v; want %q, %v", c.remote, got, ok, c.want, c.ok)
		}
	}
}

func TestParseRepoNamesTheFormOnABadOne(t *testing.T) {
	for _, good := range []string{"octocat/Hello-World", "o/r.js", "o/r.git"} {
		if _, err := ParseRepo(good); err != nil {
			t.Errorf("ParseRepo(%q): %v", good, err)
		}
	}
	for _, bad := range []string{"", "octocat", "o/r/x", "o/", "/r", "o/..", "-o/r", "o r/x", "o/r?x"} {
		if _, err := ParseRepo(bad); err == nil {
			t.Errorf("ParseRepo(%q): no error", bad)
		}
	}
}
