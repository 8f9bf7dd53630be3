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

// repoDirs are the tree's git dirs, sorted.
func repoDirs(t Tree) []string {
	var dirs []string
	for _, repo := range t.Repos {
		dirs = append(dirs, repo.Dir)
	}
	slices.Sort(dirs)
	return dirs
}

func scan(t *testing.T, root string) (*Root, Tree) {
	t.Helper()
	r, err := OpenRoot(root)
	must(t, err)
	t.Cleanup(func() { r.Close() })
	tree, err := Scan(r, wide, Host{Home: "/nonexistent-home"})
	must(t, err)
	return r, tree
}

func TestScanFindsRepositoriesAndTheFilesGitTakesConfigThrough(t *testing.T) {
	root := repo(t)
	r, tree := scan(t, root)
	if err := tree.Refusal(root); err != nil {
		t.Fatal(err)
	}
	dirs := repoDirs(tree)
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
	tree, err := Scan(r, Bound{Dirs: 50_000, Time: 10 * time.Second}, Host{})
	must(t, err)
	if tree.Cut != "" || len(tree.Repos) != 1 || tree.Repos[0].Dir != "zzz/nested/.git" {
		t.Fatalf("60,000 files hid the repository: cut %q, repos %v", tree.Cut, tree.Repos)
	}
	// Directories count: a walk bounded below them says where it stopped.
	for i := range 20 {
		must(t, os.Mkdir(filepath.Join(root, fmt.Sprintf("d%02d", i)), 0o755))
	}
	tree, err = Scan(r, Bound{Dirs: 10, Time: 10 * time.Second}, Host{})
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
		if m, _ := filepath.Glob(filepath.Join(root, p+".agent-sandbox-moved-*")); len(m) != 1 || !strings.Contains(strings.Join(rep.Lines(), "\n"), "is now "+m[0]) {
			t.Errorf("%s is not where the report says (%v)", p, m)
		}
	}
	for _, want := range []string{
		"moved aside: " + filepath.Join(root, ".git/commondir"),
		"rm -- " + filepath.Join(root, ".git/commondir.agent-sandbox-moved-"),
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

// A read-only file with another name could be changed through it; a link
// in a hook dir makes its target a hook.
func TestHardLinksAndHookLinksAreHandled(t *testing.T) {
	root := repo(t)
	must(t, os.Link(filepath.Join(root, ".git/config"), filepath.Join(root, "notes.txt")))
	r, tree := scan(t, root)
	if _, err := NewPlan(r, tree); err == nil || !strings.Contains(err.Error(), "has 2 hard links") {
		t.Fatalf("a hard-linked config was not refused: %v", err)
	}
	must(t, os.Remove(filepath.Join(root, "notes.txt")))
	files(t, root, map[string]string{"tools/pre-commit": "#!/bin/sh\n"})
	must(t, os.Symlink("../../tools/pre-commit", filepath.Join(root, ".git/hooks/pre-commit")))
	r, tree = scan(t, root)
	plan, err := NewPlan(r, tree)
	must(t, err)
	if !slices.Contains(plan.ReadOnly, "tools/pre-commit") {
		t.Errorf("the hook a link points to is not read-only: %q", plan.ReadOnly)
	}
}

func TestTheUsersOwnHooksPathIsFollowedIntoEveryRepository(t *testing.T) {
	root := repo(t)
	global := filepath.Join(t.TempDir(), "gitconfig")
	must(t, os.WriteFile(global, []byte("[core]\n\thooksPath = .githooks\n"), 0o644))
	files(t, root, map[string]string{".githooks/pre-commit": "#!/bin/sh\n"})
	r, err := OpenRoot(root)
	must(t, err)
	defer r.Close()
	tree, err := Scan(r, wide, Host{GitConfigs: []string{global}})
	must(t, err)
	plan, err := NewPlan(r, tree)
	must(t, err)
	if !slices.Contains(plan.ReadOnly, ".githooks") {
		t.Errorf("the hooks dir the user's own hooksPath names is not read-only: %q", plan.ReadOnly)
	}
}

// leave is the end of a session over root: the report's lines.
func leave(t *testing.T, r *Root, before Tree, bs Stamps) string {
	t.Helper()
	rep, err := Leave(r, before, bs, wide, Host{})
	must(t, err)
	return strings.Join(rep.Lines(), "\n")
}

func movedAside(t *testing.T, p string) bool {
	t.Helper()
	m, _ := filepath.Glob(p + ".agent-sandbox-moved-*")
	_, err := os.Lstat(p)
	return len(m) > 0 && err != nil
}

// The hostile review's ways around the move-aside (issue 19): each leaves
// the agent's commondir where git reads it unless handled.
func TestNeverLegitimateFilesAreMovedAsideWhateverTheAgentDid(t *testing.T) {
	for _, c := range []struct {
		name string
		do   func(root string)
	}{
		{"an unlistable .git (chmod 311)", func(root string) {
			must(t, os.WriteFile(filepath.Join(root, ".git/commondir"), []byte("../evil\n"), 0o644))
			must(t, os.Chmod(filepath.Join(root, ".git"), 0o311))
		}},
		{"an unwritable .git (chmod 555)", func(root string) {
			must(t, os.WriteFile(filepath.Join(root, ".git/commondir"), []byte("../evil\n"), 0o644))
			must(t, os.Chmod(filepath.Join(root, ".git"), 0o555))
		}},
		{"commondir as a link", func(root string) {
			must(t, os.WriteFile(filepath.Join(root, "ptr"), []byte("../evil\n"), 0o644))
			must(t, os.Symlink("../ptr", filepath.Join(root, ".git/commondir")))
		}},
		{"names taken where it would go", func(root string) {
			for i := range 120 {
				must(t, os.WriteFile(filepath.Join(root, fmt.Sprintf(".git/commondir.agent-sandbox-moved-%d", i)), nil, 0o644))
			}
			must(t, os.WriteFile(filepath.Join(root, ".git/commondir"), []byte("../evil\n"), 0o644))
		}},
		{"a worktree's own config.worktree", func(root string) {
			must(t, os.WriteFile(filepath.Join(root, ".git/worktrees/wt/config.worktree.x"), nil, 0o644))
			must(t, os.Remove(filepath.Join(root, ".git/worktrees/wt/config.worktree.x")))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := repo(t)
			if c.name == "a worktree's own config.worktree" {
				must(t, os.Remove(filepath.Join(root, ".git/worktrees/wt/config.worktree")))
			}
			r, before := scan(t, root)
			bs := Stamp(r, before)
			target := filepath.Join(root, ".git/commondir")
			if c.name == "a worktree's own config.worktree" {
				target = filepath.Join(root, ".git/worktrees/wt/config.worktree")
				must(t, os.WriteFile(target, []byte("[core]\n\tfsmonitor = x\n"), 0o644))
			}
			c.do(root)
			defer os.Chmod(filepath.Join(root, ".git"), 0o755)
			text := leave(t, r, before, bs)
			os.Chmod(filepath.Join(root, ".git"), 0o755)
			if !movedAside(t, target) || !strings.Contains(text, "moved aside: "+target) {
				t.Errorf("%s is still where git reads it:\n%s", target, text)
			}
		})
	}
}

// A directory the scan could not read (the agent can chmod what it owns;
// e2e row 32 does, as the rootless user) refuses the next session.
func TestWhatTheScanCouldNotReadRefusesTheSession(t *testing.T) {
	root := t.TempDir()
	tree := Tree{Problems: []string{Quote(filepath.Join(root, "vendor")) + " cannot be read (permission denied)"}}
	if err := tree.Refusal(root); err == nil || !strings.Contains(err.Error(), "vendor cannot be read") || !strings.Contains(err.Error(), "chmod u+rwx") {
		t.Fatalf("refusal = %v", err)
	}
}

// What git reads, the scan reads alike: a byte order mark, a backspace
// escape, a NUL, a CR in a header; a path through a link up the tree.
func TestTheScanReadsConfigAsGitDoes(t *testing.T) {
	root := repo(t)
	files(t, root, map[string]string{".git/config": "\xef\xbb\xbf[core]\n\tfsmonitor = touch x\n[include]\n\tpath = ../a\\bb.cfg\n[includeIf\r\"gitdir:/\"]\n\tpath = ../c.cfg\x00decoy\n"})
	r, tree := scan(t, root)
	var inc []string
	for _, repo := range tree.Repos {
		if repo.Dir == ".git" {
			inc = repo.Includes
		}
	}
	if !slices.Equal(inc, []string{"a\bb.cfg", "c.cfg"}) {
		t.Errorf("includes = %q, want the backspace kept and the NUL ending the path", inc)
	}
	var main Repo
	for _, repo := range tree.Repos {
		if repo.Dir == ".git" {
			main = repo
		}
	}
	runs := strings.Join(whatGitRuns(r, main), "\n")
	if !strings.Contains(runs, "core.fsmonitor = 'touch x'") {
		t.Errorf("the fsmonitor behind a byte order mark is not shown:\n%s", runs)
	}
	// ../sub/../evil.cfg, where sub is a link: git goes through the link.
	root2 := repo(t)
	files(t, root2, map[string]string{".git/config": "[include]\n\tpath = ../sub/../evil.cfg\n", "a/b/": ""})
	must(t, os.Symlink("a/b", filepath.Join(root2, "sub")))
	_, tree2 := scan(t, root2)
	if err := tree2.Refusal(root2); err == nil || !strings.Contains(err.Error(), "sub is a symbolic link") {
		t.Errorf("an include through a link was not refused: %v", err)
	}
}

func TestGitDirsAreFoundAsGitFindsThem(t *testing.T) {
	// The launch dir itself made a git dir, and one whose HEAD is a link.
	root := t.TempDir()
	files(t, root, map[string]string{"HEAD": "ref: refs/heads/main\n", "config": "[core]\n\tbare = false\n\tworktree = .\n", "objects/": "", "refs/": "",
		"src/x.go": "package x\n", "b/objects/": "", "b/refs/": "", "b/config": "[core]\n"})
	must(t, os.Symlink("refs/heads/main", filepath.Join(root, "b/HEAD")))
	r, tree := scan(t, root)
	dirs := repoDirs(tree)
	if !slices.Equal(dirs, []string{".", "b"}) {
		t.Fatalf("repos = %q", dirs)
	}
	plan, err := NewPlan(r, tree)
	must(t, err)
	if !slices.Contains(plan.ReadOnly, "config") || !slices.Contains(plan.ReadOnly, "b/config") {
		t.Errorf("read-only = %q", plan.ReadOnly)
	}
	// A separate git dir: hooksPath is the work tree's, where the .git file
	// is.
	root2 := t.TempDir()
	files(t, root2, map[string]string{"proj/.git": "gitdir: ../store/proj.git\n", "proj/.husky/_/h": "#!/bin/sh\n",
		"store/proj.git/HEAD": "x", "store/proj.git/config": "[core]\n\thooksPath = .husky/_\n", "store/proj.git/objects/": "", "store/proj.git/refs/": ""})
	r2, tree2 := scan(t, root2)
	plan2, err := NewPlan(r2, tree2)
	must(t, err)
	if !slices.Contains(plan2.ReadOnly, "proj/.husky/_") {
		t.Errorf("the work tree's hooks path is not read-only: %q", plan2.ReadOnly)
	}
}

func TestAPointerIntoPodmansStorageIsRefused(t *testing.T) {
	root := repo(t)
	storage := t.TempDir()
	files(t, storage, map[string]string{"vol/_data/g/HEAD": "x"})
	files(t, root, map[string]string{"sub/.git": "gitdir: " + filepath.Join(storage, "vol/_data/g") + "\n"})
	r, err := OpenRoot(root)
	must(t, err)
	defer r.Close()
	tree, err := Scan(r, wide, Host{Forbidden: []string{storage}})
	must(t, err)
	if err := tree.Refusal(root); err == nil || !strings.Contains(err.Error(), "where the agent writes outside the launch dir") {
		t.Errorf("a .git file into podman's storage was not refused: %v", err)
	}
}

func TestAConfigSectionNameIsQuotedInTheReport(t *testing.T) {
	root := repo(t)
	r, before := scan(t, root)
	bs := Stamp(r, before)
	files(t, root, map[string]string{"n/.git/HEAD": "x", "n/.git/config": "[filter \"a;touch /tmp/p #\"]\n\tsmudge = cat\n[filter \"\x1b]52;c;x\a\"]\n\tclean = cat\n"})
	text := leave(t, r, before, bs)
	if strings.ContainsAny(text, "\x1b\a") || !strings.Contains(text, "'filter.a;touch /tmp/p #.smudge'") {
		t.Errorf("a section name reached the report unquoted:\n%q", text)
	}
}

// The session's GitHub writes are scoped to where `git push` goes by each
// repository's own config: origin, pushDefault and pushRemote, by pushurl
// where set; never a remote of a file it includes (which the agent could
// have made in an earlier session), nor one the user only fetches from.
func TestScanReadsWhereEachRepositoryPushes(t *testing.T) {
	root := t.TempDir()
	files(t, root, map[string]string{
		".git/config": "[core]\n\tbare = false\n[include]\n\tpath = extra.inc\n" +
			"[remote \"origin\"]\n\turl = https://github.com/me/proj.git\n\tpushurl = git@github.com:me/proj-push.git\n" +
			"[remote \"upstream\"]\n\turl = git@github.com:them/proj\n\tpushurl = DISABLE\n" +
			"[remote \"fork\"]\n\turl = https://github.com/me/fork\n[branch \"wip\"]\n\tpushRemote = fork\n\tremote = upstream\n",
		".git/extra.inc":           "[remote \"origin\"]\n\tpushurl = https://github.com/attacker/loot\n[remote]\n\tpushDefault = evil\n",
		".git/HEAD":                "ref: refs/heads/main\n",
		".git/objects/":            "",
		".git/refs/":               "",
		"vendor/lib/.git/config":   "[remote \"origin\"]\n\turl = https://github.com/other/lib\n",
		"vendor/lib/.git/HEAD":     "ref: refs/heads/main\n",
		"vendor/lib/.git/objects/": "",
		"vendor/lib/.git/refs/":    "",
	})
	_, tree := scan(t, root)
	got := map[string][]string{}
	for _, r := range tree.Repos {
		got[r.Dir] = r.PushURLs
	}
	if want := []string{"git@github.com:me/proj-push.git", "https://github.com/me/fork"}; !slices.Equal(got[".git"], want) {
		t.Errorf(".git pushes to %q, want %q", got[".git"], want)
	}
	if want := []string{"https://github.com/other/lib"}; !slices.Equal(got["vendor/lib/.git"], want) {
		t.Errorf("vendor/lib/.git pushes to %q, want %q", got["vendor/lib/.git"], want)
	}
}

// Where git pushes, as git decides it: pushDefault in place of origin,
// pushInsteadOf for a push by url (not for a pushurl), insteadOf, the
// longest prefix, rules from the user's own config too, and an empty value
// that resets the list.
func TestScanFollowsGitsPushRewrites(t *testing.T) {
	root := t.TempDir()
	home := t.TempDir()
	files(t, home, map[string]string{".gitconfig": "[url \"https://github.com/me/\"]\n\tpushInsteadOf = https://github.com/bigorg/\n"})
	files(t, root, map[string]string{
		".git/config": "[remote]\n\tpushDefault = fork\n" +
			"[remote \"origin\"]\n\turl = https://github.com/bigorg/proj\n" +
			"[remote \"fork\"]\n\turl = https://github.com/bigorg/proj-fork\n" +
			"[remote \"mirror\"]\n\turl = gh:old/x\n\turl =\n\turl = gh:new/x\n\tpushurl = https://github.com/bigorg/direct\n" +
			"[branch \"m\"]\n\tpushRemote = mirror\n" +
			"[url \"https://github.com/\"]\n\tinsteadOf = gh:\n",
		".git/HEAD":     "ref: refs/heads/main\n",
		".git/objects/": "",
		".git/refs/":    "",
	})
	r, err := OpenRoot(root)
	must(t, err)
	t.Cleanup(func() { r.Close() })
	tree, err := Scan(r, Bound{Dirs: 1000, Time: 5 * time.Second}, Host{Home: home, GitConfigs: []string{filepath.Join(home, ".gitconfig")}})
	must(t, err)
	var got []string
	for _, repo := range tree.Repos {
		got = repo.PushURLs
	}
	// fork (pushDefault, not origin) by the user's pushInsteadOf; mirror's
	// explicit pushurl untouched by pushInsteadOf.
	if want := []string{"https://github.com/me/proj-fork", "https://github.com/bigorg/direct"}; !slices.Equal(got, want) {
		t.Errorf("pushes to %q, want %q", got, want)
	}
}

// Issue 22's second review: git reads a remote from .git/branches/NAME or
// .git/remotes/NAME for a name the config lacks, so a file left there
// sends the user's plain `git push` to the agent's URL. No git writes one:
// it is moved aside, new or changed.
func TestLegacyRemoteFilesAreMovedAside(t *testing.T) {
	root := repo(t)
	files(t, root, map[string]string{".git/remotes/old": "URL: https://github.com/me/proj\n"})
	r, before := scan(t, root)
	plan, err := NewPlan(r, before)
	must(t, err)
	if !slices.Contains(plan.ReadOnly, ".git/remotes") || slices.Contains(plan.ReadOnly, ".git/branches") || slices.Contains(plan.Empty, ".git/branches") {
		t.Errorf("an existing legacy remotes dir is not read-only, or a missing one is mounted: %+v", plan)
	}
	bs := Stamp(r, before)
	files(t, root, map[string]string{
		".git/branches/origin": "https://attacker.example/drop.git#main\n",
		".git/remotes/old":     "URL: https://attacker.example/drop.git\nPush: refs/heads/*:refs/heads/*\n",
	})
	_, after := scan(t, root)
	rep := Compare(r, before, bs, after, Stamp(r, after))
	text := strings.Join(rep.Lines(), "\n")
	for _, p := range []string{".git/branches/origin", ".git/remotes/old"} {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			t.Errorf("%s was not moved aside:\n%s", p, text)
		}
		if !strings.Contains(text, "moved aside: "+filepath.Join(root, p)) {
			t.Errorf("the report does not name %s:\n%s", p, text)
		}
	}
	if !strings.Contains(text, "a remote in git's legacy form") {
		t.Errorf("the report does not say why:\n%s", text)
	}
}
