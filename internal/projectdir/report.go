package projectdir

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Stamps maps each file in the tree that the host would run or load by
// itself to a digest of what it is: taken at start and at exit, the
// difference is what the agent added or changed.
type Stamps map[string]string

// repoMark is a repository's own stamp: its mere appearance counts.
const repoMark = "repository"

// Stamp digests what the host would run or load in t. What it reads is
// bounded (files already read by another name are not read again, and
// past a budget a file is stamped by its size and inode alone), so that no
// tree the agent builds can hold the exit up.
func Stamp(r *Root, t Tree) Stamps {
	st := &stamper{r: r, s: Stamps{}, seen: map[FileID]string{}, budget: 256 << 20, deadline: time.Now().Add(3 * time.Second)}
	for _, repo := range t.Repos {
		st.s[repo.Dir+"/"] = repoMark
		for _, f := range repo.Files {
			st.add(f)
		}
		for _, h := range repo.Hooks {
			st.addTree(h, 4096)
		}
		for _, inc := range append(slices.Clone(repo.Includes), repo.HookTargets...) {
			st.add(inc)
		}
		// Remotes in git's legacy files, which git reads for a name its
		// config lacks (`git push` sends there) and never writes.
		for _, d := range legacyRemoteDirs {
			st.addTree(filepath.Join(repo.Dir, d), 4096)
		}
	}
	for _, f := range t.GitFiles {
		st.add(f)
	}
	for _, d := range t.Settings {
		st.addTree(d, 4096)
	}
	for _, d := range t.Tools {
		st.addTree(d, 4096)
	}
	for _, l := range t.Links {
		if _, ok := st.s[l.Path]; !ok {
			st.s[l.Path] = "link:" + l.Target
		}
	}
	return st.s
}

type stamper struct {
	r        *Root
	s        Stamps
	seen     map[FileID]string
	budget   int64
	deadline time.Time
}

func (st *stamper) add(rel string) {
	if d, ok := st.digest(rel); ok {
		st.s[rel] = d
	}
}

// addTree stamps rel and, if it is a directory, the files below it, up to
// limit of them, without following links; a directory holding more is
// stamped as such, so the report says it was not read whole.
func (st *stamper) addTree(rel string, limit int) {
	info, err := st.r.Lstat(rel)
	if err != nil {
		return
	}
	if !info.IsDir() {
		st.add(rel)
		return
	}
	queue := []string{rel}
	for len(queue) > 0 {
		dir := queue[0]
		queue = queue[1:]
		entries, err := st.r.ReadDir(dir)
		if err != nil {
			st.s[dir+"/"] = "unreadable"
			continue
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			if e.IsDir() && e.Type()&fs.ModeSymlink == 0 {
				queue = append(queue, p)
				continue
			}
			if limit--; limit < 0 {
				st.s[rel+"/"] = "too many files"
				return
			}
			st.add(p)
		}
	}
}

// digest hashes a regular file with its mode, and a link as its target
// (whatever follows it gets that).
func (st *stamper) digest(rel string) (string, bool) {
	info, err := st.r.Lstat(rel)
	if err != nil {
		return "", false
	}
	switch {
	case info.IsLink():
		target, err := st.r.Readlink(rel)
		if err != nil {
			return "", false
		}
		return "link:" + target, true
	case !info.IsRegular():
		return "", false
	}
	if d, ok := st.seen[info.ID]; ok {
		return d, true
	}
	if st.budget < info.Size || time.Now().After(st.deadline) {
		// Past the budget: by what stat says, which still changes when the
		// agent rewrites the file.
		return fmt.Sprintf("stat:%d:%d:%o", info.ID.Ino, info.Size, info.Perm), true
	}
	f, err := st.r.open(rel, unix.O_RDONLY)
	if err != nil {
		return "", false
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, 16<<20))
	if err != nil {
		return "", false
	}
	st.budget -= n
	fmt.Fprintf(h, "mode:%o", info.Perm)
	d := hex.EncodeToString(h.Sum(nil))
	st.seen[info.ID] = d
	return d, true
}

// Finding is one file the agent added or changed that the host would run
// or load.
type Finding struct {
	Path string
	New  bool
	// Never is a file git never writes where it was found: moved aside.
	Never   bool
	MovedTo string
	Why     string
}

