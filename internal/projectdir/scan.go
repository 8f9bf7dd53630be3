package projectdir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Bound limits a walk of the launch directory. It counts directories, not
// files: a million empty files cost one directory's read and cannot push
// a repository out of the walk's reach; a walk that stops early says so.
type Bound struct {
	Dirs int
	Time time.Duration
}

// Tree is what a walk of the launch directory found, as paths relative to
// it.
type Tree struct {
	// Special are sockets, named pipes and device nodes: a host program
	// listening or reading there would be reachable from the sandbox.
	Special []Special
	// Links are symbolic links where a protection needs a real file or
	// directory; a session is refused while one is there.
	Links []Link
	Repos []Repo
	// GitFiles are ".git" files, which point git at a directory.
	GitFiles []string
	// Settings are agent settings that an agent on the host loads:
	// ".claude" dirs and ".mcp.json" files.
	Settings []string
	// Tools are the files and dirs of the tool table present in the tree.
	Tools []string
	// Dirs is how many directories the walk read; Cut says why it stopped
	// before the end, "" when it saw everything.
	Dirs int
	Cut  string
}

// Special is a file that is not data: a socket, a named pipe, a device.
type Special struct{ Path, Kind string }

func specialKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSocket != 0:
		return "the unix socket"
	case m&fs.ModeNamedPipe != 0:
		return "the named pipe"
	case m&(fs.ModeDevice|fs.ModeCharDevice) != 0:
		return "the device node"
	}
	return ""
}

// Link is a symbolic link that the host's git or an agent would follow.
type Link struct {
	Path, Target string
	// Role is what the path is, for the refusal: "a repository's git dir".
	Role string
}

// Repo is a git directory and what its config points to inside the
// launch dir.
type Repo struct {
	Dir string
	// WorkTree is where git runs hooks and reads the work tree; "" for a
	// bare repository.
	WorkTree string
	// Files are what git reads config or the place of config and hooks
	// from that exist now: config, commondir, config.worktree and the
	// worktrees' commondir, gitdir and config.worktree.
	Files []string
	// Hooks are the hook directories git runs hooks from: hooks/ and the
	// core.hooksPath targets inside the launch dir, existing or not.
	Hooks []string
	// Includes are include.path and includeIf targets inside the launch
	// dir, existing or not (git skips a missing one, so the agent could
	// create it).
	Includes []string
	// WorktreeConfig is extensions.worktreeConfig: git reads
	// config.worktree.
	WorktreeConfig bool
}

type walker struct {
	r        *Root
	t        Tree
	home     string
	deadline time.Time
	bound    Bound
	repos    map[string]bool
}

// Scan walks the tree breadth first, up to bound, without following a
// link. home is the user's home directory, for config paths that start
// with "~/" (they lie outside the launch dir, which never holds $HOME).
func Scan(r *Root, bound Bound, home string) (Tree, error) {
	w := &walker{r: r, home: home, bound: bound, deadline: time.Now().Add(bound.Time), repos: map[string]bool{}}
	err := w.walk()
	return w.t, err
}

func (w *walker) walk() error {
	queue := []string{"."}
	for len(queue) > 0 {
		dir := queue[0]
		queue = queue[1:]
		if w.t.Dirs >= w.bound.Dirs {
			if !mutated("padding-hides") {
				w.t.Cut = fmt.Sprintf("after %d directories", w.t.Dirs)
			}
			return nil
		}
		w.t.Dirs++
		sub, err := w.visit(dir)
		if err != nil {
			if dir == "." {
				return fmt.Errorf("cannot read the launch directory %s: %w", w.r.Path, err)
			}
			// What the user cannot read, the agent (the same uid) cannot
			// either.
			if errors.Is(err, errCut) {
				return nil
			}
			continue
		}
		queue = append(queue, sub...)
	}
	return nil
}

var errCut = errors.New("the walk's time ran out")

// visit reads one directory by name and type alone and returns the
// subdirectories to walk.
func (w *walker) visit(dir string) ([]string, error) {
	var sub []string
	bare := map[string]bool{}
	cut := false
	err := w.r.readDirChunks(dir, func(entries []os.DirEntry) bool {
		if time.Now().After(w.deadline) {
			cut = true
			return false
		}
		if mutated("padding-hides") {
			// Before issue 19 the bound counted every entry, files too.
			if w.t.Dirs += len(entries); w.t.Dirs > w.bound.Dirs {
				return false
			}
		}
		for _, e := range entries {
			if d := w.entry(dir, e); d != "" {
				sub = append(sub, d)
			}
			if want, ok := bareNeeds[e.Name()]; ok && e.IsDir() == want && e.Type()&fs.ModeSymlink == 0 {
				bare[e.Name()] = true
			}
		}
		return true
	})
	if cut {
		w.t.Cut = fmt.Sprintf("after %s, %d directories in", w.bound.Time, w.t.Dirs)
		return nil, errCut
	}
	if err != nil {
		return nil, err
	}
	if len(bare) == len(bareNeeds) && dir != "." {
		// A bare repository (or a git dir by another name): its hooks run
		// when the user pushes to it.
		w.addRepo(dir)
		return nil, nil
	}
	return sub, nil
}

