package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/allowlist"
	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
	"github.com/agent-sandbox/agent-sandbox/internal/limits"
	"github.com/agent-sandbox/agent-sandbox/internal/podman"
	"github.com/agent-sandbox/agent-sandbox/internal/routerlog"
	"github.com/agent-sandbox/agent-sandbox/internal/sessionreg"
	"github.com/agent-sandbox/agent-sandbox/internal/trace"
	"go.podman.io/common/libnetwork/types"
	"golang.org/x/sync/errgroup"
)

const (
	// teardownTimeout bounds cleanup after a signal or an error.
	teardownTimeout = 30 * time.Second
	// agentStopTimeout is how long the agent gets to exit on its own.
	agentStopTimeout = 3 * time.Second
)

// sessionConfig is what one session runs with, checked before anything is
// created; fixed once those checks pass (prepare). What the start's steps
// make is sessionMade.
type sessionConfig struct {
	name          string
	launchDir     string
	allowlist     string // watched while the session runs; "" for none
	entries       []allowlist.Entry
	cmd           []string
	env           map[string]string // passed with --env
	repos         []string          // --repo's, "owner/name"
	tty           bool
	upstreamDNS   string
	upstreamAllow string
	egress        string // the shared egress network
	homeVolume    string // the volume at /home/claude
	homeLabels    map[string]string
	// limits are the agent's; host is what this machine lets podman
	// enforce of them and of the helpers' fixed limits.
	limits limits.Limits
	host   limits.Host
	// limitsNote says which limits do not hold here, once the session
	// runs (a refusal stays one line); "" when all do.
	limitsNote string
	// published are the ports reachable from the host (publish.go).
	published []publishedPort
	// agent is the agent preset (agents.go); image is the image the
	// agent's container runs; agentHosts are the hosts its preset adds to
	// the allowlist for this session.
	agent      agentPreset
	image      string
	agentHosts []allowlist.Entry
	// listed is what the allowlist file said at the start (entries
	// without the agent's hosts): the watcher's first look compares it.
	listed []allowlist.Entry
	// allowlistRead is the sum of that read: the watcher parses the file
	// again only once it differs.
	allowlistRead allowlistRead
}

// sessionMade is what the start's steps make, each once, in this order:
// the launch dir as the scan found it, the session's dir, and the
// credentials as found and written for the router.
type sessionMade struct {
	// project is what is mounted read-only over the launch dir, and the
	// stamps of what the host would run.
	project launchProject
	// tmp holds the router's and the forwarder's config, mounted
	// read-only into both; they follow its changes.
	tmp string
	// cred is what the router adds credentials for (credentials.go).
	cred sessionCredentials
	// gate holds the agent's command back while its container starts
	// beside the helpers (gate.go); nil in a build without the
	// forwarder's binary, whose agent starts after them.
	gate *agentGate
}

// session is one run of the agent. Its start steps each push their undo
// onto undo the moment the object exists; teardown unwinds it.
type session struct {
	set    settings
	cfg    sessionConfig
	made   sessionMade
	out    io.Writer // the user's stderr
	eng    engine
	conn   context.Context // the API connection, which teardown still uses
	names  sessionNames
	labels map[string]string
	undo   cleanupStack
	files  *routerFiles
	// releaseClaim gives up the launch dir's claim (protect.go).
	releaseClaim func() error

	agentStarted, agentExited bool
}

func newSession(set settings, cfg sessionConfig, out io.Writer) *session {
	return &session{set: set, cfg: cfg, out: out, names: namesFor(cfg.name), labels: sessionLabels(cfg.name, cfg.launchDir)}
}

// launch runs one session. It returns agentExit with the agent's code, or
// why the session could not run; a signal at any step is errInterrupted.
func launch(ctx context.Context, set settings, out io.Writer, args []string) error {
	return outcome(ctx, runLaunch(ctx, set, out, args))
}

// outcome is what a session that ended with err returns: a signal at any
// step is errInterrupted, whatever the step made of it.
func outcome(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errInterrupted
	}
	return err
}

