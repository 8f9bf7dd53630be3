//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Issue 19: the launch dir outlives the session, and the next session, the
// user's shell, git and other tools read what the agent left there. Each
// row below is an attack a hostile agent (or a tarball) makes through the
// tree, the defence's own error, a canary only the host can trip that never
// fires, and the same attempt over an opened path, where it does.

var treeRows = []secRow{
	{31, "a link where the scan looks (modules/, worktrees/, hooks/) to $HOME, to / or up the tree refuses the next session; nothing is mounted through it, and the exit walk follows none", rowLinksInTree},
	{32, "git's indirection files: existing commondir, gitdir and config.worktree are read-only; a new commondir or config.worktree is moved aside at exit and the host's git status and commit run nothing", rowGitIndirection},
	{33, "hooks that core.hooksPath sends to the work tree (.githooks, husky's .husky/_) are read-only; the host's commit runs nothing of the agent's", rowHooksPath},
	{34, "the exit report is safe to follow: names quoted, control bytes escaped, no git run in the agent's repositories; pasted into a shell it runs nothing", rowSafeReport},
	{35, "padding the tree with files hides no repository from the exit report or the next session's protections; padding with directories is said", rowPadding},
	{36, "host-loaded tool files (.vscode, .devcontainer, .envrc, husky, ...) the agent adds or changes are listed at exit with what loads them", rowToolFiles},
	{37, "a session in the same dir as a running one, or in a dir that contains it, is refused before it scans", rowOverlap},
}

// hostHome is the test user's home, which a session must never mount.
func hostHome(t *testing.T) string {
	h := os.Getenv("HOME")
	if h == "" {
		t.Fatal("no HOME")
	}
	return h
}

// bareRepo makes dir/.git the way `git init` does, without a commit.
func initRepo(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mustGit(t, dir, "init", "-q", "-b", "main")
}

func writeFile(t *testing.T, path, body string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
}

