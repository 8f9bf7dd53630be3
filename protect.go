package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	spec "github.com/opencontainers/runtime-spec/specs-go"
)

// The launch dir is mounted read-write and keep-id makes the agent's files
// the user's own, so git on the host trusts whatever the agent leaves in a
// repository: core.fsmonitor, core.hooksPath, core.pager, core.sshCommand
// and filter drivers in .git/config, and every file in .git/hooks, run on
// the host at the user's next `git status` (which shell prompts run by
// themselves). Agent settings that a host-side agent loads (.claude/,
// .mcp.json) are the same kind of file. These are mounted read-only over
// the read-write project; what the agent manages to add anyway (a new
// repository, say) is listed when the session ends.

// protectedPaths are the paths, relative to the launch dir, that are
// mounted read-only, and emptyDirs those of them that do not exist yet and
// get an empty read-only directory (a repository without hooks/).
func protectedPaths(root string, t launchTree) (paths, emptyDirs []string) {
	for _, g := range t.gitDirs {
		if isRegular(filepath.Join(root, g, "config")) {
			paths = append(paths, filepath.Join(g, "config"))
		}
		if fi, err := os.Lstat(filepath.Join(root, g, "hooks")); err == nil && fi.IsDir() {
			paths = append(paths, filepath.Join(g, "hooks"))
		} else if os.IsNotExist(err) {
			emptyDirs = append(emptyDirs, filepath.Join(g, "hooks"))
		}
		worktrees, _ := os.ReadDir(filepath.Join(root, g, "worktrees"))
		for _, w := range worktrees {
			if p := filepath.Join(g, "worktrees", w.Name(), "config.worktree"); isRegular(filepath.Join(root, p)) {
				paths = append(paths, p)
			}
		}
	}
	paths = append(paths, t.gitFiles...)
	paths = append(paths, t.settings...)
	return paths, emptyDirs
}

func isRegular(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode().IsRegular()
}

// protectionMounts mounts each protected path read-only at the same path
// in the sandbox. Every directory between the launch dir and a protected
// path is mounted onto itself as well: a mount point cannot be renamed or
// removed, so the agent cannot move a repository aside and put one of its
// own in its place. Parents come before children. Where a repository has
// no hooks/, an empty read-only tmpfs takes its place.
func protectionMounts(root string, paths, emptyDirs []string) []spec.Mount {
	type m struct {
		rel string
		ro  bool
		src string
	}
	byPath := map[string]m{}
	for _, p := range append(slices.Clone(paths), emptyDirs...) {
		for dir := filepath.Dir(p); dir != "." && dir != "/"; dir = filepath.Dir(dir) {
			if _, ok := byPath[dir]; !ok {
				byPath[dir] = m{rel: dir, src: filepath.Join(root, dir)}
			}
		}
	}
	for _, p := range paths {
		byPath[p] = m{rel: p, ro: true, src: filepath.Join(root, p)}
	}
	for _, p := range emptyDirs {
		byPath[p] = m{rel: p, ro: true}
	}
	all := make([]m, 0, len(byPath))
	for _, v := range byPath {
		all = append(all, v)
	}
	sort.Slice(all, func(i, j int) bool {
		di, dj := strings.Count(all[i].rel, "/"), strings.Count(all[j].rel, "/")
		if di != dj {
			return di < dj
		}
		return all[i].rel < all[j].rel
	})
	var out []spec.Mount
	for _, v := range all {
		dest := filepath.Join(root, v.rel)
		switch {
		case v.src == "":
			out = append(out, spec.Mount{Type: "tmpfs", Source: "tmpfs", Destination: dest, Options: []string{"ro", "nosuid", "nodev", "noexec"}})
		case v.ro:
			out = append(out, spec.Mount{Type: "bind", Source: v.src, Destination: dest, Options: []string{"rbind", "ro"}})
		default:
			out = append(out, spec.Mount{Type: "bind", Source: v.src, Destination: dest, Options: []string{"rbind"}})
		}
	}
	return out
}