func runLaunch(ctx context.Context, set settings, out io.Writer, args []string) (err error) {
	la, err := parseLaunchArgs(args, set.lookup)
	if err != nil {
		return refused(err)
	}
	runtimeDir, err := set.requireRuntimeDir()
	if err != nil {
		return err
	}
	name := newSessionName()
	// The API service starts beside the checks and the launch dir's scan,
	// which do not need it: its start is no longer added to theirs. A
	// refusal lets go of it unused.
	tr := trace.New(set.trace, out)
	svc := startServiceEarly(ctx, set, runtimeDir, tr)
	done := tr.Step("checks (settings, allowlist, credentials)")
	cfg, err := prepare(set, out, la, name)
	done()
	if err != nil {
		svc.abandon()
		return refused(err)
	}
	s := newSession(set, cfg, out)
	// First on the stack, so stopped last: every removal goes through it.
	s.undo.push("the podman API service", svc.close)
	defer func() { s.teardown(ctx, outcome(ctx, err)) }()
	done = tr.Step("launch dir: claim, scan, protections")
	if err := s.openLaunchDir(runtimeDir); err != nil {
		return refused(err)
	}
	done()
	done = tr.Step("session dirs")
	if err := s.makeDirs(runtimeDir); err != nil {
		return err
	}
	done()
	done = tr.Step("podman service: wait for its answer")
	opCtx, eng, err := svc.wait()
	if err != nil {
		return err
	}
	done()
	return s.runOn(opCtx, eng, runtimeDir)
}

// earlyService is a session's API service, started before the checks that
// may refuse the session.
type earlyService struct {
	cancel context.CancelFunc
	done   chan struct{}
	undo   cleanupStack
	conn   context.Context
	eng    engine
	err    error
}

func startServiceEarly(ctx context.Context, set settings, runtimeDir string, trace *trace.Tracer) *earlyService {
	sctx, cancel := context.WithCancel(ctx)
	e := &earlyService{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(e.done)
		e.conn, e.eng, e.err = openService(sctx, set, runtimeDir, trace, &e.undo)
	}()
	return e
}

// wait returns the service's connection once it answers.
func (e *earlyService) wait() (context.Context, engine, error) {
	<-e.done
	return e.conn, e.eng, e.err
}

// close lets go of the service (the last user stops it), once its start
// is over.
func (e *earlyService) close(ctx context.Context) error {
	<-e.done
	return e.undo.unwind(ctx)
}

// abandon lets go of a service the session will not use, without waiting
// for it to answer.
func (e *earlyService) abandon() {
	e.cancel()
	_ = e.close(context.Background())
}

// openLaunchDir claims the launch dir, so that no overlapping session can
// run while this one scans and mounts it, then scans it. The claim is
// pushed first and so released last, once the agent is gone.
func (s *session) openLaunchDir(runtimeDir string) error {
	bound := s.set.parsed.scanBound
	release, err := claimLaunchDir(runtimeDir, s.claim())
	if err != nil {
		return err
	}
	// Released by teardown after everything else, the exit's look at the
	// tree included: no session may scan the dir while that still runs.
	s.releaseClaim = release
	s.made.project, err = openProject(s.cfg.launchDir, scanHost(s.set), bound, s.out)
	return err
}

// claim is the session's entry in the register of running sessions: what
// `agent-sandbox ps` shows of it.
func (s *session) claim() sessionreg.Claim {
	c := sessionreg.Claim{Session: s.cfg.name, Dir: s.cfg.launchDir, Command: s.cfg.cmd, Started: time.Now(),
		Limits: s.cfg.host.DescribeHeld(s.cfg.limits)}
	for _, p := range s.cfg.published {
		c.Ports = append(c.Ports, p.String())
	}
	return c
}

