package main

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestParseLaunchArgs(t *testing.T) {
	env := map[string]string{"ANTHROPIC_API_KEY": "sk-test", "EMPTY": ""}
	getenv := lookupIn(env)
	for _, tc := range []struct {
		args    []string
		cmd     []string
		env     map[string]string
		wantErr string
	}{
		{nil, []string{"claude"}, map[string]string{}, ""},
		{[]string{"--resume", "--env", "X"}, []string{"claude", "--resume", "--env", "X"}, map[string]string{}, ""},
		{[]string{"--exec", "sh", "-c", "exit 7"}, []string{"sh", "-c", "exit 7"}, map[string]string{}, ""},
		{[]string{"--env", "ANTHROPIC_API_KEY", "--exec", "env"}, []string{"env"}, map[string]string{"ANTHROPIC_API_KEY": "sk-test"}, ""},
		{[]string{"--env=EMPTY", "--env", "ANTHROPIC_API_KEY"}, []string{"claude"}, map[string]string{"EMPTY": "", "ANTHROPIC_API_KEY": "sk-test"}, ""},
		{[]string{"--exec"}, nil, nil, "--exec needs a command"},
		{[]string{"--env"}, nil, nil, "--env needs a variable name"},
		{[]string{"--env", "MISSING"}, nil, nil, "MISSING is not set in your environment"},
		{[]string{"--env", "A=b"}, nil, nil, "not a variable name"},
		{[]string{"--home", "shared-home", "--env", "ANTHROPIC_API_KEY"}, []string{"claude"}, map[string]string{"ANTHROPIC_API_KEY": "sk-test"}, ""},
		{[]string{"--home=shared-home", "--exec", "true"}, []string{"true"}, map[string]string{}, ""},
		{[]string{"--home"}, nil, nil, "--home needs a volume name"},
		{[]string{"--home", "../x"}, nil, nil, "not a volume name"},
		{[]string{"--repo", "Octo/Hello.git", "--repo=me/proj", "--exec", "true"}, []string{"true"}, map[string]string{}, ""},
		{[]string{"--repo"}, nil, nil, "--repo needs a repository"},
		{[]string{"--repo", "octo"}, nil, nil, "want OWNER/NAME"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			la, err := parseLaunchArgs(tc.args, getenv)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(la.cmd, tc.cmd) || !maps.Equal(la.env, tc.env) {
				t.Fatalf("got cmd %q env %v, want %q %v", la.cmd, la.env, tc.cmd, tc.env)
			}
			if strings.HasPrefix(strings.Join(tc.args, " "), "--repo Octo") && !slices.Equal(la.repos, []string{"octo/hello", "me/proj"}) {
				t.Fatalf("repos = %q", la.repos)
			}
			if want := map[bool]string{true: "shared-home"}[slices.ContainsFunc(tc.args, func(a string) bool { return strings.HasPrefix(a, "--home") })]; la.home != want {
				t.Fatalf("home = %q, want %q", la.home, want)
			}
		})
	}
}