// bareNeeds is what git itself needs in a git dir: name, is it a dir.
var bareNeeds = map[string]bool{"HEAD": false, "config": false, "objects": true, "refs": true}

// entry files one directory entry and returns it if it is a directory to
// walk.
func (w *walker) entry(dir string, e os.DirEntry) string {
	rel := filepath.Join(dir, e.Name())
	typ := e.Type()
	link := w.isLink(dir, e)
	switch {
	case specialKind(typ) != "":
		w.t.Special = append(w.t.Special, Special{rel, specialKind(typ)})
		return ""
	case e.Name() == ".git" && link:
		w.link(rel, "a repository's git dir (git follows the link)")
	case e.Name() == ".git" && w.isDir(dir, e):
		w.addRepo(rel)
	case e.Name() == ".git" && typ.IsRegular():
		w.t.GitFiles = append(w.t.GitFiles, rel)
		w.followGitFile(rel)
	case e.Name() == ".claude" && link, e.Name() == ".mcp.json" && link:
		w.link(rel, "agent settings (an agent on the host follows the link)")
	case e.Name() == ".claude" && typ.IsDir(), e.Name() == ".mcp.json" && typ.IsRegular():
		w.t.Settings = append(w.t.Settings, rel)
	}
	w.tools(dir, e)
	if typ.IsDir() && e.Name() != ".git" && e.Name() != ".claude" {
		return rel
	}
	return ""
}

// isLink and isDir read an entry's type as the directory gives it; the
// mutation check's links-followed build follows a link instead, as the
// scan did before issue 19.
func (w *walker) isLink(dir string, e os.DirEntry) bool {
	return e.Type()&fs.ModeSymlink != 0 && !w.followed(dir, e)
}

func (w *walker) isDir(dir string, e os.DirEntry) bool {
	return e.IsDir() || w.followed(dir, e)
}

func (w *walker) followed(dir string, e os.DirEntry) bool {
	if !mutated("links-followed") || e.Type()&fs.ModeSymlink == 0 {
		return false
	}
	fi, err := os.Stat(filepath.Join(w.r.Path, dir, e.Name()))
	return err == nil && fi.IsDir()
}

func (w *walker) link(rel, role string) {
	for _, l := range w.t.Links {
		if l.Path == rel {
			return
		}
	}
	target, _ := w.r.Readlink(rel)
	w.t.Links = append(w.t.Links, Link{Path: rel, Target: target, Role: role})
}

// tools records the files of the tool table that start at this entry.
func (w *walker) tools(dir string, e os.DirEntry) {
	for _, tool := range HostTools {
		first, rest, nested := strings.Cut(tool.Path, "/")
		if first != e.Name() {
			continue
		}
		rel := filepath.Join(dir, e.Name())
		if nested && rest != "" {
			if e.Type()&fs.ModeSymlink != 0 || !e.IsDir() {
				continue
			}
			rel = filepath.Join(rel, rest)
			if _, err := w.r.Lstat(rel); err != nil {
				continue
			}
		}
		w.t.Tools = append(w.t.Tools, rel)
	}
}

// addRepo records a git dir: the files git takes config and hooks from,
// its submodules' and worktrees' git dirs, and what its config points to.
func (w *walker) addRepo(g string) {
	if w.repos[g] {
		return
	}
	w.repos[g] = true
	repo := Repo{Dir: g}
	entries, err := w.r.ReadDir(g)
	if err != nil {
		return
	}
	for _, e := range entries {
		rel := filepath.Join(g, e.Name())
		typ := e.Type()
		link := w.isLink(g, e)
		switch name := e.Name(); {
		case specialKind(typ) != "":
			// git's fsmonitor daemon keeps its socket here.
			w.t.Special = append(w.t.Special, Special{rel, specialKind(typ)})
		case indirection[name] && link:
			w.link(rel, "a file git reads config from or through")
		case indirection[name] && typ.IsRegular():
			repo.Files = append(repo.Files, rel)
		case name == "hooks" && link, name == "modules" && link, name == "worktrees" && link:
			w.link(rel, "a directory git runs hooks or takes repositories from")
		case name == "modules" && w.isDir(g, e):
			w.addModules(rel, 0)
		case name == "worktrees" && w.isDir(g, e):
			w.addWorktrees(&repo, rel)
		}
	}
	// A missing hooks/ is still where git looks: it gets an empty
	// read-only directory.
	repo.Hooks = append(repo.Hooks, filepath.Join(g, "hooks"))
	w.readConfig(&repo)
	w.t.Repos = append(w.t.Repos, repo)
}

// indirection are the files in a git dir through which git takes its
// config or the place of its config and hooks.
var indirection = map[string]bool{"config": true, "commondir": true, "config.worktree": true}