// makeDirs makes the session's temp dir (the router's config) and the
// router's credential dir, under the user's runtime dir.
func (s *session) makeDirs(runtimeDir string) error {
	tmp, err := os.MkdirTemp(runtimeDir, s.cfg.name+".")
	if err != nil {
		return refused(err)
	}
	s.undo.push("the session's dir "+tmp, func(context.Context) error { return os.RemoveAll(tmp) })
	s.made.tmp = tmp
	gate, err := makeGate(tmp, runtimeDir, imageContexts, s.set.findInit)
	switch {
	case errors.Is(err, errNoGate):
	case err != nil:
		return refused(err)
	default:
		s.made.gate = gate
	}
	cred, warnings, err := credentialsFor(s.set, s.cfg.env, runtimeDir, s.cfg.name)
	for _, w := range warnings {
		iostreams.Say(s.out, "%s", w)
	}
	if err != nil {
		return refused(err)
	}
	if w := loginWarning(cred, s.cfg.entries, s.cfg.cmd); w != "" {
		iostreams.Say(s.out, "%s", w)
	}
	cred.forge = cred.forge.withRepos(s.made.project.tree, s.cfg.repos)
	if line := cred.forge.startLine(); line != "" {
		iostreams.Say(s.out, "%s", line)
	}
	if len(cred.creds) > 0 && len(cred.apiAllow) > 0 {
		iostreams.Say(s.out, "the API rules %s are off (AGENT_SANDBOX_API_ALLOW): requests signed with your key may make the provider reach out where the agent says", strings.Join(cred.apiAllow, ", "))
	}
	if cred.dir != "" {
		s.undo.push("the credential dir "+cred.dir, func(context.Context) error { return os.RemoveAll(cred.dir) })
	}
	s.made.cred = cred
	return nil
}

// runOn starts the session's objects through eng and runs the agent; the
// caller tears down.
func (s *session) runOn(ctx context.Context, eng engine, runtimeDir string) error {
	s.eng, s.conn = eng, ctx
	if err := s.start(ctx, runtimeDir); err != nil {
		return err
	}
	return s.run(ctx)
}

// start creates what the agent runs in: nothing before the checks that can
// refuse the session, then the networks, the router and the pod.
func (s *session) start(ctx context.Context, runtimeDir string) error {
	if !s.set.noStartGC {
		// Listed first, then collected beside the start: a list taken
		// beside it contends with the start's own calls for the service
		// (bench/HISTORY.md, 2026-12-04 05:30).
		labelled, err := s.eng.ListLabelled(ctx, labelSession)
		if err != nil {
			return err
		}
		s.collectDeadSessions(ctx, labelled, runtimeDir)
	}
	if err := ensureImages(ctx, s.eng, s.set, s.cfg.agentImages(s.set), s.cfg.name, s.out); err != nil {
		return err
	}
	// The home first: a volume of that name that is not ours refuses the
	// session before anything is created.
	if err := ensureHome(ctx, s.eng, s.cfg.homeVolume, s.cfg.homeLabels); err != nil {
		return err
	}
	routerIP, err := s.createNetworks(ctx)
	if err != nil {
		return err
	}
	if err := s.writeRouterFiles(routerIP); err != nil {
		return err
	}
	return s.startRouterAndPod(ctx, routerIP)
}

// routerReportLines is how much of the router's log the exit report
// reads: its tail, so that an agent's flood of blocked lookups cannot make
// the user wait for the prompt (the report then covers the flood's end).
const routerReportLines = 20000

// collectTimeout bounds the collection of dead sessions' objects.
const collectTimeout = 30 * time.Second

