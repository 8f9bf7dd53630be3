package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/projectdir"
	"github.com/agent-sandbox/agent-sandbox/internal/sessionreg"
	spec "github.com/opencontainers/runtime-spec/specs-go"
)

// The launch dir is the one thing the agent shares with the host, and it
// outlives the session: internal/projectdir scans it without following a
// link, plans the read-only mounts over what git and agents on the host
// run, and at the end lists (and where git never writes such a file,
// moves aside) what the agent left there. This file is its face to the
// session.

// Bounds of the walk of the launch dir: at start, before anything is
// created, and at the end, before the report. They count directories, so
// no number of files can push a repository out of reach; a walk cut short
// says so.
var (
	startScanBound = projectdir.Bound{Dirs: 50_000, Time: 2 * time.Second}
	exitScanBound  = projectdir.Bound{Dirs: 50_000, Time: 2 * time.Second}
)

// scanBoundFor is the start's bound, raised by AGENT_SANDBOX_SCAN_DIRS (v)
// for a tree larger than the default (its time grows with it).
func scanBoundFor(v string) (projectdir.Bound, error) {
	b := startScanBound
	if v == "" {
		return b, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return b, fmt.Errorf("AGENT_SANDBOX_SCAN_DIRS=%q: want a whole number of directories, such as 200000", v)
	}
	if n > b.Dirs {
		b.Time = time.Duration(n) * b.Time / time.Duration(b.Dirs)
		b.Dirs = n
	}
	return b, nil
}

// launchProject is the launch dir as the session found it: open, scanned,
// planned and stamped. Its zero value (a session that never scanned)
// mounts and reports nothing.
type launchProject struct {
	root   *projectdir.Root
	host   projectdir.Host
	tree   projectdir.Tree
	plan   projectdir.Plan
	stamps projectdir.Stamps
}

// openProject scans dir and refuses it if it holds a socket, a pipe or a
// link where a protection needs a real file.
func openProject(dir string, host projectdir.Host, bound projectdir.Bound, out io.Writer) (launchProject, error) {
	root, err := projectdir.OpenRoot(dir)
	if err != nil {
		return launchProject{}, fmt.Errorf("cannot read the launch directory %s: %w", dir, err)
	}
	p := launchProject{root: root, host: host}
	if p.tree, err = projectdir.Scan(root, bound, host); err != nil {
		root.Close()
		return launchProject{}, err
	}
	if err := p.tree.Refusal(dir); err != nil && !mutated("launch-dir-check") {
		root.Close()
		return launchProject{}, err
	}
	if p.plan, err = projectdir.NewPlan(root, p.tree); err != nil {
		root.Close()
		return launchProject{}, err
	}
	if p.tree.Cut != "" && !mutated("padding-hides") {
		// What the scan did not reach, the sandbox cannot protect: a
		// repository there would take config the agent writes.
		root.Close()
		return launchProject{}, fmt.Errorf("refusing to mount %s: its scan stopped %s, and what lies beyond was not checked for sockets, links and repositories; "+
			"start from a smaller directory, or raise AGENT_SANDBOX_SCAN_DIRS (now %d directories)", dir, p.tree.Cut, bound.Dirs)
	}
	p.stamps = projectdir.Stamp(root, p.tree)
	if mutating && mutated("no-protections") { // hack/mutation-check: nothing mounted over the launch dir
		p.plan = projectdir.Plan{}
	}
	return p, nil
}

func (p launchProject) close() {
	if p.root != nil {
		p.root.Close()
	}
}

// scanHost is what the scan needs of the user's machine: the home, and the
// user's own git config, whose core.hooksPath applies to every repository.
func scanHost(set settings) projectdir.Host {
	h := projectdir.Host{Home: set.home}
	if set.home != "" {
		h.GitConfigs = append(h.GitConfigs, filepath.Join(set.home, ".gitconfig"))
		// Rootless podman's storage, which holds the sandbox's home volume:
		// outside the launch dir, and written by the agent all the same.
		h.Forbidden = append(h.Forbidden, filepath.Join(set.home, ".local/share/containers"))
	}
	if set.configDir != "" {
		h.GitConfigs = append(h.GitConfigs, filepath.Join(filepath.Dir(set.configDir), "git", "config"))
	}
	return h
}

// mounts are the read-only protections and the pins over the launch dir.
func (p launchProject) mounts(dir string) []spec.Mount {
	return p.plan.Mounts(dir)
}

// verify checks the mounts' sources right before the agent's container is
// created: still the files the scan saw, reached without a link.
func (p launchProject) verify() error {
	return p.plan.Verify(p.root)
}

// leftForHost walks the launch dir again at the end of a session and says
// what the agent left there that the host would run or load; files that
// git itself never writes where they are get moved aside first.
func (p launchProject) leftForHost() []string {
	if p.root == nil {
		return nil
	}
	rep, err := projectdir.Leave(p.root, p.tree, p.stamps, exitScanBound, p.host)
	lines := rep.Lines()
	if err != nil {
		lines = append(lines, fmt.Sprintf("cannot look at %s for what the agent left there (%v): check it before you use git there", p.root.Path, err))
	}
	return lines
}

// claimLaunchDir registers the session's launch dir, refusing one that
// equals, contains or lies inside a running session's: that session's
// agent could change what this one scans and mounts. The claim is held
// until teardown has removed the agent.
func claimLaunchDir(runtimeDir string, c sessionreg.Claim) (release func() error, err error) {
	reg := sessionreg.Open(runtimeDir, ownerAlive)
	c.Owner = ownerID(os.Getpid())
	return reg.Claim(c, !mutated("overlap-allowed"))
}