func (w *walker) addWorktrees(repo *Repo, rel string) {
	entries, err := w.r.ReadDir(rel)
	if err != nil {
		return
	}
	for _, e := range entries {
		wt := filepath.Join(rel, e.Name())
		if w.isLink(rel, e) {
			w.link(wt, "a worktree's git dir")
			continue
		}
		if !w.isDir(rel, e) {
			continue
		}
		files, err := w.r.ReadDir(wt)
		if err != nil {
			continue
		}
		for _, f := range files {
			name := f.Name()
			if name != "commondir" && name != "gitdir" && name != "config.worktree" {
				continue
			}
			p := filepath.Join(wt, name)
			switch {
			case f.Type()&fs.ModeSymlink != 0:
				w.link(p, "a file git reads config from or through")
			case f.Type().IsRegular():
				repo.Files = append(repo.Files, p)
			}
		}
	}
}

// addModules finds the submodules' git dirs under modules/, nested as
// deep as submodules are.
func (w *walker) addModules(rel string, depth int) {
	entries, err := w.r.ReadDir(rel)
	if err != nil || depth > 8 {
		return
	}
	for _, e := range entries {
		sub := filepath.Join(rel, e.Name())
		if w.isLink(rel, e) {
			w.link(sub, "a submodule's git dir")
			continue
		}
		if !w.isDir(rel, e) {
			continue
		}
		if _, err := w.r.Lstat(filepath.Join(sub, "HEAD")); err == nil {
			w.addRepo(sub)
			continue
		}
		// A submodule named with a slash ("libs/x") nests plain dirs.
		w.addModules(sub, depth+1)
	}
}

// followGitFile adds the git dir a ".git" file names, when it lies in the
// launch dir; one that lies outside is not mounted, and git inside cannot
// reach it.
func (w *walker) followGitFile(rel string) {
	data, err := w.r.ReadFile(rel, 4096)
	if err != nil {
		return
	}
	target, ok := strings.CutPrefix(strings.TrimSpace(string(data)), "gitdir:")
	if !ok {
		return
	}
	p, inside := w.inside(filepath.Dir(rel), strings.TrimSpace(target))
	if !inside {
		return
	}
	info, err := w.r.Lstat(p)
	switch {
	case errors.Is(err, ErrLink):
		w.link(rel, "a .git file whose git dir lies behind a link")
	case err == nil && info.IsLink():
		w.link(p, "the git dir a .git file names")
	case err == nil && info.IsDir():
		w.addRepo(p)
	}
}

// inside resolves a path as git would from base (relative to the launch
// dir), without links, and says whether it lies in the launch dir.
func (w *walker) inside(base, p string) (string, bool) {
	switch {
	case p == "~" || strings.HasPrefix(p, "~/"):
		if w.home == "" {
			return "", false
		}
		p = filepath.Join(w.home, strings.TrimPrefix(p, "~"))
	case !filepath.IsAbs(p):
		p = filepath.Join(w.r.Path, base, p)
	}
	rel, err := filepath.Rel(w.r.Path, filepath.Clean(p))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return rel, true
}

// readConfig reads what a repository's config points to inside the launch
// dir: core.hooksPath, core.worktree, includes (followed inside the launch
// dir, as deep as git follows them) and extensions.worktreeConfig.
func (w *walker) readConfig(repo *Repo) {
	if filepath.Base(repo.Dir) == ".git" {
		repo.WorkTree = filepath.Dir(repo.Dir)
	}
	var hooksPath string
	configs := []string{filepath.Join(repo.Dir, "config")}
	for _, f := range repo.Files {
		if filepath.Base(f) == "config.worktree" && filepath.Dir(f) == repo.Dir {
			configs = append(configs, f)
		}
	}
	seen := map[string]bool{}
	for i := 0; i < len(configs) && i < 32; i++ {
		file := configs[i]
		if seen[file] {
			continue
		}
		seen[file] = true
		data, err := w.r.ReadFile(file, 1<<20)
		if err != nil {
			continue
		}
		for _, e := range parseGitConfig(data) {
			section, _, key := e.parts()
			switch {
			case e.Name == "core.hookspath":
				hooksPath = e.Value
			case e.Name == "core.worktree":
				if p, ok := w.inside(repo.Dir, e.Value); ok {
					repo.WorkTree = p
				}
			case e.Name == "extensions.worktreeconfig":
				repo.WorktreeConfig = isTrue(e)
			case (e.Name == "include.path" || section == "includeif" && key == "path") && e.Value != "":
				// Relative to the file that includes it.
				p, ok := w.inside(filepath.Dir(file), e.Value)
				if !ok {
					continue
				}
				repo.Includes = append(repo.Includes, p)
				configs = append(configs, p)
			}
		}
	}
	if hooksPath != "" {
		base := repo.WorkTree
		if base == "" {
			base = repo.Dir
		}
		if p, ok := w.inside(base, hooksPath); ok {
			repo.Hooks = append(repo.Hooks, p)
		}
	}
	for _, p := range append(slicesClone(repo.Includes), repo.Hooks...) {
		if l := w.r.firstLink(p); l != "" {
			w.link(l, "a place git reads config or runs hooks from")
		}
	}
}

func isTrue(e ConfigEntry) bool {
	switch strings.ToLower(e.Value) {
	case "true", "yes", "on", "1":
		return true
	}
	return e.Bare
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }
