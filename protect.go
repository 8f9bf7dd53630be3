package main

import (
	"fmt"
	"io"
	"os"
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
	startScanBound = projectdir.Bound{Dirs: 50_000, Time: 500 * time.Millisecond}
	exitScanBound  = projectdir.Bound{Dirs: 50_000, Time: 2 * time.Second}
)

// launchProject is the launch dir as the session found it: open, scanned,
// planned and stamped. Its zero value (a session that never scanned)
// mounts and reports nothing.
type launchProject struct {
	root   *projectdir.Root
	home   string
	tree   projectdir.Tree
	plan   projectdir.Plan
	stamps projectdir.Stamps
}

// openProject scans dir and refuses it if it holds a socket, a pipe or a
// link where a protection needs a real file.
func openProject(dir, home string, out io.Writer) (launchProject, error) {
	root, err := projectdir.OpenRoot(dir)
	if err != nil {
		return launchProject{}, fmt.Errorf("cannot read the launch directory %s: %w", dir, err)
	}
	p := launchProject{root: root, home: home}
	if p.tree, err = projectdir.Scan(root, startScanBound, home); err != nil {
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
	if p.tree.Cut != "" {
		say(out, "the scan of %s stopped %s: repositories and sockets deeper in it are not protected, and what the agent leaves there is not listed; start from a smaller directory", dir, p.tree.Cut)
	}
	p.stamps = projectdir.Stamp(root, p.tree)
	return p, nil
}

func (p launchProject) close() {
	if p.root != nil {
		p.root.Close()
	}
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
	after, err := projectdir.Scan(p.root, exitScanBound, p.home)
	if err != nil {
		return []string{fmt.Sprintf("cannot look at %s for what the agent left there (%v): check it before you use git there", p.root.Path, err)}
	}
	return projectdir.Compare(p.root, p.tree, p.stamps, after, projectdir.Stamp(p.root, after)).Lines()
}

// claimLaunchDir registers the session's launch dir, refusing one that
// equals, contains or lies inside a running session's: that session's
// agent could change what this one scans and mounts. The claim is held
// until teardown has removed the agent.
func claimLaunchDir(runtimeDir, session, dir string) (release func() error, err error) {
	reg := sessionreg.Open(runtimeDir, ownerAlive)
	return reg.Claim(sessionreg.Claim{Session: session, Dir: dir, Owner: ownerID(os.Getpid())}, !mutated("overlap-allowed"))
}
