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
// files: the walk reads names and types alone (getdents, no stat), so a
// million empty files cost little and cannot push a repository out of
// reach; a walk that stops early says so, and at start refuses the tree.
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
	// Problems are what the scan could not read and so cannot vouch for
	// (a directory made unreadable, a config too large): a session is
	// refused while one is there, and the exit report names them.
	Problems []string
	Repos    []Repo
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
	// worktrees' commondir, gitdir and config.worktree; and the state of
	// a rebase or cherry-pick in progress, whose exec lines run on
	// `--continue`.
	Files []string
	// Worktrees are the worktrees' git dirs (worktrees/NAME).
	Worktrees []string
	// Hooks are the hook directories git runs hooks from: hooks/ and the
	// core.hooksPath targets inside the launch dir, existing or not.
	Hooks []string
	// Includes are include.path and includeIf targets inside the launch
	// dir, existing or not (git skips a missing one, so the agent could
	// create it).
	Includes []string
	// HookTargets are the files inside the launch dir that links in a
	// hook dir point to: git runs them as hooks.
	HookTargets []string
	// WorktreeConfig is extensions.worktreeConfig: git reads
	// config.worktree.
	WorktreeConfig bool
	// PushURLs are where `git push` in this repository sends by the
	// user's own config (pushRemotes): the session's GitHub writes are
	// scoped to the repositories they name.
	PushURLs []string
}

// Host is what the scan needs to know of the user's machine.
type Host struct {
	// Home is the user's home directory, for config paths that start with
	// "~/" (they lie outside the launch dir, which never holds $HOME).
	Home string
	// GitConfigs are the user's own git config files (~/.gitconfig,
	// $XDG_CONFIG_HOME/git/config): a core.hooksPath there that is
	// relative sends every repository's hooks into its work tree.
	GitConfigs []string
	// Forbidden are places outside the launch dir that the agent can
	// write all the same (podman's storage, which holds the home volume):
	// a git pointer into one of them is never legitimate.
	Forbidden []string
}

type walker struct {
	r    *Root
	t    Tree
	host Host
	// hostRewrites are the url.*.insteadOf and pushInsteadOf rules of the
	// user's own git config, which git applies to every repository's
	// remotes.
	hostRewrites []ConfigEntry
	// hostHooksPath is core.hooksPath from the user's own git config, which
	// applies to every repository that does not set its own.
	hostHooksPath string
	deadline      time.Time
	bound         Bound
	repos         map[string]bool
	// workTrees are the work trees of git dirs reached through a .git
	// file: the file's own dir, where git runs their hooks.
	workTrees map[string]string
}

// maxConfig bounds a git config file the scan reads: git reads any size,
// so a larger one is a problem, not a file read in part.
const maxConfig = 16 << 20

// Scan walks the tree breadth first, up to bound, without following a
// link.
func Scan(r *Root, bound Bound, host Host) (Tree, error) {
	w := &walker{r: r, host: host, bound: bound, deadline: time.Now().Add(bound.Time), repos: map[string]bool{}, workTrees: map[string]string{}}
	for _, f := range host.GitConfigs {
		// The user's own files, outside the tree: read as they are.
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, e := range parseGitConfig(data) {
			if e.Name == "core.hookspath" {
				w.hostHooksPath = e.Value
			}
			if section, _, key := e.parts(); section == "url" && (key == "insteadof" || key == "pushinsteadof") {
				w.hostRewrites = append(w.hostRewrites, e)
			}
		}
	}
	err := w.walk()
	return w.t, err
}

func (w *walker) problem(format string, a ...any) {
	w.t.Problems = append(w.t.Problems, fmt.Sprintf(format, a...))
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
		switch {
		case errors.Is(err, errCut):
			return nil
		case err != nil && dir == ".":
			return fmt.Errorf("cannot read the launch directory %s: %w", w.r.Path, err)
		case err != nil:
			// The user owns the tree, so the agent can make a directory
			// unreadable (chmod 311) to hide what is in it: a directory
			// the scan cannot read is one it cannot vouch for.
			w.problem("%s cannot be read (%v)", Quote(filepath.Join(w.r.Path, dir)), errors.Unwrap(err))
			continue
		}
		queue = append(queue, sub...)
	}
	return nil
}

var errCut = errors.New("the walk's time ran out")

// dent is a directory entry as getdents gives it: name and type.
type dent struct {
	name string
	typ  fs.FileMode
}

func (d dent) Name() string      { return d.name }
func (d dent) Type() fs.FileMode { return d.typ }
func (d dent) IsDir() bool       { return d.typ.IsDir() }

