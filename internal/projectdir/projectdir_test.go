package projectdir

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

var wide = Bound{Dirs: 50_000, Time: 10 * time.Second}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// files makes each path (a trailing "/" is a dir) with its content.
func files(t *testing.T, root string, fs map[string]string) {
	t.Helper()
	for p, body := range fs {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			must(t, os.MkdirAll(full, 0o755))
			continue
		}
		must(t, os.MkdirAll(filepath.Dir(full), 0o755))
		must(t, os.WriteFile(full, []byte(body), 0o644))
	}
}

// repo is a launch dir holding a repository as users have them.
func repo(t *testing.T) string {
	root := t.TempDir()
	files(t, root, map[string]string{
		".git/config":                       "[core]\n\tbare = false\n",
		".git/HEAD":                         "ref: refs/heads/main\n",
		".git/objects/":                     "",
		".git/refs/":                        "",
		".git/hooks/pre-commit.sample":      "#!/bin/sh\n",
		".git/modules/lib/config":           "[core]\n\tworktree = ../../../lib\n",
		".git/modules/lib/HEAD":             "ref: refs/heads/main\n",
		".git/worktrees/wt/commondir":       "../..\n",
		".git/worktrees/wt/gitdir":          "/elsewhere/wt/.git\n",
		".git/worktrees/wt/config.worktree": "[core]\n",
		"lib/.git":                          "gitdir: ../.git/modules/lib\n",
		".claude/settings.json":             "{}\n",
		".mcp.json":                         "{}\n",
		"src/main.go":                       "package main\n",
	})
	return root
}

func scan(t *testing.T, root string) (*Root, Tree) {
	t.Helper()
	r, err := OpenRoot(root)
	must(t, err)
	t.Cleanup(func() { r.Close() })
	tree, err := Scan(r, wide, "/nonexistent-home")
	must(t, err)
	return r, tree
}

func TestScanFindsRepositoriesAndTheFilesGitTakesConfigThrough(t *testing.T) {
	root := repo(t)
	r, tree := scan(t, root)
	if err := tree.Refusal(root); err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, repo := range tree.Repos {
		dirs = append(dirs, repo.Dir)
	}
	slices.Sort(dirs)
	if !slices.Equal(dirs, []string{".git", ".git/modules/lib"}) {
		t.Errorf("repos = %q", dirs)
	}
	plan, err := NewPlan(r, tree)
	must(t, err)
	want := []string{".claude", ".git/config", ".git/hooks", ".git/modules/lib/config", ".git/worktrees/wt/commondir",
		".git/worktrees/wt/config.worktree", ".git/worktrees/wt/gitdir", ".mcp.json", "lib/.git"}
	if !slices.Equal(plan.ReadOnly, want) {
		t.Errorf("read-only = %q\nwant %q", plan.ReadOnly, want)
	}
	// The submodule has no hooks/ yet: an agent could create one.
	if !slices.Equal(plan.Empty, []string{".git/modules/lib/hooks"}) {
		t.Errorf("empty = %q", plan.Empty)
	}
	if !slices.Equal(plan.Pinned, []string{".git", ".git/modules", ".git/modules/lib", ".git/worktrees", ".git/worktrees/wt", "lib"}) {
		t.Errorf("pinned = %q", plan.Pinned)
	}
	must(t, plan.Verify(r))
}

