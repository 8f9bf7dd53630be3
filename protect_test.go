package main

import (
	"github.com/agent-sandbox/agent-sandbox/internal/projectdir"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// repoTree makes a launch dir holding a repository with a submodule, a
// worktree with its own config, a checkout whose .git is a file, and
// agent settings.
func repoTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{".git/hooks", ".git/objects/ab", ".git/modules/lib", ".git/worktrees/wt", ".claude/commands", "lib", "sub/deep"} {
		must(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	for f, body := range map[string]string{
		".git/config":                       "[core]\n",
		".git/HEAD":                         "ref: refs/heads/main\n",
		".git/hooks/pre-commit.sample":      "#!/bin/sh\n",
		".git/objects/ab/cdef":              "blob",
		".git/modules/lib/config":           "[core]\n",
		".git/modules/lib/HEAD":             "ref: refs/heads/main\n",
		".git/worktrees/wt/config.worktree": "[core]\n",
		"lib/.git":                          "gitdir: ../.git/modules/lib\n",
		".claude/settings.json":             "{}\n",
		".mcp.json":                         "{}\n",
		"sub/deep/readme":                   "hello\n",
	} {
		must(t, os.WriteFile(filepath.Join(root, f), []byte(body), 0o644))
	}
	return root
}

func TestOpenProjectPlansTheProtectionsAndRefusesLinks(t *testing.T) {
	root := repoTree(t)
	p, err := openProject(root, projectdir.Host{}, startScanBound, io.Discard)
	must(t, err)
	defer p.close()
	ro := map[string]bool{}
	for _, m := range p.mounts(root) {
		ro[strings.TrimPrefix(m.Destination, root+"/")] = slices.Contains(m.Options, "ro")
	}
	for _, want := range []string{".git/config", ".git/hooks", ".git/worktrees/wt/config.worktree", ".git/modules/lib/config", "lib/.git", ".claude", ".mcp.json", ".git/modules/lib/hooks"} {
		if !ro[want] {
			t.Errorf("%s is not read-only: %v", want, ro)
		}
	}
	must(t, p.verify())
	// A link where the scan looks for submodules, to the user's home.
	must(t, os.MkdirAll(filepath.Join(root, "vendor/lib/.git"), 0o755))
	must(t, os.Symlink(t.TempDir(), filepath.Join(root, "vendor/lib/.git/modules")))
	if _, err := openProject(root, projectdir.Host{}, startScanBound, io.Discard); err == nil || !strings.Contains(err.Error(), "vendor/lib/.git/modules is a symbolic link") {
		t.Fatalf("a link in modules/ was not refused: %v", err)
	}
}

func TestLeftForHostListsWhatTheAgentLeftAndMovesAsideWhatGitNeverWrites(t *testing.T) {
	root := repoTree(t)
	p, err := openProject(root, projectdir.Host{}, startScanBound, io.Discard)
	must(t, err)
	defer p.close()
	if got := p.leftForHost(); len(got) != 0 {
		t.Fatalf("nothing changed, but %q", got)
	}
	// Ordinary work is not listed.
	must(t, os.WriteFile(filepath.Join(root, "sub/deep/readme"), []byte("changed\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, ".git/objects/ab/0123"), []byte("blob"), 0o644))
	if got := p.leftForHost(); len(got) != 0 {
		t.Fatalf("ordinary work listed %q", got)
	}
	must(t, os.WriteFile(filepath.Join(root, ".git/commondir"), []byte("../sub\n"), 0o644))
	must(t, os.MkdirAll(filepath.Join(root, "sub/.git/hooks"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "sub/.git/config"), []byte("[core]\n\tfsmonitor = touch /tmp/pwned\n"), 0o644))
	got := strings.Join(p.leftForHost(), "\n")
	for _, want := range []string{"moved aside: " + filepath.Join(root, ".git/commondir"), "new " + filepath.Join(root, "sub/.git") + ": a new repository",
		"core.fsmonitor = 'touch /tmp/pwned': git runs it at every git status"} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if _, err := os.Stat(filepath.Join(root, ".git/commondir")); err == nil {
		t.Error("the agent's commondir is still where git reads it")
	}
}