// collectDeadSessions removes, beside this session's start so that it
// costs none of it, what sessions whose launcher was killed left behind.
func (s *session) collectDeadSessions(ctx context.Context, labelled []podman.Object, runtimeDir string) {
	// Not the session's own context: once the exit code is handed back, a
	// signal (a user's kill of the keeper, say) must not cut the
	// collection short, and the teardown waits for it anyway. Before
	// that, a signal ends it as it ends the session.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), collectTimeout)
	stop := context.AfterFunc(ctx, func() {
		if !s.set.keeper.Returned() {
			cancel()
		}
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer cancel()
		defer stop()
		_, _ = removeStale(cctx, s.eng, labelled, runtimeDir)
	}()
	// Before the API service stops.
	s.undo.push("dead sessions' objects", func(context.Context) error { <-done; return nil })
}

// ensureHome creates the home volume, or refuses one that containers
// other than agent-sandbox's use: the agent would read and write someone
// else's data. One that agent-sandbox made, or that nothing uses (made
// beforehand with `podman volume create`), is the user's home.
func ensureHome(ctx context.Context, eng engine, name string, labels map[string]string) error {
	v, exists, err := eng.VolumeInspect(ctx, name)
	if err != nil {
		return err
	}
	if !exists {
		return eng.VolumeCreate(ctx, name, labels)
	}
	if v.Labels[labelShared] == "true" {
		return nil
	}
	users, err := eng.VolumeUsers(ctx, name)
	if err != nil {
		return err
	}
	var foreign []string
	for _, u := range users {
		if u.Labels[labelSession] == "" {
			foreign = append(foreign, u.Name)
		}
	}
	if len(foreign) > 0 {
		return refusal{volumeNotOurs{name, foreign}}
	}
	return nil
}

// volumeNotOurs means the home volume is in use by containers that are
// not agent-sandbox's.
type volumeNotOurs struct {
	name  string
	users []string
}

func (v volumeNotOurs) Error() string {
	return fmt.Sprintf("volume %s is in use by %s, which agent-sandbox did not create: set AGENT_SANDBOX_HOME_VOLUME to another name, "+
		"or remove those containers if the volume is meant for agent-sandbox", v.name, strings.Join(v.users, ", "))
}

// createNetworks ensures the shared egress network and creates the
// session's internal one; it returns the router's address on it.
func (s *session) createNetworks(ctx context.Context) (netip.Addr, error) {
	egress := &types.Network{Name: s.cfg.egress, Driver: "bridge", DNSEnabled: true, Labels: map[string]string{labelShared: "true"}}
	if _, err := s.eng.NetworkCreate(ctx, egress, true); err != nil {
		return netip.Addr{}, err
	}
	name := s.names.session
	var n types.Network
	err := created(ctx, &s.undo, "network "+name, func() (err error) {
		n, err = s.eng.NetworkCreate(ctx, &types.Network{Name: name, Driver: "bridge", Internal: !mutated("internal-network"),
			Labels: s.labels, Options: map[string]string{"mtu": sessionMTU}}, false)
		return err
	}, func(ctx context.Context) error { return s.eng.NetworkRemove(ctx, name) })
	if err != nil {
		return netip.Addr{}, err
	}
	ip, err := routerAddress(n)
	return ip, refused(err)
}

// writeRouterFiles writes the router's and the forwarder's config for the
// allowlist into the session's temp dir.
func (s *session) writeRouterFiles(routerIP netip.Addr) error {
	files, err := newRouterFiles(s.made.tmp, routerIP.String(), s.made.cred.plan())
	if err != nil {
		return refused(err)
	}
	files.published = publishedForwards(s.cfg.published, podAddress(routerIP), publishedName(s.cfg.launchDir))
	s.files = files
	return refused(files.apply(s.cfg.entries))
}

// created makes one object with create and pushes remove onto undo if the
// object may exist: when create succeeded, and also when a signal cancelled
// it in flight, since podman may have finished it all the same. Nothing is
// asked of podman once the signal has come.
func created(ctx context.Context, undo *cleanupStack, what string, create func() error, remove func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := create()
	if err == nil || ctx.Err() != nil {
		undo.push(what, func(ctx context.Context) error { return ignoreGone(remove(ctx)) })
	}
	return err
}

// ignoreGone drops the error of a removal that found nothing to remove.
func ignoreGone(err error) error {
	if err != nil && (strings.Contains(err.Error(), "no such") || strings.Contains(err.Error(), "not found")) {
		return nil
	}
	return err
}

// startRouterAndPod starts the router and the pod side by side, as they
// do not depend on each other; the first failure cancels the other.
func (s *session) startRouterAndPod(ctx context.Context, routerIP netip.Addr) error {
	var router, pod cleanupStack
	s.undo.pushParallel("the router and the pod", &router, &pod)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.startRouter(gctx, routerIP, &router) })
	g.Go(func() error { return s.startPod(gctx, routerIP, &pod) })
	return g.Wait()
}

