package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	// Everything under the runtime dir is the user's programs' runtime
	// state, the sessions' podman API socket among it: a launch dir there
	// could mount a socket that appears after the scan.
	if rt := set.runtimeDir; rt != "" && inside(pwd, realpath(rt)) {
		return fmt.Errorf("refusing to mount %s: it lies inside $XDG_RUNTIME_DIR, where programs keep sockets the agent could connect to (podman's, agent-sandbox's own API service); start from a project directory", pwd)
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
		dirs = append(dirs, socketDir{d, "$XDG_RUNTIME_DIR", sockets + " (D-Bus, podman, agent-sandbox's own API service)"})
	}
	return dirs
}

// inside reports whether path p is dir or lies under it.
func inside(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
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