// fileStamps maps each file that git or a host-side agent would run or
// load from to a digest of its content: taken at start and at exit, the
// difference is what the agent changed or added.
type fileStamps map[string]string

func stampTree(root string, t launchTree) fileStamps {
	st := fileStamps{}
	add := func(rel string) {
		if d, ok := digestFile(filepath.Join(root, rel)); ok {
			st[rel] = d
		}
	}
	for _, g := range t.gitDirs {
		// A repository counts even before it has a config: its mere
		// appearance is worth a look.
		st[g+"/"] = "dir"
		add(filepath.Join(g, "config"))
		hooks, _ := os.ReadDir(filepath.Join(root, g, "hooks"))
		for _, e := range hooks {
			add(filepath.Join(g, "hooks", e.Name()))
		}
		worktrees, _ := os.ReadDir(filepath.Join(root, g, "worktrees"))
		for _, w := range worktrees {
			add(filepath.Join(g, "worktrees", w.Name(), "config.worktree"))
		}
	}
	for _, f := range t.gitFiles {
		add(f)
	}
	for _, s := range t.settings {
		_ = filepath.WalkDir(filepath.Join(root, s), func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				rel, _ := filepath.Rel(root, p)
				add(rel)
			}
			return nil
		})
	}
	return st
}

// digestFile hashes a regular file (a symlink is hashed as its target
// path: git follows it).
func digestFile(p string) (string, bool) {
	fi, err := os.Lstat(p)
	if err != nil {
		return "", false
	}
	h := sha256.New()
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			return "", false
		}
		io.WriteString(h, "link:"+target)
	case fi.Mode().IsRegular():
		f, err := os.Open(p)
		if err != nil {
			return "", false
		}
		defer f.Close()
		// Hooks and configs are small; a huge one is still bounded.
		if _, err := io.Copy(h, io.LimitReader(f, 8<<20)); err != nil {
			return "", false
		}
		fmt.Fprintf(h, "mode:%o", fi.Mode().Perm())
	default:
		return "", false
	}
	return hex.EncodeToString(h.Sum(nil)), true
}

// changedFiles lists what is new or different in after.
func changedFiles(before, after fileStamps) []string {
	var out []string
	for p, d := range after {
		if before[p] != d {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// hostRunSummary tells the user, at the end of a session, which files that
// git or an agent on the host would run the agent added or changed, with
// the commands that show what they would do. Empty when there are none.
func hostRunSummary(root string, changed []string) string {
	if len(changed) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("agent-sandbox: the agent added or changed files that git or an agent on this machine would run or load; look at them before you run git or claude there:\n")
	repos := map[string]bool{}
	var newRepos []string
	for _, p := range changed {
		if strings.HasSuffix(p, "/") {
			newRepos = append(newRepos, p)
		}
	}
	for _, p := range changed {
		// A new repository is named once, not file by file.
		if slices.ContainsFunc(newRepos, func(r string) bool { return p != r && strings.HasPrefix(p, r) }) {
			continue
		}
		if dir, ok := strings.CutSuffix(p, "/"); ok {
			fmt.Fprintf(&b, "  new repository %s\n", filepath.Join(root, dir))
		} else {
			fmt.Fprintf(&b, "  %s\n", filepath.Join(root, p))
		}
		if i := strings.Index(p, ".git"); i >= 0 {
			repos[filepath.Join(root, p[:i])] = true
		}
	}
	for _, r := range slices.Sorted(maps.Keys(repos)) {
		fmt.Fprintf(&b, "  check: git -C %s config --list --show-origin; ls -la %s\n", r, filepath.Join(r, ".git", "hooks"))
	}
	return b.String()
}

// leftForHost rescans the launch dir at the end of a session and lists
// what the agent added or changed there that the host would run.
func leftForHost(cfg sessionConfig) []string {
	t, err := scanLaunchDir(cfg.launchDir, launchScanBound)
	if err != nil {
		return nil
	}
	return changedFiles(cfg.stamps, stampTree(cfg.launchDir, t))
}
