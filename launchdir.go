package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// checkLaunchDir refuses launch directories that would mount into the
// sandbox, read-write, something the agent could use to reach beyond it:
// $HOME, the config or the allowlist (to widen its own allowlist), or a
// directory where other programs keep their sockets.
func checkLaunchDir(pwd string, set settings) error {
	pwd = realpath(pwd)
	for _, dir := range socketDirs(set) {
		if inside(realpath(dir.path), pwd) {
			return fmt.Errorf("refusing to mount %s: it is or contains %s, where %s; start from a project directory", pwd, dir.name, dir.why)
		}
	}
	if home := set.home; home != "" && inside(realpath(home), pwd) {
		return fmt.Errorf("refusing to mount %s: it is or contains $HOME; start from a project directory", pwd)
	}
	allowlist := set.allowlist
	for _, dir := range []string{set.configDir, filepath.Dir(allowlist), filepath.Dir(realpath(allowlist))} {
		if dir = realpath(dir); inside(dir, pwd) {
			return fmt.Errorf("refusing to mount %s: it contains %s, which the agent must not change; start from a project directory", pwd, dir)
		}
	}
	return nil
}

type socketDir struct{ path, name, why string }

// socketDirs are where the system and the user's programs keep unix
// sockets (tmux, X11, ssh-agent, D-Bus, podman's own API): a pathname
// socket works across network namespaces, so mounting one of these would
// hand the agent a way to the programs that listen there.
func socketDirs(set settings) []socketDir {
	const sockets = "programs keep sockets the agent could connect to"
	dirs := []socketDir{
		{"/", "/", "the whole machine is"},
		{"/tmp", "/tmp", sockets + " (tmux, X11, ssh-agent)"},
		{"/var/tmp", "/var/tmp", sockets},
		{"/run", "/run", sockets + " (D-Bus, podman)"},
		{"/dev/shm", "/dev/shm", sockets},
	}
	if d := set.tmpDir; d != "" {
		dirs = append(dirs, socketDir{d, "$TMPDIR", sockets})
	}
	if d := set.runtimeDir; d != "" {
		dirs = append(dirs, socketDir{d, "$XDG_RUNTIME_DIR", sockets + " (D-Bus, podman, this session's own API service)"})
	}
	return dirs
}

// inside reports whether path p is dir or lies under it.
func inside(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// scanBound limits the walk of the launch directory at start and at exit,
// so that a huge tree costs little: breadth first, so what lies near the
// top (where repositories and agent settings live) is always seen.
type scanBound struct {
	entries int
	time    time.Duration
}

var launchScanBound = scanBound{entries: 50_000, time: 500 * time.Millisecond}

// launchTree is what a walk of the launch directory found, as paths
// relative to it.
type launchTree struct {
	sockets []string
	// gitDirs are repositories' git directories (".git" and the submodule
	// dirs under ".git/modules"), gitFiles ".git" files that point git at
	// a directory elsewhere.
	gitDirs, gitFiles []string
	// settings are project-scoped agent settings that an agent on the
	// host loads and acts on: ".claude" dirs and ".mcp.json" files.
	settings []string
	// truncated is set when the walk stopped at its bound.
	truncated bool
}

// scanLaunchDir walks root breadth first without following links, up to
// bound. Git directories are not walked as trees: only the parts git
// runs or reads configuration from are looked at.
func scanLaunchDir(root string, bound scanBound) (launchTree, error) {
	var t launchTree
	deadline := time.Now().Add(bound.time)
	seen := 0
	queue := []string{"."}
	for len(queue) > 0 {
		dir := queue[0]
		queue = queue[1:]
		entries, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil {
			if dir == "." {
				return t, fmt.Errorf("cannot read the launch directory %s: %w", root, err)
			}
			// What the user cannot read, the agent (the same uid) cannot
			// either.
			continue
		}
		if isBareRepo(entries) {
			// A bare repository's hooks run on the host when the user
			// pushes to it.
			t.addGitDir(root, dir)
			continue
		}
		for _, e := range entries {
			if seen++; seen > bound.entries || time.Now().After(deadline) {
				t.truncated = true
				return t, nil
			}
			rel := filepath.Join(dir, e.Name())
			switch typ := e.Type(); {
			case typ&fs.ModeSocket != 0:
				t.sockets = append(t.sockets, rel)
			case e.Name() == ".git" && typ.IsRegular():
				t.gitFiles = append(t.gitFiles, rel)
			case e.Name() == ".git" && typ.IsDir():
				t.addGitDir(root, rel)
			case e.Name() == ".claude" && typ.IsDir():
				t.settings = append(t.settings, rel)
			case e.Name() == ".mcp.json" && typ.IsRegular():
				t.settings = append(t.settings, rel)
			case typ.IsDir():
				queue = append(queue, rel)
			}
		}
	}
	return t, nil
}

// isBareRepo tells a bare repository (or a git dir under another name)
// by what git itself needs in one.
func isBareRepo(entries []os.DirEntry) bool {
	need := map[string]bool{"HEAD": false, "config": false, "objects": true, "refs": true}
	found := 0
	for _, e := range entries {
		if dir, ok := need[e.Name()]; ok && e.IsDir() == dir {
			found++
		}
	}
	return found == len(need)
}

// addGitDir records a git directory and the submodules' git directories
// under its modules/ (nested as deep as submodules are).
func (t *launchTree) addGitDir(root, rel string) {
	t.gitDirs = append(t.gitDirs, rel)
	entries, err := os.ReadDir(filepath.Join(root, rel))
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Type()&fs.ModeSocket != 0 {
			// git's fsmonitor daemon keeps its socket here.
			t.sockets = append(t.sockets, filepath.Join(rel, e.Name()))
		}
	}
	t.addModules(root, filepath.Join(rel, "modules"), 0)
}

