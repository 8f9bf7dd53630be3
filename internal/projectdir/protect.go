package projectdir

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	spec "github.com/opencontainers/runtime-spec/specs-go"
)

// The launch dir is mounted read-write and keep-id makes the agent's files
// the user's own, so git on the host trusts whatever the agent leaves in a
// repository: core.fsmonitor, core.pager and the rest in .git/config, the
// files through which git finds its config (commondir, config.worktree,
// includes) and every hook, run on the host at the user's next `git
// status`, which shell prompts run by themselves. Agent settings that a
// host-side agent loads are the same kind of file. These are mounted
// read-only over the read-write project, and every directory between them
// and the launch dir is mounted onto itself, so that none can be moved
// aside and replaced (a mount point cannot be renamed).

// Refusal says why a tree must not be mounted at all, or nil.
func (t Tree) Refusal(root string) error {
	if len(t.Special) > 0 {
		s := t.Special[0]
		more := ""
		if n := len(t.Special) - 1; n > 0 {
			more = fmt.Sprintf(" (and %d more)", n)
		}
		return fmt.Errorf("refusing to mount %s: it holds %s %s%s, through which the agent could reach the program on the other end; "+
			"start from a directory without sockets, pipes or devices, or move it out", Quote(root), s.Kind, Quote(filepath.Join(root, s.Path)), more)
	}
	if len(t.Problems) > 0 {
		more := ""
		if n := len(t.Problems) - 1; n > 0 {
			more = fmt.Sprintf(" (and %d more)", n)
		}
		return fmt.Errorf("refusing to mount %s: %s%s, so the sandbox cannot tell what git or an agent on this machine would run from it; "+
			"make it readable (chmod u+rwx), or start from a directory without it", Quote(root), t.Problems[0], more)
	}
	if len(t.Links) > 0 && !mutated("links-followed") {
		l := t.Links[0]
		p := Quote(filepath.Join(root, l.Path))
		to := ""
		if l.Target != "" {
			to = " (to " + Quote(l.Target) + ")"
		}
		more := ""
		if n := len(t.Links) - 1; n > 0 {
			more = fmt.Sprintf(" (and %d more such links)", n)
		}
		return fmt.Errorf("refusing to mount %s: %s is a symbolic link%s where agent-sandbox protects %s%s; "+
			"git or an agent on this machine would follow it, and protecting it would mount what it points to. "+
			"Remove it (rm %s) or put the real file or directory there, then start again", Quote(root), p, to, l.Role, more, p)
	}
	return nil
}

// Plan is what a session mounts over the read-write launch dir, as paths
// relative to it.
type Plan struct {
	// ReadOnly are mounted read-only at their own path.
	ReadOnly []string
	// Empty are hook dirs that do not exist: each gets an empty read-only
	// tmpfs, so the agent cannot create one.
	Empty []string
	// Pinned are the directories between the launch dir and those, each
	// mounted onto itself.
	Pinned []string
	// IDs are what each bind mount's source was when the plan was made.
	IDs map[string]FileID
}

// NewPlan plans the protections for a tree the scan found (and that
// Refusal passed).
func NewPlan(r *Root, t Tree) (Plan, error) {
	p := Plan{IDs: map[string]FileID{}}
	ro := map[string]bool{}
	empty := map[string]bool{}
	for _, repo := range t.Repos {
		for _, f := range repo.Files {
			if mutated("indirection-writable") && filepath.Base(f) != "config" {
				continue
			}
			ro[f] = true
		}
		for _, h := range repo.Hooks {
			if mutated("hookspath-writable") && h != filepath.Join(repo.Dir, "hooks") {
				continue
			}
			info, err := r.Lstat(h)
			switch {
			case err == nil && info.IsDir():
				ro[h] = true
			case err == nil:
				// A hooks path that is a file: git runs no hooks from it,
				// and the agent cannot turn it into a directory.
				ro[h] = true
			default:
				parent, perr := r.Lstat(filepath.Dir(h))
				if perr == nil && parent.IsDir() {
					empty[h] = true
				}
			}
		}
		for _, inc := range append(slices.Clone(repo.Includes), repo.HookTargets...) {
			if info, err := r.Lstat(inc); err == nil && info.IsRegular() {
				ro[inc] = true
			}
		}
		// The user's remotes in git's legacy form stay as they are; a
		// new one is moved aside at the end (report.go).
		for _, d := range legacyRemoteDirs {
			if mutated("legacy-remotes-open") {
				break
			}
			if info, err := r.Lstat(filepath.Join(repo.Dir, d)); err == nil && info.IsDir() {
				ro[filepath.Join(repo.Dir, d)] = true
			}
		}
	}
	for _, f := range t.GitFiles {
		ro[f] = true
	}
	for _, s := range t.Settings {
		ro[s] = true
	}
	pinned := map[string]bool{}
	for _, set := range []map[string]bool{ro, empty} {
		for path := range set {
			for dir := filepath.Dir(path); dir != "." && dir != "/"; dir = filepath.Dir(dir) {
				if !ro[dir] {
					pinned[dir] = true
				}
			}
		}
	}
	p.ReadOnly = sortedKeys(ro)
	p.Empty = sortedKeys(empty)
	p.Pinned = sortedKeys(pinned)
	for _, rel := range append(slices.Clone(p.ReadOnly), p.Pinned...) {
		if rel == "." {
			continue
		}
		info, err := r.Lstat(rel)
		if err != nil {
			return Plan{}, fmt.Errorf("cannot protect %s: %w", filepath.Join(r.Path, rel), err)
		}
		if info.IsLink() && !mutated("links-followed") {
			return Plan{}, fmt.Errorf("refusing to mount %s: %s became a symbolic link while it was scanned", r.Path, Quote(filepath.Join(r.Path, rel)))
		}
		p.IDs[rel] = info.ID
	}
	// Only what is read-only: a pinned .git holds objects that a local
	// clone hard-links, and may.
	for _, rel := range p.ReadOnly {
		if info, err := r.Lstat(rel); err == nil && rel != "." {
			if err := hardLinked(r, rel, info); err != nil {
				return Plan{}, err
			}
		}
	}
	return p, nil
}

