package main

import (
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

func TestProtectedPathsCoverWhatGitAndAgentsRun(t *testing.T) {
	root := repoTree(t)
	tree, err := scanLaunchDir(root, launchScanBound)
	if err != nil {
		t.Fatal(err)
	}
	paths, empty := protectedPaths(root, tree)
	want := []string{".git/config", ".git/hooks", ".git/worktrees/wt/config.worktree", ".git/modules/lib/config", "lib/.git", ".claude", ".mcp.json"}
	slices.Sort(want)
	slices.Sort(paths)
	if !slices.Equal(paths, want) {
		t.Errorf("protected = %q\nwant %q", paths, want)
	}
	// The submodule has no hooks/ yet: an agent could create one.
	if !slices.Equal(empty, []string{".git/modules/lib/hooks"}) {
		t.Errorf("empty dirs = %q", empty)
	}
}

func TestProtectionMountsPinEveryParentAndComeParentsFirst(t *testing.T) {
	root := "/p"
	mounts := protectionMounts(root, []string{".git/config", ".git/hooks", ".git/modules/lib/config", "lib/.git"}, []string{".git/modules/lib/hooks"})
	var got []string
	for _, m := range mounts {
		got = append(got, m.Type+" "+m.Source+" "+m.Destination+" "+strings.Join(m.Options, ","))
	}
	want := []string{
		"bind /p/.git /p/.git rbind",
		"bind /p/lib /p/lib rbind",
		"bind /p/.git/config /p/.git/config rbind,ro",
		"bind /p/.git/hooks /p/.git/hooks rbind,ro",
		"bind /p/.git/modules /p/.git/modules rbind",
		"bind /p/lib/.git /p/lib/.git rbind,ro",
		"bind /p/.git/modules/lib /p/.git/modules/lib rbind",
		"bind /p/.git/modules/lib/config /p/.git/modules/lib/config rbind,ro",
		"tmpfs tmpfs /p/.git/modules/lib/hooks ro,nosuid,nodev,noexec",
	}
	if !slices.Equal(got, want) {
		t.Errorf("mounts:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestStampsShowWhatTheAgentAddedOrChanged(t *testing.T) {
	root := repoTree(t)
	scan := func() fileStamps {
		tree, err := scanLaunchDir(root, launchScanBound)
		if err != nil {
			t.Fatal(err)
		}
		return stampTree(root, tree)
	}
	before := scan()
	if got := changedFiles(before, scan()); len(got) != 0 {
		t.Fatalf("nothing changed, but %q did", got)
	}
	// Ordinary work changes nothing that is listed.
	must(t, os.WriteFile(filepath.Join(root, "sub/deep/readme"), []byte("changed\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, ".git/objects/ab/0123"), []byte("blob"), 0o644))
	if got := changedFiles(before, scan()); len(got) != 0 {
		t.Fatalf("ordinary work listed %q", got)
	}
	must(t, os.MkdirAll(filepath.Join(root, "sub/.git/hooks"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "sub/.git/config"), []byte("[core]\n\tfsmonitor = touch /tmp/pwned\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, ".git/hooks/post-checkout"), []byte("#!/bin/sh\n"), 0o755))
	must(t, os.Chmod(filepath.Join(root, ".git/hooks/pre-commit.sample"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, ".claude/settings.local.json"), []byte("{\"hooks\":{}}\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "lib/.git"), []byte("gitdir: ../sub/.git\n"), 0o644))
	got := changedFiles(before, scan())
	want := []string{".claude/settings.local.json", ".git/hooks/post-checkout", ".git/hooks/pre-commit.sample", "lib/.git", "sub/.git/", "sub/.git/config"}
	if !slices.Equal(got, want) {
		t.Fatalf("changed = %q\nwant %q", got, want)
	}
	summary := hostRunSummary(root, got)
	for _, w := range []string{"new repository " + filepath.Join(root, "sub/.git"), filepath.Join(root, ".git/hooks/post-checkout"),
		"git -C " + filepath.Join(root, "sub") + " config --list --show-origin", "git -C " + root + " config --list --show-origin"} {
		if !strings.Contains(summary, w) {
			t.Errorf("summary lacks %q:\n%s", w, summary)
		}
	}
	if hostRunSummary(root, nil) != "" {
		t.Error("a summary for nothing")
	}
}