// Report is what the agent left for the host, for the user to read before
// using git or those tools there.
type Report struct {
	Root     string
	Findings []Finding
	// Problems are what the last look could not read.
	Problems []string
	// Runs are, for each repository that is new or changed, what git
	// would run there, read from its files.
	Runs map[string][]string
	Cut  string
}

// Compare finds what the agent left between a start and an end, and moves
// aside the files that git itself never writes where they are, so that
// the user's next `git status` does not take config from them.
func Compare(r *Root, before Tree, bs Stamps, after Tree, as Stamps) Report {
	rep := Report{Root: r.Path, Runs: map[string][]string{}, Cut: after.Cut}
	oldRepos := map[string]Repo{}
	for _, repo := range before.Repos {
		oldRepos[repo.Dir] = repo
	}
	var changed []string
	for p, d := range as {
		if bs[p] != d {
			changed = append(changed, p)
		}
	}
	sort.Strings(changed)
	touched := map[string]bool{}
	for _, p := range changed {
		f := Finding{Path: p, New: bs[p] == ""}
		repo, inRepo := repoOf(after, p)
		switch {
		case strings.HasSuffix(p, "/"):
			f.Path = strings.TrimSuffix(p, "/")
			f.Why = "a new repository: git on this machine runs its config and hooks wherever you use git in " + workTreeOf(repo, r.Path)
			touched[repo.Dir] = true
		case inRepo && !strings.HasSuffix(as[p], "/"):
			// By path before type: a link where git reads a never
			// legitimate file is as never legitimate as the file.
			f.Why, f.Never = gitFileWhy(repo, p, oldRepos, bs)
			if target, ok := strings.CutPrefix(as[p], "link:"); ok {
				f.Why = "a symbolic link to " + Quote(target) + ", which git follows: " + f.Why
			}
			touched[repo.Dir] = true
		case pointerOut(after, p):
			f.Why = "a pointer git follows to where the agent writes outside the launch dir (podman's storage, which holds the sandbox's home)"
			f.Never = true
		case strings.HasPrefix(as[p], "link:"):
			f.Why = "a symbolic link to " + Quote(strings.TrimPrefix(as[p], "link:")) + ", which the host's tools follow"
		case slices.ContainsFunc(after.GitFiles, func(g string) bool { return g == p }):
			f.Why = "a .git file: git on this machine takes the repository it names (" + Quote(gitFileTarget(r, p)) + ") for " + Quote(filepath.Join(r.Path, filepath.Dir(p)))
		default:
			if why, ok := toolLoader(p); ok {
				f.Why = why
			} else if dir, ok := settingsOf(after, p); ok {
				f.Why = "agent settings: Claude Code on this machine loads them (hooks run commands) in " + Quote(filepath.Join(r.Path, filepath.Dir(dir)))
			} else if why, ok := toolOfDir(p); ok {
				f.Why = why
			}
		}
		rep.Findings = append(rep.Findings, f)
	}
	// A new repository is named once, not file by file.
	var newRepos []string
	for _, f := range rep.Findings {
		if bs[f.Path+"/"] == "" && as[f.Path+"/"] == repoMark {
			newRepos = append(newRepos, f.Path+"/")
		}
	}
	rep.Findings = slices.DeleteFunc(rep.Findings, func(f Finding) bool {
		return !f.Never && !strings.HasPrefix(as[f.Path], "link:") && slices.ContainsFunc(newRepos, func(r string) bool { return strings.HasPrefix(f.Path, r) })
	})
	for i, f := range rep.Findings {
		if f.Never && !mutated("indirection-writable") {
			rep.Findings[i].MovedTo = moveAside(r, f.Path)
		}
	}
	// What the walk could not read, it cannot vouch for.
	for _, p := range after.Problems {
		if !slices.Contains(before.Problems, p) {
			rep.Problems = append(rep.Problems, p)
		}
	}
	for p, d := range as {
		if (d == "unreadable" || d == "too many files") && bs[p] != d {
			rep.Problems = append(rep.Problems, Quote(filepath.Join(r.Path, strings.TrimSuffix(p, "/")))+" was not read whole ("+d+")")
		}
	}
	sort.Strings(rep.Problems)
	// Never-legitimate files first, then the rest by path.
	sort.SliceStable(rep.Findings, func(i, j int) bool { return rep.Findings[i].Never && !rep.Findings[j].Never })
	for _, repo := range after.Repos {
		if touched[repo.Dir] {
			rep.Runs[repo.Dir] = whatGitRuns(r, repo)
		}
	}
	return rep
}

func repoOf(t Tree, p string) (Repo, bool) {
	best := -1
	for i, repo := range t.Repos {
		if p == repo.Dir+"/" || strings.HasPrefix(p, repo.Dir+"/") || slices.Contains(repo.Includes, p) ||
			slices.ContainsFunc(repo.Hooks, func(h string) bool { return p == h || strings.HasPrefix(p, h+"/") }) {
			if best < 0 || len(repo.Dir) > len(t.Repos[best].Dir) {
				best = i
			}
		}
	}
	if best < 0 {
		return Repo{}, false
	}
	return t.Repos[best], true
}

func workTreeOf(repo Repo, root string) string {
	if repo.WorkTree == "" {
		return Quote(filepath.Join(root, repo.Dir)) + " (bare: its hooks run when you push to it)"
	}
	return Quote(filepath.Join(root, repo.WorkTree))
}

func settingsOf(t Tree, p string) (string, bool) {
	for _, s := range t.Settings {
		if p == s || strings.HasPrefix(p, s+"/") {
			return s, true
		}
	}
	return "", false
}

// toolOfDir is the loader of a file inside a tool directory (.husky/x).
func toolOfDir(p string) (string, bool) {
	for dir := filepath.Dir(p); dir != "." && dir != "/"; dir = filepath.Dir(dir) {
		for _, t := range HostTools {
			if strings.HasSuffix(t.Path, "/") && hasPathSuffix(dir, t.Path) {
				return t.Loader, true
			}
		}
	}
	return "", false
}

// legacyRemoteDirs hold remotes as git kept them before its config did
// (gitrepository-layout: branches/ and remotes/): git still reads a file
// there for a remote name the config does not define, and no git writes
// one.
var legacyRemoteDirs = []string{"branches", "remotes"}

// gitFileWhy says what git does with a file of a repository, and whether
// its being new there is something git itself never does.
func gitFileWhy(repo Repo, p string, old map[string]Repo, bs Stamps) (string, bool) {
	prev, existed := old[repo.Dir]
	isNew := bs[p] == ""
	base := filepath.Base(p)
	atRoot := filepath.Dir(p) == repo.Dir
	inOldWorktree := slices.Contains(prev.Worktrees, filepath.Dir(p))
	switch {
	case slices.Contains(legacyRemoteDirs, filepath.Base(filepath.Dir(p))) && filepath.Dir(filepath.Dir(p)) == repo.Dir:
		// Changed ones too: git pushes to what the file names, so an
		// existing one edited is as good as a new one to an attacker.
		return "a remote in git's legacy form: git on this machine fetches and pushes (`git push` with no remote named) where it says, and git never writes one", !mutated("legacy-remotes-open")
	case atRoot && base == "commondir":
		if existed && isNew {
			return "git never writes a commondir in a repository's own git dir: with it, git on this machine takes this repository's config and hooks from where it points", true
		}
		return "git takes this repository's config and hooks from where it points", false
	case atRoot && base == "config.worktree", inOldWorktree && base == "config.worktree":
		if existed && isNew {
			if prev.WorktreeConfig {
				return "new in a repository whose config the sandbox kept read-only: git on this machine would read it as config; if you asked for it (git sparse-checkout, git config --worktree), read it and set what it says yourself", true
			}
			return "git never writes config.worktree in a repository whose config the sandbox kept read-only: git on this machine would read it as config", true
		}
		return "git reads it as config", false
	case inOldWorktree && base == "commondir" && existed && isNew:
		return "git never writes a commondir into an existing worktree: with it, git there takes its config and hooks from where it points", true
	case atRoot && base == "config":
		if existed && isNew {
			return "a config in a repository that had none: git never writes one there after the repository is made, and reads it as config", true
		}
		return "git reads it as config (commands it runs: below)", false
	case slices.Contains(repo.Includes, p):
		if existed && isNew {
			return "a file this repository's config includes, which did not exist: git never writes one, and on this machine reads it as config", true
		}
		return "this repository's config includes it: git reads it as config", false
	case atRoot && base == "modules":
		return "git takes its submodules' repositories from there", false
	case atRoot && base == "worktrees":
		return "git takes its worktrees' repositories from there", false
	case atRoot && base == "hooks":
		return "git runs its hooks from there", false
	case strings.Contains(p, "/worktrees/"):
		return "a worktree's pointer: git takes that worktree's repository and config through it", false
	case strings.Contains(p, "/rebase-merge/") || strings.Contains(p, "/rebase-apply/") || strings.Contains(p, "/sequencer/"):
		return "a rebase or cherry-pick in progress: git rebase --continue on this machine runs its exec lines", false
	}
	return "a hook: git on this machine runs it", false
}

// pointerOut reports whether p is a git pointer (a .git file, a
// commondir, an include) that the scan refused as leading where the agent
// writes outside the launch dir.
func pointerOut(t Tree, p string) bool {
	for _, l := range t.Links {
		if l.Path == p && strings.Contains(l.Role, "where the agent writes outside the launch dir") {
			return true
		}
	}
	return false
}

// gitFileTarget is what a .git file names.
func gitFileTarget(r *Root, rel string) string {
	data, err := r.ReadFile(rel, 4096)
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(data)), "gitdir:"))
}

// moveAside renames a file git never writes to a name git never reads, in
// the same directory, never replacing anything; it returns the new path,
// or "" if it could not. A directory the agent made unwritable is made
// writable for the rename and given its mode back. If no rename works the
// file is removed: it must not stay where git reads it.
func moveAside(r *Root, rel string) string {
	dir := filepath.Dir(rel)
	var restore func()
	for try := 0; try < 8; try++ {
		name := fmt.Sprintf("%s.agent-sandbox-moved-%s", filepath.Base(rel), randomSuffix())
		err := r.Rename(rel, name)
		if err == nil {
			if restore != nil {
				restore()
			}
			return filepath.Join(dir, name)
		}
		if errors.Is(err, unix.EACCES) && restore == nil {
			restore = r.makeWritable(dir)
		}
	}
	if r.Remove(rel) == nil {
		if restore != nil {
			restore()
		}
		return "(removed)"
	}
	if restore != nil {
		restore()
	}
	return ""
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Quarantine looks, by path and before any walk, at the places where git
// never writes a file in a repository the start scan knew (commondir,
// config.worktree, a missing include target, a worktree's config), and
// moves aside whatever the agent put there. It is cheap and comes first:
// no padding or unreadable directory delays or hides it.
func Quarantine(r *Root, before Tree, bs Stamps) []Finding {
	if mutated("indirection-writable") {
		return nil
	}
	var out []Finding
	old := map[string]Repo{}
	for _, repo := range before.Repos {
		old[repo.Dir] = repo
	}
	for _, repo := range before.Repos {
		places := []string{filepath.Join(repo.Dir, "commondir"), filepath.Join(repo.Dir, "config.worktree"), filepath.Join(repo.Dir, "config")}
		for _, w := range repo.Worktrees {
			places = append(places, filepath.Join(w, "config.worktree"), filepath.Join(w, "commondir"))
		}
		places = append(places, repo.Includes...)
		for _, p := range places {
			if bs[p] != "" {
				continue
			}
			if _, err := r.Lstat(p); err != nil {
				continue
			}
			why, never := gitFileWhy(repo, p, old, bs)
			if !never {
				continue
			}
			out = append(out, Finding{Path: p, New: true, Never: true, Why: why, MovedTo: moveAside(r, p)})
		}
	}
	return out
}

// Leave is the end of a session's look at the tree: the quarantine first,
// then a walk within bound and the comparison with the start.
func Leave(r *Root, before Tree, bs Stamps, bound Bound, host Host) (Report, error) {
	moved := Quarantine(r, before, bs)
	after, err := Scan(r, bound, host)
	if err != nil {
		return Report{Root: r.Path, Findings: moved}, err
	}
	rep := Compare(r, before, bs, after, Stamp(r, after))
	rep.Findings = append(moved, rep.Findings...)
	return rep, nil
}

// whatGitRuns reads a repository's config (its includes inside the launch
// dir too) and hooks for what git would run: each line a key, its value
// and where it is, or a hook.
func whatGitRuns(r *Root, repo Repo) []string {
	var out []string
	configs := []string{filepath.Join(repo.Dir, "config")}
	for _, f := range repo.Files {
		if filepath.Dir(f) == repo.Dir && filepath.Base(f) != "config" {
			configs = append(configs, f)
		}
	}
	configs = append(configs, repo.Includes...)
	for _, c := range configs {
		data, err := r.ReadFile(c, 1<<20)
		if err != nil {
			continue
		}
		for _, e := range parseGitConfig(data) {
			if what := runsCommand(e); what != "" {
				out = append(out, fmt.Sprintf("%s = %s: git %s (%s line %d)", Quote(e.Name), Quote(e.Value), what, Quote(filepath.Join(r.Path, c)), e.Line))
			}
		}
	}
	for _, h := range repo.Hooks {
		entries, err := r.ReadDir(h)
		if err != nil {
			continue
		}
		for _, e := range entries {
			p := filepath.Join(h, e.Name())
			info, err := r.Lstat(p)
			if err != nil || strings.HasSuffix(e.Name(), ".sample") {
				continue
			}
			switch {
			case info.IsLink():
				target, _ := r.Readlink(p)
				out = append(out, fmt.Sprintf("hook %s, a link to %s: git runs what it points to", Quote(filepath.Join(r.Path, p)), Quote(target)))
			case info.IsRegular() && info.Perm&0o111 != 0:
				out = append(out, fmt.Sprintf("hook %s: git runs it", Quote(filepath.Join(r.Path, p))))
			}
		}
	}
	return out
}

// Lines is the report for the user, one line a finding, then what git
// would run in each repository; none when there is nothing.
func (rep Report) Lines() []string {
	if len(rep.Findings) == 0 && rep.Cut == "" && len(rep.Problems) == 0 {
		return nil
	}
	var out []string
	if len(rep.Findings) > 0 || len(rep.Problems) > 0 {
		out = append(out, "the agent left files that git or other tools on this machine run or load by themselves; read them (cat -v shows them safely) before you use git or those tools there:")
	}
	for _, p := range rep.Problems {
		out = append(out, "  NOT CHECKED: "+p+"; the agent may have hidden something there: look before you use git or those tools in it")
	}
	const most = 60
	for i, f := range rep.Findings {
		if i == most {
			out = append(out, fmt.Sprintf("  and %d more files (not listed)", len(rep.Findings)-most))
			break
		}
		p := Quote(filepath.Join(rep.Root, f.Path))
		switch {
		case f.Never && f.MovedTo == "(removed)":
			out = append(out, fmt.Sprintf("  removed: %s (it could not be moved aside): %s", p, f.Why))
		case f.Never && f.MovedTo != "":
			moved := Quote(filepath.Join(rep.Root, f.MovedTo))
			out = append(out, fmt.Sprintf("  moved aside: %s is now %s: %s. Delete it: rm -- %s", p, moved, f.Why, moved))
		case f.Never:
			out = append(out, fmt.Sprintf("  NOT moved aside (do it before you use git there): %s: %s", p, f.Why))
		case f.New:
			out = append(out, fmt.Sprintf("  new %s: %s", p, f.Why))
		default:
			out = append(out, fmt.Sprintf("  changed %s: %s", p, f.Why))
		}
	}
	dirs := make([]string, 0, len(rep.Runs))
	for d := range rep.Runs {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		runs := rep.Runs[d]
		if len(runs) == 0 {
			out = append(out, fmt.Sprintf("  in %s, git runs no command from its config and no hook", Quote(filepath.Join(rep.Root, d))))
			continue
		}
		out = append(out, fmt.Sprintf("  in %s, git would run:", Quote(filepath.Join(rep.Root, d))))
		for _, l := range runs {
			out = append(out, "    "+l)
		}
	}
	if rep.Cut != "" {
		out = append(out, fmt.Sprintf("  the look for such files stopped %s: what lies deeper in %s was not checked", rep.Cut, Quote(rep.Root)))
	}
	return out
}