func (s *session) startRouter(ctx context.Context, routerIP netip.Addr, undo *cleanupStack) error {
	spec := routerSpec(s.set.routerImage, s.names, s.labels, routerIP, s.cfg, s.made)
	if err := created(ctx, undo, "container "+spec.Name, func() error { return s.eng.ContainerCreate(ctx, spec) },
		func(ctx context.Context) error { return s.eng.ContainerRemove(ctx, spec.Name) }); err != nil {
		return err
	}
	return s.startReady(ctx, spec.Name, "routerd: ready", nil)
}

// startPod creates the pod and its forwarder, which holds the sandbox's
// network namespace, and starts it; the agent's container is created
// while it starts and, behind its gate, started once the forwarder's
// namespace is up. Removing the pod removes both.
func (s *session) startPod(ctx context.Context, routerIP netip.Addr, undo *cleanupStack) error {
	// The agent joins the forwarder's namespaces: it is created once the
	// forwarder is, and started once the forwarder has started (else
	// podman would start the forwarder itself, before the wait for its
	// ready line is attached).
	forwarderCreated, forwarderStarted := make(chan struct{}), make(chan struct{})
	var once sync.Once // a start tried again calls back again
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		// Asked beside the pod's and the forwarder's creation: an image
		// that names no user runs as the sandbox's (1000). In a pod's
		// user namespace it did; joining the forwarder's, it would be
		// root there, the forwarder's own user.
		imageUser, err := s.eng.ImageUser(gctx, s.cfg.image)
		if err != nil {
			return err
		}
		select {
		case <-forwarderCreated:
		case <-gctx.Done():
			return gctx.Err()
		}
		return s.createAgent(gctx, imageUser, forwarderStarted)
	})
	g.Go(func() error {
		p := podSpec(s.names, s.labels)
		if err := created(gctx, undo, "pod "+p.Name, func() error { return s.eng.PodCreate(gctx, p) },
			func(ctx context.Context) error { return s.eng.PodRemove(ctx, p.Name) }); err != nil {
			return err
		}
		f, err := forwarderSpec(s.set.routerImage, s.names, s.labels, s.made.tmp, s.cfg.host, routerIP, s.cfg.published)
		if err != nil {
			return err
		}
		if err := s.eng.ContainerCreate(gctx, f); err != nil {
			return err
		}
		close(forwarderCreated)
		return s.startReady(gctx, f.Name, "forwarder: ready", func() { once.Do(func() { close(forwarderStarted) }) })
	})
	return g.Wait()
}

// createAgent creates the agent's container, imageUser being the user its
// image names, and, behind its gate, starts it once the forwarder has
// started.
func (s *session) createAgent(ctx context.Context, imageUser string, forwarderStarted <-chan struct{}) error {
	spec := agentSpec(s.cfg.image, s.names, s.labels, s.cfg.homeVolume, s.cfg, s.made)
	if imageUser == "" && !mutated("agent-user-unset") {
		spec.User = sandboxUser
	}
	// The runtime resolves the mounts' sources again, following links:
	// they must still be what the scan saw.
	if err := s.made.project.verify(); err != nil {
		return refused(err)
	}
	if err := s.eng.ContainerCreate(ctx, spec); err != nil || s.made.gate == nil {
		return err
	}
	select {
	case <-forwarderStarted:
	case <-ctx.Done():
		return ctx.Err()
	}
	// Behind its gate, which run opens once both helpers are ready.
	return s.eng.ContainerStart(ctx, spec.Name)
}

// readyTimeout bounds the wait for the router and the forwarder.
var readyTimeout = 10 * time.Second