func TestMountsComeParentsFirst(t *testing.T) {
	p := Plan{ReadOnly: []string{".git/config", ".git/hooks", "lib/.git"}, Pinned: []string{".git", "lib"}, Empty: []string{".git/modules/x/hooks"}}
	var got []string
	for _, m := range p.Mounts("/p") {
		got = append(got, m.Type+" "+m.Source+" "+m.Destination+" "+strings.Join(m.Options, ","))
	}
	want := []string{
		"bind /p/.git /p/.git rbind",
		"bind /p/lib /p/lib rbind",
		"bind /p/.git/config /p/.git/config rbind,ro",
		"bind /p/.git/hooks /p/.git/hooks rbind,ro",
		"bind /p/lib/.git /p/lib/.git rbind,ro",
		"tmpfs tmpfs /p/.git/modules/x/hooks ro,nosuid,nodev,noexec",
	}
	if !slices.Equal(got, want) {
		t.Errorf("mounts:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Issue 19's first finding: a link where the scan looks for submodules
// mounted $HOME read-write. Every shape of it is refused, naming the link,
// and nothing behind a link is ever read.
func TestLinksWhereProtectionsLookAreRefusedNeverFollowed(t *testing.T) {
	home := t.TempDir()
	files(t, home, map[string]string{"proj/.git/HEAD": "x", "proj/.git/config": "[core]\n", ".config/agent-sandbox/allowed-hosts": "x\n"})
	cases := []struct {
		name, link, target string
	}{
		{"modules to $HOME", "vendor/lib/.git/modules", home},
		{"modules to /", "vendor/lib/.git/modules", "/"},
		{"modules relative, up the tree", "vendor/lib/.git/modules", "../../.."},
		{"worktrees to $HOME", ".git/worktrees", home},
		{"hooks to $HOME", ".git/hooks", home},
		{"config to a host file", ".git/config", filepath.Join(home, ".config/agent-sandbox/allowed-hosts")},
		{"a .git that is a link", "sub/.git", filepath.Join(home, "proj/.git")},
		{".claude as a link", ".claude", home},
		{".mcp.json as a link", ".mcp.json", filepath.Join(home, "x.json")},
		{"a submodule's git dir as a link", ".git/modules/lib", home},
		{"commondir as a link", ".git/commondir", home},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			files(t, root, map[string]string{".git/HEAD": "x", ".git/config": "[core]\n", ".git/objects/": "", ".git/refs/": "",
				"vendor/lib/.git/HEAD": "x", "sub/": "", ".git/modules/": ""})
			os.Remove(filepath.Join(root, c.link))
			must(t, os.Symlink(c.target, filepath.Join(root, c.link)))
			_, tree := scan(t, root)
			err := tree.Refusal(root)
			if err == nil || !strings.Contains(err.Error(), Quote(filepath.Join(root, c.link))+" is a symbolic link") || !strings.Contains(err.Error(), "rm ") {
				t.Fatalf("refusal = %v", err)
			}
			for _, repo := range tree.Repos {
				if strings.HasPrefix(repo.Dir, c.link) {
					t.Errorf("a repository behind the link was read: %s", repo.Dir)
				}
			}
		})
	}
}

func TestOpeningBeneathNeverFollowsALink(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	files(t, outside, map[string]string{"secret": "s"})
	files(t, root, map[string]string{"a/b/": ""})
	must(t, os.Symlink(outside, filepath.Join(root, "a/out")))
	must(t, os.Symlink("b", filepath.Join(root, "a/rel")))
	r, err := OpenRoot(root)
	must(t, err)
	defer r.Close()
	for _, p := range []string{"a/out/secret", "a/rel", "a/out", "../" + filepath.Base(outside) + "/secret"} {
		if _, err := r.ReadFile(p, 10); err == nil {
			t.Errorf("read %s through a link", p)
		}
	}
	if _, err := r.ReadDir("a/rel"); !errors.Is(err, ErrLink) {
		t.Errorf("ReadDir through a relative link: %v, want ErrLink", err)
	}
	if got := r.firstLink("a/out/secret"); got != "a/out" {
		t.Errorf("firstLink = %q", got)
	}
	// The component walk (kernels without openat2) says the same.
	openat2Missing = true
	defer func() { openat2Missing = false }()
	if _, err := r.ReadDir("a/rel"); !errors.Is(err, ErrLink) {
		t.Errorf("component walk through a link: %v, want ErrLink", err)
	}
	if _, err := r.ReadDir("a/b"); err != nil {
		t.Errorf("component walk of a real dir: %v", err)
	}
}

// A mount's source swapped for a link after the scan is refused before
// the runtime could follow it.
func TestVerifyRefusesASourceSwappedAfterThePlan(t *testing.T) {
	root := repo(t)
	r, tree := scan(t, root)
	plan, err := NewPlan(r, tree)
	must(t, err)
	must(t, os.Rename(filepath.Join(root, "lib"), filepath.Join(root, "lib.real")))
	must(t, os.Symlink(t.TempDir(), filepath.Join(root, "lib")))
	if err := plan.Verify(r); err == nil || !strings.Contains(err.Error(), "lib") {
		t.Fatalf("verify = %v", err)
	}
}

func TestSpecialFilesAreRefused(t *testing.T) {
	root := t.TempDir()
	files(t, root, map[string]string{"run/": ""})
	must(t, syscall.Mkfifo(filepath.Join(root, "run/pipe"), 0o600))
	_, tree := scan(t, root)
	err := tree.Refusal(root)
	if err == nil || !strings.Contains(err.Error(), "holds the named pipe "+filepath.Join(root, "run/pipe")) {
		t.Fatalf("refusal = %v", err)
	}
}

// Issue 19's fifth finding: padding cannot hide a repository. Files do not
// count against the bound; directories do, and a walk cut short says so.
func TestPaddingCannotHideARepository(t *testing.T) {
	root := t.TempDir()
	pad := filepath.Join(root, "aaa")
	must(t, os.Mkdir(pad, 0o755))
	for i := range 60_000 {
		f, err := os.Create(filepath.Join(pad, fmt.Sprintf("%06d", i)))
		must(t, err)
		f.Close()
	}
	files(t, root, map[string]string{"zzz/nested/.git/HEAD": "x", "zzz/nested/.git/config": "[core]\n\tfsmonitor = x\n"})
	r, err := OpenRoot(root)
	must(t, err)
	defer r.Close()
	tree, err := Scan(r, Bound{Dirs: 50_000, Time: 10 * time.Second}, "")
	must(t, err)
	if tree.Cut != "" || len(tree.Repos) != 1 || tree.Repos[0].Dir != "zzz/nested/.git" {
		t.Fatalf("60,000 files hid the repository: cut %q, repos %v", tree.Cut, tree.Repos)
	}
	// Directories count: a walk bounded below them says where it stopped.
	for i := range 20 {
		must(t, os.Mkdir(filepath.Join(root, fmt.Sprintf("d%02d", i)), 0o755))
	}
	tree, err = Scan(r, Bound{Dirs: 10, Time: 10 * time.Second}, "")
	must(t, err)
	if tree.Cut != "after 10 directories" {
		t.Errorf("cut = %q", tree.Cut)
	}
	rep := Compare(r, Tree{}, Stamps{}, tree, Stamp(r, tree))
	if l := strings.Join(rep.Lines(), "\n"); !strings.Contains(l, "stopped after 10 directories") {
		t.Errorf("the report does not say the look was cut short:\n%s", l)
	}
}

func TestHooksPathAndIncludesInsideTheLaunchDirAreProtected(t *testing.T) {
	root := t.TempDir()
	files(t, root, map[string]string{
		".git/HEAD":            "x",
		".git/config":          "[core]\n\thooksPath = .githooks\n[include]\n\tpath = ../shared.gitconfig\n[includeIf \"gitdir:~/\"]\n\tpath = ~/.gitconfig-work\n",
		"shared.gitconfig":     "[include]\n\tpath = more.gitconfig\n",
		".githooks/pre-commit": "#!/bin/sh\n",
		"web/.git/HEAD":        "x",
		"web/.git/config":      "[core]\n\thooksPath = .husky/_\n",
		"web/.husky/":          "",
	})
	r, tree := scan(t, root)
	plan, err := NewPlan(r, tree)
	must(t, err)
	for _, want := range []string{".githooks", "shared.gitconfig", ".git/config", "web/.git/config"} {
		if !slices.Contains(plan.ReadOnly, want) {
			t.Errorf("%s is not read-only: %q", want, plan.ReadOnly)
		}
	}
	// husky's runner dir does not exist yet: an empty read-only one, so
	// the agent cannot make it; more.gitconfig does not exist: watched.
	if !slices.Contains(plan.Empty, "web/.husky/_") {
		t.Errorf("web/.husky/_ is not kept empty: %q", plan.Empty)
	}
	var includes []string
	for _, repo := range tree.Repos {
		includes = append(includes, repo.Includes...)
	}
	if !slices.Contains(includes, "more.gitconfig") {
		t.Errorf("the nested include is not followed: %q", includes)
	}
}

func TestCompareMovesAsideWhatGitNeverWritesAndListsItFirst(t *testing.T) {
	root := repo(t)
	files(t, root, map[string]string{".git/config": "[core]\n[include]\n\tpath = ../local.gitconfig\n"})
	r, before := scan(t, root)
	bs := Stamp(r, before)
	// The agent's work: a commondir to a dir of its own, an include the
	// config names, a nested repository, a hook, a tool file, a name that
	// is a shell command and one with an escape sequence.
	evil := "a; touch /tmp/x; :"
	files(t, root, map[string]string{
		".git/commondir":         "../evil\n",
		"local.gitconfig":        "[core]\n\tpager = touch /tmp/y\n",
		evil + "/.git/HEAD":      "x",
		evil + "/.git/config":    "[core]\n\tfsmonitor = \"touch /tmp/z\"\n[alias]\n\tst = !sh -c x\n",
		".vscode/tasks.json":     "{}",
		"web/.husky/pre-commit":  "npm test\n",
		"esc\x1b[2J/.git/HEAD":   "x",
		"esc\x1b[2J/.git/config": "",
	})
	must(t, os.WriteFile(filepath.Join(root, ".git/hooks/post-commit"), []byte("#!/bin/sh\n"), 0o755))
	_, after := scan(t, root)
	rep := Compare(r, before, bs, after, Stamp(r, after))
	lines := rep.Lines()
	text := strings.Join(lines, "\n")
	t.Log(text)
	if !rep.Findings[0].Never || !rep.Findings[1].Never {
		t.Fatalf("the never-legitimate files are not first: %+v", rep.Findings)
	}
	for _, p := range []string{".git/commondir", "local.gitconfig"} {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			t.Errorf("%s was not moved aside", p)
		}
		if _, err := os.Lstat(filepath.Join(root, p+".agent-sandbox-moved")); err != nil {
			t.Errorf("%s is not where the report says", p)
		}
	}
	for _, want := range []string{
		"moved aside: " + filepath.Join(root, ".git/commondir"),
		"rm -- " + filepath.Join(root, ".git/commondir.agent-sandbox-moved"),
		"new " + Quote(filepath.Join(root, evil, ".git")),
		"core.fsmonitor = 'touch /tmp/z'",
		"alias.st = '!sh -c x'",
		"hook " + filepath.Join(root, ".git/hooks/post-commit") + ": git runs it",
		"VS Code runs its tasks",
		"web/.husky/pre-commit: husky's hooks",
		`$'` + strings.ReplaceAll(root, "'", `\'`) + `/esc\x1b[2J/.git'`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.ContainsAny(text, "\x1b") {
		t.Error("the report carries a raw escape byte")
	}
	if strings.Contains(text, "git -C") || strings.Contains(text, "config --list") {
		t.Error("the report suggests running git in a repository the agent changed")
	}
	// Pasted into a shell, line by line, the report runs nothing of the
	// agent's: the quoted names stay words.
	for _, l := range lines {
		cmd := exec.Command("sh", "-c", l)
		cmd.Dir = t.TempDir()
		cmd.Run()
		if _, err := os.Stat(filepath.Join(cmd.Dir, "x")); err == nil {
			t.Errorf("pasting %q ran a command", l)
		}
	}
}

func TestQuoteGivesBackTheNameInAShell(t *testing.T) {
	for _, s := range []string{"plain/path.go", "a b", "a; touch x; :", "it's", "$(id)", "`id`", "tab\there", "nl\nx", "esc\x1b[31m", "\u202eevil", "ünï", "bad\xffutf8"} {
		q := Quote(s)
		out, err := exec.Command("bash", "-c", "printf %s "+q).Output()
		if err != nil || string(out) != s {
			t.Errorf("Quote(%q) = %s: bash gives back %q (%v)", s, q, out, err)
		}
		if strings.ContainsAny(q, "\n\x1b\u202e") {
			t.Errorf("Quote(%q) = %q carries a control character", s, q)
		}
	}
}

func TestParseGitConfigReadsWhatGitReads(t *testing.T) {
	src := "# comment\n[core]\n\tfsmonitor = \"touch /tmp/a\" ; trailing\n\tpager = less \\\n -R\n\tbare\n" +
		"[remote \"or\\\"igin\"]\n\turl = x\n[Alias]  st = !git status\n[diff.pdf]\n\ttextconv = pdftotext\n[bad\nkey = v\n[includeIf \"gitdir:~/w/\"]\npath = x.inc\n"
	got := parseGitConfig([]byte(src))
	var names []string
	for _, e := range got {
		names = append(names, e.Name+"="+e.Value)
	}
	want := []string{"core.fsmonitor=touch /tmp/a", "core.pager=less  -R", "core.bare=true", `remote.or"igin.url=x`, "alias.st=!git status",
		"diff.pdf.textconv=pdftotext", "includeif.gitdir:~/w/.path=x.inc"}
	if !slices.Equal(names, want) {
		t.Errorf("entries:\n%q\nwant\n%q", names, want)
	}
	runs := 0
	for _, e := range got {
		if runsCommand(e) != "" {
			runs++
		}
	}
	if runs != 5 {
		t.Errorf("%d entries run commands, want 5 (fsmonitor, pager, alias, textconv, includeIf)", runs)
	}
}