func (t *launchTree) addModules(root, rel string, depth int) {
	entries, err := os.ReadDir(filepath.Join(root, rel))
	if err != nil || depth > 8 {
		return
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		sub := filepath.Join(rel, e.Name())
		if _, err := os.Lstat(filepath.Join(root, sub, "HEAD")); err == nil {
			t.addGitDir(root, sub)
			continue
		}
		// A submodule named with a slash ("libs/x") nests plain dirs.
		t.addModules(root, sub, depth+1)
	}
}

// errSocketInLaunchDir refuses a launch dir that holds a unix socket.
func socketRefusal(root string, t launchTree) error {
	if len(t.sockets) == 0 {
		return nil
	}
	more := ""
	if n := len(t.sockets) - 1; n > 0 {
		more = fmt.Sprintf(" (and %d more)", n)
	}
	return fmt.Errorf("refusing to mount %s: it holds the unix socket %s%s, through which the agent could reach the program that listens on it; "+
		"start from a directory without sockets, or move the socket out", root, filepath.Join(root, t.sockets[0]), more)
}

// enclosingSession refuses a launch dir inside the launch dir of another
// running session: that session's agent can swap a component of this
// path for a symlink between the check and the mount, and have this
// session mount whatever the link points to.
func enclosingSession(dir string, objs []labelledObject, alive func(owner string) bool) error {
	for _, o := range objs {
		other := o.labels[labelDir]
		if o.kind != "network" || other == "" || other == dir || !inside(dir, other) || !alive(o.labels[labelOwner]) {
			continue
		}
		return fmt.Errorf("refusing to mount %s: it lies inside %s, where session %s runs, and that session's agent could change the path while this one mounts it; "+
			"start from %s or from a directory outside it, or end that session first", dir, other, o.labels[labelSession], other)
	}
	return nil
}

// realpath resolves every symlink in p the way `realpath -m` does: parts
// that do not exist are kept as written, and ".." steps back from the
// resolved path, not the written one.
func realpath(p string) string {
	return resolvePath(p, 0)
}

func resolvePath(p string, depth int) string {
	if !filepath.IsAbs(p) {
		wd, _ := os.Getwd()
		p = wd + "/" + p
	}
	parts := strings.Split(p, "/")
	resolved := "/"
	for i, part := range parts {
		if part == "" || part == "." {
			continue
		}
		if part == ".." {
			resolved = filepath.Dir(resolved)
			continue
		}
		next := filepath.Join(resolved, part)
		if real, err := filepath.EvalSymlinks(next); err == nil {
			resolved = real
			continue
		}
		rest := strings.Join(parts[i+1:], "/")
		// A dangling link still points somewhere: follow it by hand.
		if target, err := os.Readlink(next); err == nil && depth < 40 {
			if !filepath.IsAbs(target) {
				target = resolved + "/" + target
			}
			return resolvePath(target+"/"+rest, depth+1)
		}
		return filepath.Join(next, rest)
	}
	return resolved
}