// startReady starts a helper container and waits for its ready line. A
// helper that never gets ready refuses the session with its log's lines
// that say why.
func (s *session) startReady(ctx context.Context, name, ready string, started func()) error {
	err := s.eng.ContainerStartReady(ctx, name, ready, readyTimeout, started)
	if err == nil || ctx.Err() != nil || !errors.Is(err, podman.ErrNotReady) {
		return err
	}
	return refusef("%v; its log says:\n%s", err, routerlog.Excerpt(s.eng.ContainerLogs(context.WithoutCancel(ctx), name, 200), 10))
}

// run runs the agent, following edits of the allowlist meanwhile.
func (s *session) run(ctx context.Context) error {
	if s.cfg.allowlist != "" {
		// The watcher's first look catches edits made since prepare.
		watchCtx, stopWatch := context.WithCancel(ctx)
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			// The agent's hosts stay whatever the file says.
			apply := func(es []allowlist.Entry) error { return s.files.apply(withAgentHosts(es, s.cfg.agentHosts)) }
			listed := s.cfg.entries
			if s.cfg.listed != nil {
				listed = s.cfg.listed
			}
			watchAllowlist(watchCtx, s.cfg.allowlist, listed, s.cfg.allowlistRead, apply, midSessionWarner(s.out))
		}()
		defer func() { stopWatch(); <-watched }()
	}
	// Said once the session runs: a refusal stays one line.
	if s.cfg.limitsNote != "" {
		iostreams.Say(s.out, "%s", s.cfg.limitsNote)
	}
	if l := unreadHosts(s.made.cred, s.cfg.entries); l != "" {
		iostreams.Say(s.out, "%s", l)
	}
	for _, p := range s.cfg.published {
		iostreams.Say(s.out, "published: %s reaches port %d in the sandbox (a browser must use this name; scripts may use 127.0.0.1:%d)", p.url(publishedName(s.cfg.launchDir)), p.sandbox, p.host)
	}
	if l := agentHostsLine(s.cfg.agent, s.cfg.agentHosts, s.cfg.listed); l != "" {
		iostreams.Say(s.out, "%s", l)
	}
	s.agentStarted = true
	var begin func() error
	if s.made.gate != nil {
		begin = s.made.gate.open
	}
	code, err := runAgent(ctx, s.eng, s.names, s.set.streams, s.cfg.tty, begin, s.stopOnRequest)
	s.agentExited = err == nil
	if err == nil {
		return agentExit(code)
	}
	var died helperDied
	if errors.As(err, &died) && ctx.Err() == nil {
		return fmt.Errorf("%w; the session ends rather than run without it. Its log says:\n%s",
			err, routerlog.Excerpt(s.eng.ContainerLogs(context.WithoutCancel(ctx), died.name, 200), 10))
	}
	return err
}

