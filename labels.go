package main

import (
	"fmt"
	"os"
	"time"
)

// What agent-sandbox creates in podman, how it names it and the labels it
// puts on it: every object of a session carries the session's label, so
// that listing, gc and cleanup touch only ours.

const (
	// egressNet is the bridge that routers of all sessions share to reach
	// out; AGENT_SANDBOX_EGRESS_NETWORK names another, for a machine where
	// podman's default subnets collide with the user's own.
	egressNet = "agent-sandbox-egress"
	// labelSession marks every object of a session, so that listing and
	// cleanup touch only ours; labelOwner is the launcher (see ownerID).
	labelSession = "agent-sandbox.session"
	labelOwner   = "agent-sandbox.owner"
	// labelShared marks what sessions share (the egress network, the home
	// volume): gc leaves it alone, and a volume without it is not ours.
	labelShared = "agent-sandbox.shared"
	// labelDir records a session's launch directory, so that `agent-sandbox
	// log` can say which session a denial belongs to.
	labelDir = "agent-sandbox.dir"
	// labelProject marks a project's own home volume with the launch dir
	// it belongs to, so that gc can find the homes of projects that are
	// gone.
	labelProject = "agent-sandbox.project"
)

// sessionNames are the names of one session's podman objects; the pod and
// the session network share the session's name.
type sessionNames struct {
	session, router, forwarder, agent string
}

func namesFor(session string) sessionNames {
	return sessionNames{session, session + "-router", session + "-forwarder", session + "-claude"}
}

func sessionLabels(name, launchDir string) map[string]string {
	return map[string]string{labelSession: name, labelOwner: ownerID(os.Getpid()), labelDir: launchDir}
}

// newSessionName names a session, or what a command (build) creates: what
// a killed one leaves behind is then collected like a session's.
func newSessionName() string {
	return fmt.Sprintf("agent-sandbox-%d-%d", time.Now().Unix(), os.Getpid())
}