// visit reads one directory by name and type alone and returns the
// subdirectories to walk.
func (w *walker) visit(dir string) ([]string, error) {
	var sub []string
	marks := gitMarks{}
	count := 0
	err := w.r.scanNames(dir, func(name []byte, typ fs.FileMode) bool {
		if count++; count%4096 == 0 && time.Now().After(w.deadline) {
			return false
		}
		if mutated("padding-hides") {
			// Before issue 19 the bound counted every entry, files too.
			if w.t.Dirs++; w.t.Dirs > w.bound.Dirs {
				return false
			}
		}
		if typ.IsRegular() && !interesting(name) {
			return true
		}
		e := dent{string(name), typ}
		marks.see(e)
		if d := w.entry(dir, e); d != "" {
			sub = append(sub, d)
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	if time.Now().After(w.deadline) {
		w.t.Cut = fmt.Sprintf("after %s, %d directories in", w.bound.Time, w.t.Dirs)
		return nil, errCut
	}
	if marks.gitDir() {
		// A bare repository (or a git dir by another name, the launch dir
		// itself included): its hooks run when the user pushes to it, and
		// git in a directory below it may take it for its repository.
		w.addRepo(dir)
		if dir != "." {
			return nil, nil
		}
	}
	return sub, nil
}

// interesting are the file names the walk looks at; every other regular
// file is passed over without a string being made of its name.
func interesting(name []byte) bool {
	switch string(name) {
	case ".git", ".mcp.json", "HEAD", "commondir", "config":
		return true
	}
	for _, t := range HostTools {
		first, _, _ := strings.Cut(t.Path, "/")
		if string(name) == first {
			return true
		}
	}
	return false
}

// gitMarks are what makes a directory a git dir, as git's own
// is_git_directory sees it: a HEAD (a file or a link), and objects/ and
// refs/ here or in the common dir a commondir file names.
type gitMarks struct{ head, objects, refs, commondir bool }

func (m *gitMarks) see(e dent) {
	link := e.typ&fs.ModeSymlink != 0
	switch e.name {
	case "HEAD":
		m.head = e.typ.IsRegular() || link
	case "objects":
		m.objects = e.typ.IsDir()
	case "refs":
		m.refs = e.typ.IsDir()
	case "commondir":
		m.commondir = e.typ.IsRegular() || link
	}
}

func (m gitMarks) gitDir() bool { return m.head && (m.objects && m.refs || m.commondir) }

// entry files one directory entry and returns it if it is a directory to
// walk.
func (w *walker) entry(dir string, e dent) string {
	rel := filepath.Join(dir, e.name)
	typ := e.typ
	link := w.isLink(dir, e)
	switch {
	case specialKind(typ) != "":
		w.t.Special = append(w.t.Special, Special{rel, specialKind(typ)})
		return ""
	case e.name == ".git" && link:
		w.link(rel, "a repository's git dir (git follows the link)")
	case e.name == ".git" && w.isDir(dir, e):
		w.addRepo(rel)
	case e.name == ".git" && typ.IsRegular():
		w.t.GitFiles = append(w.t.GitFiles, rel)
		w.followGitFile(rel)
	case e.name == ".claude" && link, e.name == ".mcp.json" && link:
		w.link(rel, "agent settings (an agent on the host follows the link)")
	case e.name == ".claude" && typ.IsDir(), e.name == ".mcp.json" && typ.IsRegular():
		w.t.Settings = append(w.t.Settings, rel)
	}
	w.tools(dir, e)
	if typ.IsDir() && e.name != ".git" && e.name != ".claude" {
		return rel
	}
	return ""
}

// isLink and isDir read an entry's type as the directory gives it; the
// mutation check's links-followed build follows a link instead, as the
// scan did before issue 19.
func (w *walker) isLink(dir string, e entryLike) bool {
	return e.Type()&fs.ModeSymlink != 0 && !w.followed(dir, e)
}

func (w *walker) isDir(dir string, e entryLike) bool {
	return e.IsDir() || w.followed(dir, e)
}

type entryLike interface {
	Name() string
	Type() fs.FileMode
	IsDir() bool
}

func (w *walker) followed(dir string, e entryLike) bool {
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

// tools records the files of the tool table that start at this entry; a
// tool dir that is a link (.vscode to elsewhere) is recorded as the link.
func (w *walker) tools(dir string, e dent) {
	for _, tool := range HostTools {
		first, rest, nested := strings.Cut(tool.Path, "/")
		if first != e.name {
			continue
		}
		rel := filepath.Join(dir, e.name)
		if nested && rest != "" {
			if e.typ&fs.ModeSymlink != 0 {
				w.t.Tools = append(w.t.Tools, rel)
				continue
			}
			if !e.typ.IsDir() {
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
		w.problem("%s cannot be read (%v)", Quote(filepath.Join(w.r.Path, g)), errors.Unwrap(err))
		return
	}
	var commondir string
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
			if name == "commondir" {
				commondir = rel
			}
		case name == "hooks" && link, name == "modules" && link, name == "worktrees" && link:
			w.link(rel, "a directory git runs hooks or takes repositories from")
		case name == "modules" && w.isDir(g, e):
			w.addModules(rel, 0)
		case name == "worktrees" && w.isDir(g, e):
			w.addWorktrees(&repo, rel)
		case sequencer[name]:
			w.addSequencer(&repo, rel)
		}
	}
	// A missing hooks/ is still where git looks: it gets an empty
	// read-only directory.
	repo.Hooks = append(repo.Hooks, filepath.Join(g, "hooks"))
	w.readConfig(&repo)
	w.t.Repos = append(w.t.Repos, repo)
	if commondir != "" {
		w.followPointer(commondir, g, "the common dir a commondir names")
	}
}

// indirection are the files in a git dir through which git takes its
// config or the place of its config and hooks.
var indirection = map[string]bool{"config": true, "commondir": true, "config.worktree": true}

// sequencer are the dirs of a rebase, cherry-pick or revert in progress:
// their todo lists' exec lines run on the host's `git rebase --continue`.
var sequencer = map[string]bool{"rebase-merge": true, "rebase-apply": true, "sequencer": true}

func (w *walker) addSequencer(repo *Repo, rel string) {
	entries, err := w.r.ReadDir(rel)
	if err != nil {
		return
	}
	for _, e := range entries {
		if n := e.Name(); e.Type().IsRegular() && (strings.Contains(n, "todo") || n == "done") {
			repo.Files = append(repo.Files, filepath.Join(rel, n))
		}
	}
}

func (w *walker) addWorktrees(repo *Repo, rel string) {
	entries, err := w.r.ReadDir(rel)
	if err != nil {
		w.problem("%s cannot be read (%v)", Quote(filepath.Join(w.r.Path, rel)), errors.Unwrap(err))
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
		repo.Worktrees = append(repo.Worktrees, wt)
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
// launch dir, with the file's dir as its work tree; one that lies outside
// is not mounted, and git inside cannot reach it, unless it lies where the
// agent writes all the same.
func (w *walker) followGitFile(rel string) {
	data, err := w.r.ReadFile(rel, 4096)
	if err != nil || !strings.HasPrefix(strings.TrimSpace(string(data)), "gitdir:") {
		return
	}
	w.followPointer(rel, filepath.Dir(rel), "the git dir a .git file names")
}

// followPointer reads a file that names a git dir (a .git file, a
// commondir), resolved from base, and adds that dir when it lies in the
// launch dir; it returns the dir's path, or "". A pointer through a link,
// or into a place the agent writes outside the launch dir, is refused.
func (w *walker) followPointer(file, base, role string) string {
	data, err := w.r.ReadFile(file, 4096)
	if err != nil {
		return ""
	}
	target := strings.TrimSpace(string(data))
	target = strings.TrimSpace(strings.TrimPrefix(target, "gitdir:"))
	if abs := w.absolute(base, target); w.forbidden(abs) {
		w.link(file, role+", in "+Quote(abs)+", where the agent writes outside the launch dir")
		return ""
	}
	p, inside, linked := w.inside(base, target)
	switch {
	case linked != "":
		w.link(linked, role+" (reached through this link)")
	case !inside:
	default:
		info, err := w.r.Lstat(p)
		switch {
		case err == nil && info.IsLink():
			w.link(p, role)
		case err == nil && info.IsDir():
			if strings.HasSuffix(file, ".git") && filepath.Base(file) == ".git" {
				w.workTrees[p] = filepath.Dir(file)
			}
			w.addRepo(p)
			return p
		}
	}
	return ""
}

// absolute is p as git resolves it from base (relative to the launch
// dir), lexically.
func (w *walker) absolute(base, p string) string {
	switch {
	case p == "~" || strings.HasPrefix(p, "~/"):
		if w.host.Home == "" {
			return ""
		}
		return filepath.Join(w.host.Home, strings.TrimPrefix(p, "~"))
	case filepath.IsAbs(p):
		return filepath.Clean(p)
	}
	return filepath.Join(w.r.Path, base, p)
}

// forbidden reports whether abs lies where the agent writes although it
// is outside the launch dir.
func (w *walker) forbidden(abs string) bool {
	for _, f := range w.host.Forbidden {
		if abs == f || strings.HasPrefix(abs, strings.TrimSuffix(f, "/")+"/") {
			return true
		}
	}
	return false
}

// inside resolves a path as git would from base (relative to the launch
// dir) and says whether it lies in the launch dir. It goes one component
// at a time, as the kernel does: a ".." steps back from a real directory,
// and a link on the way (which would make the lexical answer wrong) is
// returned in linked.
func (w *walker) inside(base, p string) (rel string, inside bool, linked string) {
	switch {
	case p == "~" || strings.HasPrefix(p, "~/"), filepath.IsAbs(p):
		raw := p
		if !filepath.IsAbs(p) {
			raw = w.host.Home + strings.TrimPrefix(p, "~")
		}
		if r, ok := strings.CutPrefix(raw, strings.TrimSuffix(w.r.Path, "/")+"/"); ok {
			// Below the root as written: walked component by component.
			p, base = r, "."
			break
		}
		// Above the root, the path is the user's: resolved as written.
		abs := w.absolute(base, p)
		r, err := filepath.Rel(w.r.Path, abs)
		if abs == "" || err != nil || r == ".." || strings.HasPrefix(r, "../") {
			return "", false, ""
		}
		p, base = r, "."
	}
	var stack []string
	if base != "." {
		stack = strings.Split(filepath.Clean(base), "/")
	}
	for _, c := range strings.Split(p, "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			if len(stack) == 0 {
				return "", false, ""
			}
			stack = stack[:len(stack)-1]
			continue
		}
		stack = append(stack, c)
		cur := strings.Join(stack, "/")
		if info, err := w.r.Lstat(cur); err == nil && info.IsLink() {
			return cur, true, cur
		}
	}
	if len(stack) == 0 {
		return ".", true, ""
	}
	return strings.Join(stack, "/"), true, ""
}

// readConfig reads what a repository's config points to inside the launch
// dir: core.hooksPath, core.worktree, includes (followed inside the launch
// dir, as deep as git follows them) and extensions.worktreeConfig.
func (w *walker) readConfig(repo *Repo) {
	if filepath.Base(repo.Dir) == ".git" {
		repo.WorkTree = filepath.Dir(repo.Dir)
	} else if wt, ok := w.workTrees[repo.Dir]; ok {
		repo.WorkTree = wt
	}
	hooksPath := w.hostHooksPath
	configs := []string{filepath.Join(repo.Dir, "config")}
	for _, f := range repo.Files {
		if filepath.Base(f) == "config.worktree" {
			configs = append(configs, f)
		}
	}
	seen := map[string]bool{}
	remotes := pushRemotes{urls: map[string][]string{}, pushURLs: map[string][]string{}, rewrites: append([]ConfigEntry(nil), w.hostRewrites...)}
	defer func() { repo.PushURLs = remotes.targets() }()
	for i := 0; i < len(configs); i++ {
		file := configs[i]
		if seen[file] {
			continue
		}
		seen[file] = true
		if len(seen) > 64 {
			w.problem("%s includes more than 64 config files: git follows them all, the sandbox does not", Quote(filepath.Join(w.r.Path, repo.Dir)))
			break
		}
		data, err := w.r.ReadFile(file, maxConfig+1)
		if err != nil {
			continue
		}
		if len(data) > maxConfig {
			w.problem("%s is over %d MiB: git reads all of it, the sandbox does not", Quote(filepath.Join(w.r.Path, file)), maxConfig>>20)
			continue
		}
		for _, e := range parseGitConfig(data) {
			section, _, key := e.parts()
			switch {
			case i == 0 && (section == "remote" || section == "branch" || section == "url"):
				remotes.see(e, section, key)
			case e.Name == "core.hookspath":
				hooksPath = e.Value
			case e.Name == "core.worktree":
				if p, ok, linked := w.inside(repo.Dir, e.Value); ok && linked == "" {
					repo.WorkTree = p
				} else if linked != "" {
					w.link(linked, "a place git takes the work tree from")
				}
			case e.Name == "extensions.worktreeconfig":
				repo.WorktreeConfig = isTrue(e)
			case (e.Name == "include.path" || section == "includeif" && key == "path") && e.Value != "":
				// Relative to the file that includes it.
				if abs := w.absolute(filepath.Dir(file), e.Value); w.forbidden(abs) {
					w.link(file, "a config that includes "+Quote(abs)+", where the agent writes outside the launch dir")
					continue
				}
				p, ok, linked := w.inside(filepath.Dir(file), e.Value)
				if linked != "" {
					w.link(linked, "a place git reads config from (reached through this link)")
					continue
				}
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
		p, ok, linked := w.inside(base, hooksPath)
		switch {
		case linked != "":
			w.link(linked, "a place git runs hooks from (reached through this link)")
		case ok:
			repo.Hooks = append(repo.Hooks, p)
		}
	}
	for _, p := range append(slicesClone(repo.Includes), repo.Hooks...) {
		if l := w.r.firstLink(p); l != "" {
			w.link(l, "a place git reads config or runs hooks from")
		}
	}
	w.hookLinks(repo)
}

// pushRemotes collects, from a repository's own config file only (never a
// file it includes, which the agent may have made), the remotes the user
// pushes to: remote.pushDefault (else origin) and each
// branch.*.pushRemote, by their pushurl where one is set (git pushes there
// instead of url), rewritten as git rewrites them (url.*.pushInsteadOf,
// then url.*.insteadOf, from this config and the user's). Other remotes
// (an upstream the user fetches from) are not push targets.
type pushRemotes struct {
	urls, pushURLs map[string][]string
	pushDefault    string
	branchRemotes  []string
	rewrites       []ConfigEntry
}

func (p *pushRemotes) see(e ConfigEntry, section, key string) {
	_, sub, _ := e.parts()
	// An empty value resets the list, as git (2.46 and later) reads it.
	add := func(m map[string][]string) {
		if e.Value == "" {
			m[sub] = nil
			return
		}
		m[sub] = append(m[sub], e.Value)
	}
	switch {
	case section == "remote" && sub == "" && key == "pushdefault":
		p.pushDefault = e.Value
	case section == "remote" && key == "url":
		add(p.urls)
	case section == "remote" && key == "pushurl":
		add(p.pushURLs)
	case section == "branch" && key == "pushremote":
		p.branchRemotes = append(p.branchRemotes, e.Value)
	case section == "url" && (key == "insteadof" || key == "pushinsteadof"):
		p.rewrites = append(p.rewrites, e)
	}
}

func (p *pushRemotes) targets() []string {
	var out []string
	seen := map[string]bool{}
	first := "origin"
	if p.pushDefault != "" {
		first = p.pushDefault
	}
	for _, name := range append([]string{first}, p.branchRemotes...) {
		if seen[name] {
			continue
		}
		seen[name] = true
		if urls := p.pushURLs[name]; len(urls) > 0 {
			// pushInsteadOf does not apply to an explicit pushurl.
			for _, u := range urls {
				out = append(out, p.rewrite(u, false))
			}
			continue
		}
		for _, u := range p.urls[name] {
			out = append(out, p.rewrite(u, true))
		}
	}
	return out
}

// rewrite applies the longest matching url.<base>.pushInsteadOf (for a
// push by url), else the longest url.<base>.insteadOf, as git does.
func (p *pushRemotes) rewrite(u string, push bool) string {
	best := func(key string) (string, int) {
		base, n := "", -1
		for _, e := range p.rewrites {
			_, sub, k := e.parts()
			if k == key && strings.HasPrefix(u, e.Value) && len(e.Value) > n {
				base, n = sub, len(e.Value)
			}
		}
		return base, n
	}
	if push {
		if base, n := best("pushinsteadof"); n >= 0 {
			return base + u[n:]
		}
	}
	if base, n := best("insteadof"); n >= 0 {
		return base + u[n:]
	}
	return u
}

// hookLinks finds the links in a repository's hook dirs: git runs what
// they point to, so a target inside the launch dir is a hook too.
func (w *walker) hookLinks(repo *Repo) {
	for _, h := range repo.Hooks {
		entries, err := w.r.ReadDir(h)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if e.Type()&fs.ModeSymlink == 0 {
				continue
			}
			link := filepath.Join(h, e.Name())
			target, err := w.r.Readlink(link)
			if err != nil {
				continue
			}
			p, inside, linked := w.inside(h, target)
			if linked != "" {
				w.link(link, "a hook whose target lies behind another link")
				continue
			}
			if !inside {
				continue
			}
			info, err := w.r.Lstat(p)
			switch {
			case err == nil && info.IsLink():
				w.link(link, "a hook whose target is another link")
			case err == nil && info.IsRegular():
				repo.HookTargets = append(repo.HookTargets, p)
			}
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