// stopOnRequest stops the agent when `agent-sandbox stop` asks, until ctx
// ends: the session then ends as when the agent exits, with its code and
// the exit report. A request that comes while the agent is still being
// started is tried again until the agent runs.
func (s *session) stopOnRequest(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-s.set.stopRequests:
	}
	iostreams.Say(s.out, "stopping the agent: agent-sandbox stop was run for this session")
	for ctx.Err() == nil {
		if s.eng.ContainerStop(ctx, s.names.agent, agentStopTimeout) == nil {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// helperDied means the router or the forwarder stopped while the agent ran.
type helperDied struct{ name, what string }

func (h helperDied) Error() string { return "the " + h.what + " (" + h.name + ") stopped" }

// runAgent runs the agent while watching the router and the forwarder: if
// either stops, egress is already closed, and the agent is stopped too.
func runAgent(ctx context.Context, eng engine, names sessionNames, streams *iostreams.Streams, tty bool, begin func() error, stopOnRequest func(context.Context)) (int, error) {
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go stopOnRequest(runCtx)
	for name, what := range map[string]string{names.router: "router", names.forwarder: "forwarder"} {
		go func() {
			err := eng.ContainerWait(runCtx, name)
			if runCtx.Err() == nil {
				if err == nil {
					err = helperDied{name, what}
				}
				cancel(err)
			}
		}()
	}
	code, err := eng.ContainerRun(runCtx, names.agent, streams, tty, begin)
	if cause := context.Cause(runCtx); err != nil && cause != nil && ctx.Err() == nil {
		return code, cause
	}
	return code, err
}

// teardown ends the session on a context of its own (the one given may
// have been cancelled by the signal that ends it). First what the user
// waits for: it stops the agent, says what the allowlist blocked and what
// the agent left for the host, and releases the launch dir; then it hands
// result's exit code back to the foreground (internal/keeper), so that the
// shell's prompt returns, and unwinds what the start steps created; what
// it could not remove, it reports.
func (s *session) teardown(ctx context.Context, result error) {
	if s.conn != nil {
		ctx = s.conn
	}
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	defer cancel()
	if s.made.gate != nil {
		// A gate not yet opened now ends the agent's container without
		// running its command.
		s.made.gate.close()
	}
	agentGone := true
	if s.agentStarted {
		agentGone = s.endAgent(tctx)
	}
	s.made.project.close()
	var err error
	releaseClaim := func() {
		if s.releaseClaim == nil {
			return
		}
		if rerr := s.releaseClaim(); rerr != nil {
			err = errors.Join(err, cleanupFailed{"the claim on " + s.cfg.launchDir, rerr})
		}
	}
	// The claim keeps overlapping sessions out while an agent can still
	// change the dir: once its container has stopped (its pid namespace,
	// nested containers and all, is gone with it), no one can. An agent
	// that could not be stopped keeps the claim, and the user waits for
	// the removals and hears how they went.
	if agentGone {
		releaseClaim()
		s.handBack(result)
	}
	err = errors.Join(err, s.undo.unwind(tctx))
	if !agentGone {
		releaseClaim()
	}
	if err != nil {
		if s.set.keeper.Returned() {
			// Into the teardown log: the user's terminal is no longer ours.
			err = fmt.Errorf("session %s in %s:\n%w", s.cfg.name, s.cfg.launchDir, err)
		}
		report(s.out, errors.New(leftBehind(err)))
	}
	// The late hand-back, for an agent not known gone (once handed back,
	// it does nothing).
	s.handBack(result)
}

// teardownLog is where a keeper's teardown writes once the shell has its
// prompt back: what it could not remove, and the trace.
func teardownLog(runtimeDir string) string {
	return filepath.Join(runtimeDir, "agent-sandbox-teardown.log")
}

// handBack reports result and gives its exit code to the foreground
// process, which returns it to the shell while the teardown goes on.
func (s *session) handBack(result error) {
	if s.set.keeper == nil {
		return
	}
	report(s.out, result)
	if err := s.set.keeper.HandBack(exitCode(result), teardownLog(s.set.runtimeDir)); err != nil {
		iostreams.Say(s.out, "%v", err)
	}
}

// endAgent stops the agent if it still runs, walks the launch dir for what
// it left the host (beside reading the router's log, which does not touch
// it), and says what the allowlist blocked and which credentials the
// router added, by the list in force at the end: a host allowed meanwhile
// needs no advice. It says whether the agent is known to be gone.
func (s *session) endAgent(ctx context.Context) bool {
	gone := true
	if !s.agentExited {
		gone = s.eng.ContainerStop(ctx, s.names.agent, agentStopTimeout) == nil
	}
	left := make(chan []string, 1)
	go func() { left <- s.made.project.leftForHost() }()
	routerLog := s.eng.ContainerLogs(ctx, s.names.router, routerReportLines)
	if !strings.Contains(routerLog, routerlog.StartLine) {
		// Cut: longer than the tail read, or started over by conmon past
		// its size. A flood (of lookups, say) must not hide what came
		// before it without a word.
		iostreams.Say(s.out, "the router's log does not reach back to its start (longer than %d lines, or past its size): what follows covers the session's end only (the agent may have flooded it)", routerReportLines)
	}
	hosts, unprintable := blockedHosts(routerLog, s.files.entries())
	fmt.Fprint(s.out, blockedSummary(hosts, unprintable))
	fmt.Fprint(s.out, credentialSummary(routerLog, s.made.cred.creds, s.files.entries()))
	fmt.Fprint(s.out, removedSummary(routerLog, s.made.cred.creds))
	fmt.Fprint(s.out, forgeSummary(routerLog))
	if len(s.made.cred.creds) > 0 {
		fmt.Fprint(s.out, apiGateSummary(routerLog, s.made.cred.apiAllow))
	}
	for _, l := range <-left {
		iostreams.Say(s.out, "%s", l)
	}
	return gone
}

// prepare checks the launch directory and the allowlist and names the
// session. Nothing is created in podman before it succeeds.
func prepare(set settings, out io.Writer, la launchArgs, name string) (sessionConfig, error) {
	cfg := sessionConfig{name: name, cmd: la.cmd, env: la.env, repos: la.repos, egress: set.egress, allowlist: set.allowlist}
	if err := set.valid(); err != nil {
		return cfg, err
	}
	if err := subordinateIDsMissing(os.ReadFile, os.Getuid()); err != nil {
		return cfg, err
	}
	var err error
	if cfg.launchDir, err = checkedLaunchDir(set); err != nil {
		return cfg, err
	}
	if cfg.entries, cfg.allowlistRead, err = readAllowlist(set.allowlist, out); err != nil {
		return cfg, err
	}
	for _, w := range allowlist.Lint(cfg.entries) {
		iostreams.Say(out, "%s", w)
	}
	cfg.upstreamDNS, cfg.upstreamAllow = set.parsed.upstreamDNS, set.parsed.upstreamAllow
	cfg.homeVolume, cfg.homeLabels = homeVolumeFor(la.home, set.homeVolume, cfg.launchDir)
	if err := checkPublished(la.publish, func(a string) (net.Listener, error) { return net.Listen("tcp", a) }); err != nil {
		return cfg, err
	}
	cfg.published = la.publish
	if err := cfg.pickAgent(set, la); err != nil {
		return cfg, err
	}
	if cfg.limits, cfg.host, cfg.limitsNote, err = sessionLimits(set.machine(), la); err != nil {
		return cfg, err
	}
	cfg.tty = set.streams.Interactive()
	return cfg, nil
}

// sessionLimits are the agent's limits: the defaults for this machine with
// the flags' values over them. A limit asked for that cannot hold here
// refuses the session; note says which defaults cannot, for the session
// to say once.
func sessionLimits(m machine, la launchArgs) (l limits.Limits, h limits.Host, note string, err error) {
	l = limits.Defaults(m.memTotal, m.cpus, m.userTasks)
	if la.asked.Pids {
		l.Pids = la.limits.Pids
	}
	if la.asked.Memory {
		l.Memory = la.limits.Memory
	}
	if la.asked.CPUs {
		l.CPUs = la.limits.CPUs
	}
	if err := m.limits.Refuse(l, la.asked); err != nil {
		return l, m.limits, "", err
	}
	if kinds, why := m.limits.Unenforced(l); len(kinds) > 0 {
		note = fmt.Sprintf("the %s limits are not enforced here: %s (the limit of %d processes holds); agent-sandbox doctor says how to get them", limits.Names(kinds), why, l.Pids)
	}
	return l, m.limits, note, nil
}

// checkedLaunchDir is the current directory with every link resolved, so
// that what is checked is what is mounted and no link is followed again at
// the mount.
func checkedLaunchDir(set settings) (string, error) {
	pwd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("cannot find the current directory: %w", err)
	}
	dir := realpath(pwd)
	for _, p := range []string{pwd, dir} {
		if strings.Contains(p, ":") {
			return "", fmt.Errorf("cannot mount %s: podman cannot bind a path containing ':'; start from another directory", p)
		}
	}
	if err := checkLaunchDir(dir, set); err != nil && !mutated("launch-dir-check") {
		return "", err
	}
	return dir, nil
}