// present reports whether p exists, a link included.
func present(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func rowLinksInTree(t *testing.T, ev *evidence) {
	home := hostHome(t)
	// A repository in $HOME, as users have many: what a scan that follows
	// the link would find there, and pin, mounting its parents.
	bait := filepath.Join(home, "asb-bait-"+newNonce(t))
	initRepo(t, bait)
	t.Cleanup(func() { removeAll(bait) })
	before := podmanInventory(t)
	cases := []struct {
		name, link, target string
		// planted by the agent of a first session, or shipped in a tarball
		// (a path the first session's protections keep it from).
		byAgent bool
	}{
		{"modules/ to $HOME", "vendor/lib/.git/modules", home, true},
		{"modules/ to /", "vendor/lib/.git/modules", "/", true},
		{"modules/ up the tree", "vendor/lib/.git/modules", "../../../..", true},
		{"worktrees/ to $HOME", ".git/worktrees", home, true},
		{"hooks/ to $HOME (a shipped tarball)", ".git/hooks", home, false},
	}
	var refused []string
	for _, c := range cases {
		dir := launchDir(t)
		initRepo(t, dir)
		initRepo(t, filepath.Join(dir, "vendor/lib"))
		link := filepath.Join(dir, c.link)
		if c.byAgent {
			res, _ := probeSession(t, sessionOpts{Dir: dir}, probe{"plant", fmt.Sprintf("mkdir -p %s && ln -s %s %s && ls -ld %s",
				shellQuote(filepath.Dir(link)), shellQuote(c.target), shellQuote(link), shellQuote(link))})
			wantOK(t, res, "plant", "->")
		} else {
			removeAll(link)
			if err := os.Symlink(c.target, link); err != nil {
				t.Fatal(err)
			}
		}
		nonce := newNonce(t)
		canary := filepath.Join(link, "canary-"+nonce)
		r := runSession(t, sessionOpts{Dir: dir, Cmd: []string{"sh", "-c", "echo ran-" + nonce + "; touch " + shellQuote(canary) + "; cat " + shellQuote(filepath.Join(home, ".bashrc"))}})
		wantCode(t, r, 1)
		if want := link + " is a symbolic link"; !strings.Contains(r.Stderr(), want) || !strings.Contains(r.Stderr(), "rm "+link) {
			t.Errorf("%s: the refusal does not name the link and its removal (%q):\n%s", c.name, want, indent(r.Stderr()))
		}
		if strings.Contains(r.Stdout(), "ran-"+nonce) {
			t.Errorf("LEAK: %s: the agent ran in a tree holding the link", c.name)
		}
		for _, p := range []string{filepath.Join(home, "canary-"+nonce), filepath.Join(filepath.Dir(dir), "canary-"+nonce)} {
			if present(p) {
				t.Errorf("LEAK: %s: %s was written through the link", c.name, p)
			}
		}
		wantNothingCreated(t, before, r)
		refused = append(refused, c.name)
	}

	// The exit walk: links the agent makes where it looks are listed as
	// links, and nothing behind them is read (the bait is never named).
	dir := launchDir(t)
	initRepo(t, dir)
	res, r := probeSession(t, sessionOpts{Dir: dir}, probe{"links", fmt.Sprintf("ln -s / .git/modules && mkdir -p x/.git && ln -s %s x/.git/modules && echo made", shellQuote(home))})
	wantOK(t, res, "links", "made")
	for _, want := range []string{filepath.Join(dir, ".git/modules") + ": a symbolic link to /", filepath.Join(dir, "x/.git/modules") + ": a symbolic link to " + home} {
		if !strings.Contains(r.Stderr(), want) {
			t.Errorf("the exit report does not list the link (%q):\n%s", want, indent(r.Stderr()))
		}
	}
	if strings.Contains(r.Stderr(), bait) || strings.Contains(r.Stderr(), "stopped") {
		t.Errorf("the exit walk followed a link:\n%s", indent(r.Stderr()))
	}

	// Opened path: a mount of the joined path, as a pin through the link
	// would be, lands in $HOME: what the refusal stood in the way of.
	openDir := launchDir(t)
	initRepo(t, filepath.Join(openDir, "vendor/lib"))
	openLink := filepath.Join(openDir, "vendor/lib/.git/modules")
	if err := os.Symlink(home, openLink); err != nil {
		t.Fatal(err)
	}
	nonce := newNonce(t)
	out, err := podman("run", "--rm", "--userns", "keep-id:uid=1000,gid=1000", "--network", "none", "-v", openLink+":"+openLink, harness.sandboxImage,
		"touch", filepath.Join(openLink, "canary-"+nonce))
	canary := filepath.Join(home, "canary-"+nonce)
	defer os.Remove(canary)
	if err != nil || !present(canary) {
		t.Errorf("opened path: a mount through the link did not write %s (%v): %s", canary, err, out)
	}
	if !t.Failed() {
		ev.add("%s: each refused (exit 1, names the link and rm), no agent ran, no canary written in $HOME or beside the dir, nothing created; links the agent made at exit (.git/modules to /, x/.git/modules to $HOME) listed as links, nothing behind them read; "+
			"a plain container mounting the joined path wrote the canary into $HOME (opened path)", strings.Join(refused, ", "))
	}
}

// evilCommonDir is what an agent writes to take over a repository's
// config: a common dir of its own, with the repository's objects and refs
// and a config whose fsmonitor is the canary, and a commondir naming it.
func evilCommonDir(canary string) string {
	return fmt.Sprintf("mkdir evil && cp -r .git/objects .git/refs evil/ && printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = touch %s\\n' > evil/config && "+
		"mkdir evil/hooks && printf '#!/bin/sh\\ntouch %s.hook\\n' > evil/hooks/pre-commit && chmod +x evil/hooks/pre-commit && echo ../evil > .git/commondir && echo written", canary, canary)
}

func rowGitIndirection(t *testing.T, ev *evidence) {
	dir := gitProject(t)
	// What users have: a worktree (its gitdir and commondir), a submodule,
	// a sparse checkout (extensions.worktreeConfig and config.worktree),
	// and a repository with the extension on but no config.worktree yet.
	mustGit(t, dir, "worktree", "add", "-q", "wt")
	mustGit(t, dir, "-c", "protocol.file.allow=always", "submodule", "add", "-q", filepath.Join(dir, "remote.git"), "lib")
	mustGit(t, dir, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "submodule")
	sparse := filepath.Join(dir, "sparse")
	initRepo(t, sparse)
	writeFile(t, filepath.Join(sparse, "a/x"), "a\n", 0o644)
	writeFile(t, filepath.Join(sparse, "b/y"), "b\n", 0o644)
	mustGit(t, sparse, "add", ".")
	mustGit(t, sparse, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "i")
	mustGit(t, sparse, "sparse-checkout", "set", "a")
	wc := filepath.Join(dir, "wc")
	initRepo(t, wc)
	mustGit(t, wc, "config", "extensions.worktreeConfig", "true")
	// Two more, for the agent's ways around the move-aside: a git dir made
	// unlistable, and a commondir that is a link.
	hidden, linked := filepath.Join(dir, "r2"), filepath.Join(dir, "r3")
	initRepo(t, hidden)
	initRepo(t, linked)
	writeFile(t, filepath.Join(dir, ".gitignore"), "ca.pem\nremote.git/\nsparse/\nwc/\nevil/\nevil2/\nevil3/\nptr\nr2/\nr3/\nwt/\nwt2/\n", 0o644)
	mustGit(t, dir, "add", ".gitignore")
	mustGit(t, dir, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "ignore")

	canary := filepath.Join(mkdir(t, "canary-"), "ran")
	const ro = "Read-only file system"
	writes := []struct{ name, shell string }{
		{"the worktree's commondir", "echo ../evil > .git/worktrees/wt/commondir"},
		{"the worktree's gitdir", "echo /elsewhere > .git/worktrees/wt/gitdir"},
		{"the sparse checkout's config.worktree", "printf '[core]\\n\\tfsmonitor = touch " + canary + "\\n' >> sparse/.git/config.worktree"},
		{"the submodule's config", "printf '[core]\\n\\tfsmonitor = touch " + canary + "\\n' >> .git/modules/lib/config"},
	}
	var probes []probe
	for _, w := range writes {
		probes = append(probes, probe{w.name, w.shell})
	}
	workflow := []probe{
		{"status in the worktree", "git -C wt status --short"},
		{"commit in the submodule", "echo s >> lib/README && git -C lib -c user.name=a -c user.email=a@x commit -qam sub && git -C lib log --oneline -1"},
		{"a new worktree", "git worktree add -q wt2 && git -C wt2 status --short && echo added"},
		{"sparse checkout", "git -C sparse sparse-checkout set b && ls sparse"},
		{"a new commondir", evilCommonDir(canary)},
		{"a new config.worktree", "printf '[core]\\n\\tfsmonitor = touch " + canary + ".wc\\n' > wc/.git/config.worktree && echo written"},
		{"a commondir in an unlistable git dir", "mkdir evil2 evil2/objects evil2/refs && printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = touch " + canary + ".hidden\\n' > evil2/config && " +
			"echo ../../evil2 > r2/.git/commondir && chmod 311 r2/.git && echo written"},
		{"a commondir that is a link", "mkdir evil3 evil3/objects evil3/refs && printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = touch " + canary + ".link\\n' > evil3/config && " +
			"echo ../../evil3 > ptr && ln -s ../../ptr r3/.git/commondir && echo written"},
	}
	res, r := probeSession(t, sessionOpts{Dir: dir}, append(probes, workflow...)...)
	for _, w := range writes {
		if p := res[w.name]; p.RC == 0 || !strings.Contains(p.Out, ro) {
			t.Errorf("%s: want a failure saying %q: %s", w.name, ro, p)
		}
	}
	wantOK(t, res, "status in the worktree")
	wantOK(t, res, "commit in the submodule", "sub")
	wantOK(t, res, "a new worktree", "added")
	wantOK(t, res, "sparse checkout", "b")
	wantOK(t, res, "a new commondir", "written")
	wantOK(t, res, "a new config.worktree", "written")
	wantOK(t, res, "a commondir in an unlistable git dir", "written")
	wantOK(t, res, "a commondir that is a link", "written")
	// Listed first, moved aside, never where git reads them. The git dir
	// the agent made unlistable is said not checked, and given its mode
	// back here to look (git itself reads it by name either way).
	if !strings.Contains(r.Stderr(), "NOT CHECKED: "+filepath.Join(hidden, ".git")+" cannot be read") {
		t.Errorf("the unlistable git dir is not said to be unchecked:\n%s", indent(r.Stderr()))
	}
	os.Chmod(filepath.Join(hidden, ".git"), 0o755)
	report := reportLines(r.Stderr())
	moved := map[string]string{}
	for _, p := range []string{filepath.Join(dir, ".git/commondir"), filepath.Join(wc, ".git/config.worktree"), filepath.Join(hidden, ".git/commondir"), filepath.Join(linked, ".git/commondir")} {
		m, _ := filepath.Glob(p + ".agent-sandbox-moved-*")
		if len(m) != 1 {
			t.Errorf("%s was not moved aside: %v", p, m)
			continue
		}
		moved[p] = m[0]
		if len(report) < 6 || !strings.Contains(strings.Join(report[1:6], "\n"), "moved aside: "+p+" is now "+m[0]) {
			t.Errorf("%s is not listed first as moved aside:\n%s", p, indent(r.Stderr()))
		}
		if present(p) {
			t.Errorf("%s is still where git reads it", p)
		}
	}
	// The host then uses the repositories as a user does.
	for _, repo := range []string{dir, wc, hidden, linked} {
		for _, args := range [][]string{{"status"}, {"commit", "-q", "--allow-empty", "-m", "host"}} {
			if out, err := hostGit(t, repo, args...); err != nil {
				t.Errorf("host git %s in %s: %v\n%s", strings.Join(args, " "), repo, err, out)
			}
		}
	}
	for _, c := range []string{canary, canary + ".hook", canary + ".wc", canary + ".hidden", canary + ".link"} {
		if present(c) {
			t.Errorf("LEAK: the host ran the agent's command (%s exists)", c)
		}
	}
	// Opened path: the same files back where git reads them, and the
	// host's own git status runs the agent's fsmonitor.
	for p, m := range moved {
		if err := os.Rename(m, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, repo := range []string{dir, wc, hidden, linked} {
		hostGit(t, repo, "status")
	}
	for _, c := range []string{canary, canary + ".wc", canary + ".hidden", canary + ".link"} {
		if !present(c) {
			t.Errorf("opened path: the host's git status with the agent's file in place did not run %s: the canary cannot catch a leak", c)
		}
	}
	for p := range moved {
		os.Remove(p)
	}
	if !t.Failed() {
		ev.add("%d writes to existing indirection files failed with EROFS; worktree status, a new worktree, a submodule commit and sparse-checkout set worked inside; "+
			"the agent's new .git/commondir (to a common dir with an fsmonitor and a hook), config.worktree, a commondir in a git dir it made unlistable (chmod 311) and one that is a link were listed first and moved aside; host status and commit ran no canary; "+
			"put back, the host's git status ran all four (opened path)", len(writes))
	}
}

// reportLines are the launcher's stderr lines, without the prefix.
func reportLines(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if rest, ok := strings.CutPrefix(l, "agent-sandbox: "); ok {
			out = append(out, rest)
		}
	}
	// The report starts at its header; lines the start printed (hosts
	// passed unread, warnings) come before it.
	for i, l := range out {
		if strings.HasPrefix(l, "the agent left files") {
			return out[i:]
		}
	}
	return out
}

func rowHooksPath(t *testing.T, ev *evidence) {
	dir := launchDir(t)
	hp := filepath.Join(dir, "hp")
	initRepo(t, hp)
	mustGit(t, hp, "config", "core.hooksPath", ".githooks")
	writeFile(t, filepath.Join(hp, ".githooks/pre-commit"), "#!/bin/sh\nexit 0\n", 0o755)
	// husky: hooksPath .husky/_, whose runner h is git-ignored (an edit
	// shows nowhere), calling the user's tracked .husky/pre-commit.
	hk := filepath.Join(dir, "hk")
	initRepo(t, hk)
	mustGit(t, hk, "config", "core.hooksPath", ".husky/_")
	writeFile(t, filepath.Join(hk, ".husky/_/h"), "#!/bin/sh\nexec sh \"$(dirname \"$(dirname \"$0\")\")/$(basename \"$0\")\"\n", 0o755)
	writeFile(t, filepath.Join(hk, ".husky/_/pre-commit"), "#!/bin/sh\n. \"$(dirname \"$0\")/h\"\n", 0o755)
	writeFile(t, filepath.Join(hk, ".husky/_/.gitignore"), "*\n", 0o644)
	writeFile(t, filepath.Join(hk, ".husky/pre-commit"), "exit 0\n", 0o644)
	// A hooks path whose dir does not exist yet.
	hm := filepath.Join(dir, "hm")
	initRepo(t, hm)
	mustGit(t, hm, "config", "core.hooksPath", ".hooks")

	// A hook that is a link into the work tree, as setups that keep their
	// hooks in the repository make them.
	hl := filepath.Join(dir, "hl")
	initRepo(t, hl)
	writeFile(t, filepath.Join(hl, "tools/pre-commit"), "#!/bin/sh\nexit 0\n", 0o755)
	if err := os.Symlink("../../tools/pre-commit", filepath.Join(hl, ".git/hooks/pre-commit")); err != nil {
		t.Fatal(err)
	}

	canary := filepath.Join(mkdir(t, "canary-"), "ran")
	hook := "#!/bin/sh\\ntouch " + canary + "\\n"
	const ro = "Read-only file system"
	attacks := []struct{ name, shell string }{
		{"edit .githooks/pre-commit", "printf '" + hook + "' > hp/.githooks/pre-commit"},
		{"add .githooks/post-commit", "printf '" + hook + "' > hp/.githooks/post-commit && chmod +x hp/.githooks/post-commit"},
		{"edit husky's runner", "printf '" + hook + "' > hk/.husky/_/h"},
		{"add a hook where hooksPath points", "mkdir -p hm/.hooks; printf '" + hook + "' > hm/.hooks/pre-commit"},
		{"edit the work-tree file a hook links to", "printf '" + hook + "' > hl/tools/pre-commit"},
	}
	var probes []probe
	for _, a := range attacks {
		probes = append(probes, probe{a.name, a.shell})
	}
	probes = append(probes, probe{"edit the tracked husky hook", "echo 'touch " + canary + ".husky' >> hk/.husky/pre-commit && echo edited"})
	res, r := probeSession(t, sessionOpts{Dir: dir}, probes...)
	for _, a := range attacks {
		if p := res[a.name]; p.RC == 0 || !strings.Contains(p.Out, ro) {
			t.Errorf("%s: want a failure saying %q: %s", a.name, ro, p)
		}
	}
	wantOK(t, res, "edit the tracked husky hook", "edited")
	if want := "changed " + filepath.Join(hk, ".husky/pre-commit") + ": husky's hooks"; !strings.Contains(r.Stderr(), want) {
		t.Errorf("the edited husky hook is not listed at exit (%q):\n%s", want, indent(r.Stderr()))
	}
	for _, repo := range []string{hp, hm, hl} {
		if out, err := hostGit(t, repo, "commit", "-q", "--allow-empty", "-m", "host"); err != nil {
			t.Errorf("host commit in %s: %v\n%s", repo, err, out)
		}
	}
	if present(canary) {
		t.Errorf("LEAK: the host's commit ran a hook the agent wrote (%s exists)", canary)
	}
	// Opened path: the same hook written on the host runs at its commit.
	writeFile(t, filepath.Join(hp, ".githooks/post-commit"), "#!/bin/sh\ntouch "+canary+"\n", 0o755)
	hostGit(t, hp, "commit", "-q", "--allow-empty", "-m", "opened")
	if !present(canary) {
		t.Errorf("opened path: a post-commit hook in .githooks did not run at the host's commit: the canary cannot catch a leak")
	}
	if !t.Failed() {
		ev.add("%d writes where core.hooksPath points (.githooks, husky's .husky/_/h, a missing .hooks, the work-tree file a hook links to) failed with EROFS; the edit of the tracked .husky/pre-commit was listed at exit; host commits ran no canary; the same hook written on the host ran (opened path)", len(attacks))
	}
}

func rowSafeReport(t *testing.T, ev *evidence) {
	dir := launchDir(t)
	canary := filepath.Join(mkdir(t, "canary-"), "ran")
	name := "a; touch " + canary + ".name; :"
	script := fmt.Sprintf("git init -q %s && git -C %s config core.pager %s && git -C %s config core.fsmonitor %s && git init -q \"$(printf 'esc\\033[2J\\033[1;1Hforged')\" && "+
		"printf '[filter \"a;touch %s.filter #\"]\\n\\tsmudge = cat\\n' >> %s/.git/config && echo made",
		shellQuote(name), shellQuote(name), shellQuote("touch "+canary+".pager; cat"), shellQuote(name), shellQuote("touch "+canary+".fsmonitor"), canary, shellQuote(name))
	res, r := probeSession(t, sessionOpts{Dir: dir}, probe{"make", script})
	wantOK(t, res, "make", "made")
	if strings.Contains(r.Stderr(), "\x1b") {
		t.Errorf("LEAK: the exit report carries a raw escape byte:\n%q", r.Stderr())
	}
	for _, want := range []string{
		"new " + shellQuote(filepath.Join(dir, name, ".git")),
		"core.pager = " + shellQuote("touch "+canary+".pager; cat") + ": git pipes git's output through it",
		"core.fsmonitor = " + shellQuote("touch "+canary+".fsmonitor"),
		`$'` + filepath.Join(dir, `esc\x1b[2J\x1b[1;1Hforged`, ".git") + `'`,
	} {
		if !strings.Contains(r.Stderr(), want) {
			t.Errorf("the exit report lacks %q:\n%s", want, indent(r.Stderr()))
		}
	}
	if strings.Contains(r.Stderr(), "git -C") || strings.Contains(r.Stderr(), "config --list") {
		t.Errorf("the exit report suggests running git in the agent's repository:\n%s", indent(r.Stderr()))
	}
	// Pasted into a shell, each line and each line's text after the
	// prefix, in the launch dir and in the agent's repository, with its
	// pager in force: nothing of the agent's runs.
	pasted := 0
	for _, l := range strings.Split(r.Stderr(), "\n") {
		for _, text := range []string{l, strings.TrimPrefix(l, "agent-sandbox: "), strings.TrimSpace(strings.TrimPrefix(l, "agent-sandbox: "))} {
			for _, cwd := range []string{dir, filepath.Join(dir, name)} {
				for _, sh := range []string{"sh", "bash"} {
					cmd := exec.Command(sh, "-c", text)
					cmd.Dir = cwd
					cmd.Env = []string{"HOME=" + hostHome(t), "PATH=" + os.Getenv("PATH")}
					cmd.Run()
					pasted++
				}
			}
		}
	}
	for _, c := range []string{canary + ".name", canary + ".pager", canary + ".fsmonitor", canary + ".filter"} {
		if present(c) {
			t.Errorf("LEAK: following the exit report ran the agent's command (%s exists)", c)
		}
	}
	// Opened path: the advice the report used to give, run in a terminal
	// (script(1) gives it one), starts the repository's pager; and the
	// name printed unquoted runs what it holds.
	out, _ := exec.Command("script", "-qec", "git -C "+shellQuote(filepath.Join(dir, name))+" config --list --show-origin", "/dev/null").CombinedOutput()
	unquoted := exec.Command("sh", "-c", "ls -la "+filepath.Join(dir, name))
	unquoted.Dir = dir
	unquoted.Run()
	for _, c := range []string{canary + ".pager", canary + ".name"} {
		if !present(c) {
			t.Errorf("opened path: %s did not fire (git config --list in a terminal, or the name unquoted): the canary cannot catch a leak\n%s", c, out)
		}
	}
	if !t.Failed() {
		ev.add("a repository named %q with core.pager and core.fsmonitor canaries and one whose name holds escape sequences: the report quoted both ($'...' with \\x1b), carried no raw control byte, showed the pager and fsmonitor by reading the config, suggested no git; "+
			"%d pastes of its lines into sh and bash, in the dir and in the repository, ran nothing; the old advice in a terminal ran the pager, and the name unquoted ran its command (opened path)", name, pasted)
	}
}

func rowPadding(t *testing.T, ev *evidence) {
	dir := launchDir(t)
	canary := filepath.Join(mkdir(t, "canary-"), "ran")
	// 50,001 empty files whose names sort first, then a repository.
	pad := "seq -w 0 50000 | sed 's/^/0/' | xargs touch && git init -q zz/nested && git -C zz/nested config core.fsmonitor " + shellQuote("touch "+canary) + " && echo padded"
	res, r := probeSession(t, sessionOpts{Dir: dir, Timeout: 3 * time.Minute}, probe{"pad", pad})
	wantOK(t, res, "pad", "padded")
	if want := "new " + filepath.Join(dir, "zz/nested/.git") + ": a new repository"; !strings.Contains(r.Stderr(), want) {
		t.Errorf("padding hid the repository from the exit report (%q):\n%s", want, indent(r.Stderr()))
	}
	if strings.Contains(r.Stderr(), "stopped") {
		t.Errorf("files cut the exit walk short:\n%s", indent(r.Stderr()))
	}
	// The next session in the padded tree protects the repository.
	res, r2 := probeSession(t, sessionOpts{Dir: dir, Timeout: 3 * time.Minute}, probe{"rewrite", "git -C zz/nested config core.fsmonitor 'touch /tmp/x'"})
	if p := res["rewrite"]; p.RC == 0 || !strings.Contains(p.Out, "Device or resource busy") {
		t.Errorf("the next session did not protect the repository behind the padding: %s", p)
	}
	if strings.Contains(r2.Stderr(), "stopped") {
		t.Errorf("files cut the next session's scan short:\n%s", indent(r2.Stderr()))
	}
	// Opened path: padding with directories reaches the bound, and the
	// report says that its look stopped.
	dir2 := launchDir(t)
	res, r3 := probeSession(t, sessionOpts{Dir: dir2, Timeout: 3 * time.Minute}, probe{"pad dirs", "mkdir d && cd d && seq -w 0 50001 | xargs mkdir && echo padded"})
	wantOK(t, res, "pad dirs", "padded")
	if !strings.Contains(r3.Stderr(), "the look for such files stopped after") {
		t.Errorf("opened path: 50,002 directories did not cut the walk, or the report did not say so:\n%s", indent(r3.Stderr()))
	}
	if !t.Failed() {
		ev.add("50,001 empty files named to sort first: the nested repository behind them was listed at exit, and the next session kept its config read-only (EBUSY), no cut said; 50,002 directories: the report said where its look stopped (opened path)")
	}
}

func rowToolFiles(t *testing.T, ev *evidence) {
	dir := launchDir(t)
	writeFile(t, filepath.Join(dir, ".vscode/settings.json"), "{}\n", 0o644)
	nonce := newNonce(t)
	files := map[string]string{
		".vscode/tasks.json":              "VS Code runs its tasks",
		".vscode/settings.json":           "VS Code and its extensions read it",
		".vscode/mcp.json":                "VS Code starts the MCP servers",
		".cursor/mcp.json":                "Cursor starts the MCP servers",
		".devcontainer/devcontainer.json": "initializeCommand",
		".gemini/settings.json":           "Gemini CLI loads its settings",
		".mise.toml":                      "mise runs its hooks",
		".envrc":                          "direnv runs it",
		".lfsconfig":                      "git-lfs takes its server",
		".pre-commit-config.yaml":         "pre-commit runs the hooks",
		"lefthook.yml":                    "lefthook runs the commands",
		".husky/pre-commit":               "husky's hooks",
		"web/.vscode/tasks.json":          "VS Code runs its tasks",
		"web/.npmrc":                      "npm reads it",
	}
	var sh []string
	for f := range files {
		sh = append(sh, fmt.Sprintf("mkdir -p %s && echo %s > %s", shellQuote(filepath.Dir(f)), nonce, shellQuote(f)))
	}
	res, r := probeSession(t, sessionOpts{Dir: dir}, probe{"write", strings.Join(sh, " && ") + " && echo written"})
	wantOK(t, res, "write", "written")
	for f, loader := range files {
		verb := "new "
		if f == ".vscode/settings.json" {
			verb = "changed "
		}
		if want := verb + filepath.Join(dir, f) + ": "; !strings.Contains(r.Stderr(), want) || !strings.Contains(r.Stderr(), loader) {
			t.Errorf("%s is not listed at exit with what loads it (%q, %q):\n%s", f, want, loader, indent(r.Stderr()))
		}
		// Opened path: the file is on the host with the agent's words in
		// it, for the tool to load.
		if b, err := os.ReadFile(filepath.Join(dir, f)); err != nil || !strings.Contains(string(b), nonce) {
			t.Errorf("opened path: %s does not hold what the agent wrote (%v)", f, err)
		}
	}
	// A session that touches none of them lists none.
	_, quiet := probeSession(t, sessionOpts{Dir: dir}, probe{"work", "echo work > notes.txt"})
	if strings.Contains(quiet.Stderr(), "the agent left files") {
		t.Errorf("a session that changed no tool file listed some:\n%s", indent(quiet.Stderr()))
	}
	if !t.Failed() {
		ev.add("%d tool files written by the agent (VS Code, Cursor, devcontainer, Gemini, mise, direnv, git-lfs, pre-commit, lefthook, husky, npm; nested too) each listed at exit with what loads it; each is on the host with the agent's text (opened path); a session that touched none listed none", len(files))
	}
}

func rowOverlap(t *testing.T, ev *evidence) {
	// The running session's dir has a parent of its own, which holds no
	// config dir (that would refuse it for another reason).
	outer := mkdir(t, "outer-")
	dir := filepath.Join(outer, "project")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	running := startLauncher(t, sessionOpts{Trace: true, Dir: dir, Cmd: agentCmd("touch started; while [ ! -e stop ]; do sleep 0.05; done"), Timeout: 3 * time.Minute})
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644)
			running.wait()
		}
	}
	t.Cleanup(stop)
	if !running.waitFile("started", 60*time.Second) {
		t.Fatal("the running session never started its agent")
	}
	name := running.sessionName()
	before := podmanInventory(t)
	shapes := []struct{ name, dir, want string }{
		{"the same dir", dir, "session " + name + " runs there already"},
		{"a dir that contains it", outer, "it contains " + dir + ", where session " + name + " runs"},
	}
	for _, s := range shapes {
		nonce := newNonce(t)
		// Not runSession: its leftover check would count the running
		// session's objects.
		l := startLauncher(t, sessionOpts{Trace: true, Dir: s.dir, Cmd: agentCmd("echo ran-" + nonce)}).wait()
		l.wantCode(1)
		if !strings.Contains(l.Stderr(), "refusing to mount "+s.dir+": "+s.want) {
			t.Errorf("%s: the refusal does not name the running session and its dir (%q):\n%s", s.name, s.want, indent(l.Stderr()))
		}
		if strings.Contains(l.Stdout(), "ran-"+nonce) {
			t.Errorf("LEAK: %s: a session overlapping a running one ran its agent", s.name)
		}
		// Only what bears the refused launcher's pid is its own: the
		// running session's objects are there throughout.
		for _, obj := range newObjects(before, podmanInventory(t)) {
			if m := sessionPID.FindStringSubmatch(obj); m != nil && m[1] == fmt.Sprint(l.sessionPid()) || strings.Contains(obj, l.HomeVolume) {
				t.Errorf("%s: the refused session created %s", s.name, obj)
			}
		}
	}
	stop()
	running.wantCode(0)
	// Opened path: once the running session ended, the same dir starts.
	nonce := newNonce(t)
	r := runSession(t, sessionOpts{Dir: dir, Cmd: []string{"sh", "-c", "echo ran-" + nonce}})
	wantCode(t, r, 0)
	if !strings.Contains(r.Stdout(), "ran-"+nonce) {
		t.Errorf("opened path: a session in the dir after the running one ended did not run")
	}
	if !t.Failed() {
		ev.add("with session %s running: a session in the same dir and one in its parent each refused (exit 1, naming the session and its dir), no agent ran, nothing created; once it ended, the same dir started (opened path)", name)
	}
}