// hardLinked refuses a read-only file (or a file anywhere below a
// read-only dir) with another name: through that name, which no mount
// covers, the agent could change what the mount keeps read-only. git never
// makes hard links to its config or hooks (a clone links objects only).
func hardLinked(r *Root, rel string, info Info) error {
	check := func(p string, i Info) error {
		if i.IsRegular() && i.Links > 1 && !mutated("no-protections") {
			q := Quote(filepath.Join(r.Path, p))
			return fmt.Errorf("refusing to mount %s: %s has %d hard links, and through another name the agent could change it while it is read-only; "+
				"give it a name of its own (cp -p %s %s.tmp && mv %s.tmp %s), then start again", Quote(r.Path), q, i.Links, q, q, q, q)
		}
		return nil
	}
	if !info.IsDir() {
		return check(rel, info)
	}
	queue, budget := []string{rel}, 4096
	for len(queue) > 0 && budget > 0 {
		dir := queue[0]
		queue = queue[1:]
		entries, err := r.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			switch {
			case e.IsDir():
				queue = append(queue, p)
			case e.Type().IsRegular():
				if budget--; budget < 0 {
					return nil
				}
				if i, err := r.Lstat(p); err == nil {
					if err := check(p, i); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Verify checks, just before the mounts are handed to the runtime (which
// resolves their sources again, following links), that every source is
// still the file the plan saw, reached through real directories.
func (p Plan) Verify(r *Root) error {
	if r == nil || mutated("links-followed") {
		return nil
	}
	for _, rel := range append(slices.Clone(p.Pinned), p.ReadOnly...) {
		id, ok := p.IDs[rel]
		if !ok {
			continue
		}
		if err := r.Check(rel, id); err != nil {
			return fmt.Errorf("refusing to mount %s: %w; start the session again", r.Path, err)
		}
	}
	return nil
}

// Mounts are the plan's mounts at the same paths in the sandbox, parents
// before children.
func (p Plan) Mounts(root string) []spec.Mount {
	type m struct {
		rel  string
		kind int // 0 pinned, 1 read-only, 2 empty
	}
	var all []m
	for _, rel := range p.Pinned {
		all = append(all, m{rel, 0})
	}
	for _, rel := range p.ReadOnly {
		all = append(all, m{rel, 1})
	}
	for _, rel := range p.Empty {
		all = append(all, m{rel, 2})
	}
	sort.SliceStable(all, func(i, j int) bool {
		di, dj := depth(all[i].rel), depth(all[j].rel)
		if di != dj {
			return di < dj
		}
		return all[i].rel < all[j].rel
	})
	var out []spec.Mount
	for _, v := range all {
		dest := filepath.Join(root, v.rel)
		switch v.kind {
		case 2:
			out = append(out, spec.Mount{Type: "tmpfs", Source: "tmpfs", Destination: dest, Options: []string{"ro", "nosuid", "nodev", "noexec"}})
		case 1:
			out = append(out, spec.Mount{Type: "bind", Source: dest, Destination: dest, Options: []string{"rbind", "ro"}})
		default:
			out = append(out, spec.Mount{Type: "bind", Source: dest, Destination: dest, Options: []string{"rbind"}})
		}
	}
	return out
}

func depth(rel string) int {
	if rel == "." {
		return -1
	}
	return strings.Count(rel, "/")
}
