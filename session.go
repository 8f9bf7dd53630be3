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
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/containers/podman/v5/libpod/define"
	"github.com/containers/podman/v5/pkg/specgen"
	spec "github.com/opencontainers/runtime-spec/specs-go"
	"go.podman.io/common/libnetwork/types"
	"golang.org/x/term"
)

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
	// teardownTimeout bounds cleanup after a signal or an error.
	teardownTimeout = 30 * time.Second
	// agentStopTimeout is how long the agent gets to exit on its own.
	agentStopTimeout = 3 * time.Second
)

// Exit codes besides the agent's own.
const (
	exitRefused = 1   // the launcher refused to start
	exitPodman  = 125 // podman or its API failed, as `podman run` reports it
	exitSignal  = 130 // a signal ended the session
)

// defaultImageNames are the images agent-sandbox provides by itself: built
// locally by a dev build, pulled from the registry by a release build.
func defaultImageNames() (string, string) {
	if releaseBuild() {
		return registry + "/agent-sandbox:" + version, registry + "/agent-sandbox-router:" + version
	}
	return "localhost/agent-sandbox:dev", "localhost/agent-sandbox-router:dev"
}

// imageNames are the sandbox and router images sessions run.
func imageNames() (string, string) {
	img, router := defaultImageNames()
	return envOr("AGENT_SANDBOX_IMAGE", img), envOr("AGENT_SANDBOX_ROUTER_IMAGE", router)
}

func configDir() string {
	return filepath.Join(envOr("XDG_CONFIG_HOME", filepath.Join(os.Getenv("HOME"), ".config")), "agent-sandbox")
}

func allowlistPath() string {
	return envOr("AGENT_SANDBOX_ALLOWLIST", filepath.Join(configDir(), "allowed-hosts"))
}

// sessionConfig is everything a session needs that comes from the user's
// environment, checked before anything is created.
type sessionConfig struct {
	name      string
	launchDir string
	// tmp holds the router's and the forwarder's config, mounted
	// read-only into both; they follow its changes.
	tmp           string
	allowlist     string // watched while the session runs; "" for none
	entries       []entry
	cmd           []string
	env           map[string]string // passed with --env
	tty           bool
	upstreamDNS   string
	upstreamAllow string
	egress        string // the shared egress network; "" for egressNet
	homeVolume    string // the volume at /home/claude
	homeLabels    map[string]string
	// tree is what the launch dir held at start (sockets refuse it; git
	// dirs and agent settings are mounted read-only); stamps are the
	// digests of the files in it that the host would run.
	tree   launchTree
	stamps fileStamps
	// cred is what the router adds credentials for (credentials.go).
	cred sessionCredentials
	// labelled are the objects of every session, listed once at start:
	// for the check on enclosing sessions and for the clean-up of dead
	// ones.
	labelled []labelledObject
}

func (c sessionConfig) egressNetwork() string {
	if c.egress == "" {
		return egressNet
	}
	return c.egress
}

// launchArgs are the launcher's own leading options and the agent command.
type launchArgs struct {
	cmd []string
	// env is passed into the agent explicitly; nothing of the host's
	// environment is by default.
	env map[string]string
	// home is the volume --home names; "" for the default.
	home string
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// parseLaunchArgs takes `[--env NAME | --home VOLUME]... [--exec CMD ARGS... | claude args...]`.
// Everything after the launcher's options belongs to the agent.
func parseLaunchArgs(args []string, getenv func(string) (string, bool)) (launchArgs, error) {
	la := launchArgs{env: map[string]string{}}
	for len(args) > 0 {
		opt, value, inline := strings.Cut(args[0], "=")
		if opt != "--env" && opt != "--home" {
			break
		}
		if inline {
			args = args[1:]
		} else {
			if len(args) < 2 {
				if opt == "--home" {
					return la, errors.New("--home needs a volume name, as in: agent-sandbox --home agent-sandbox-home")
				}
				return la, errors.New("--env needs a variable name, as in: agent-sandbox --env ANTHROPIC_API_KEY")
			}
			value, args = args[1], args[2:]
		}
		if opt == "--home" {
			if !volumeName.MatchString(value) {
				return la, fmt.Errorf("--home %s: not a volume name (letters, digits, _ . -), as in --home agent-sandbox-home", value)
			}
			la.home = value
			continue
		}
		name := value
		if !envName.MatchString(name) {
			return la, fmt.Errorf("--env %s: not a variable name; pass the name only, as in --env ANTHROPIC_API_KEY", name)
		}
		v, ok := getenv(name)
		if !ok {
			return la, fmt.Errorf("--env %s: %s is not set in your environment", name, name)
		}
		la.env[name] = v
	}
	la.cmd = append([]string{"claude"}, args...)
	if len(args) > 0 && args[0] == "--exec" {
		la.cmd = args[1:]
		if len(la.cmd) == 0 {
			return la, errors.New("--exec needs a command, as in: agent-sandbox --exec bash")
		}
	}
	return la, nil
}

// launch runs one session and returns the process exit code.
func launch(ctx context.Context, args []string) int {
	la, err := parseLaunchArgs(args, os.LookupEnv)
	if err != nil {
		warn("%v", err)
		return exitRefused
	}
	cfg, err := prepare(la.cmd)
	if err != nil {
		warn("%v", err)
		return exitRefused
	}
	cfg.env = la.env
	cfg.homeVolume, cfg.homeLabels = homeVolumeFor(la.home, os.Getenv("AGENT_SANDBOX_HOME_VOLUME"), cfg.launchDir)

	runtimeDir, err := xdgRuntimeDir()
	if err != nil {
		warn("%v", err)
		return exitRefused
	}
	tmp, err := os.MkdirTemp(runtimeDir, cfg.name+".")
	if err != nil {
		warn("%v", err)
		return exitRefused
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	cfg.tmp = tmp
	if cfg.cred, err = credentialsFor(la.env, runtimeDir, cfg.name); err != nil {
		warn("%v", err)
		return exitRefused
	}
	defer cfg.cred.remove()

	trace := newTracer()
	return withService(ctx, runtimeDir, cfg.name, trace, func(opCtx context.Context, eng engine) int {
		// One listing serves the session's check and the clean-up.
		if cfg.labelled, err = eng.ListLabelled(opCtx, labelSession); err != nil {
			return fail(err)
		}
		// Sessions whose launcher was killed are cleaned up beside this
		// one, so that they cost it no start-up time. The leak tests turn
		// this off, so that a leak is seen after the session that made it.
		if os.Getenv("AGENT_SANDBOX_NO_START_GC") == "" {
			gcDone := make(chan struct{})
			go func() {
				defer close(gcDone)
				_ = removeStale(opCtx, eng, cfg.labelled, runtimeDir)
			}()
			defer func() { <-gcDone }()
		}
		return runSession(opCtx, eng, cfg)
	})
}

func xdgRuntimeDir() (string, error) {
	dir := os.Getenv("XDG_RUNTIME_DIR")
	if dir == "" {
		return "", errors.New("XDG_RUNTIME_DIR is not set: rootless podman needs it (for example: export XDG_RUNTIME_DIR=/run/user/$(id -u))")
	}
	return dir, nil
}

// withService runs fn against a private podman API service whose socket
// lives in a temp dir of its own (never the one mounted into the router),
// and stops the service and removes the dir afterwards. A signal on ctx
// cancels fn's context and makes the exit code 130.
func withService(ctx context.Context, runtimeDir, name string, trace *tracer, fn func(context.Context, engine) int) int {
	apiDir, err := os.MkdirTemp(runtimeDir, name+"-api.")
	if err != nil {
		warn("%v", err)
		return exitRefused
	}
	defer func() { _ = os.RemoveAll(apiDir) }()

	done := trace.step("podman service start")
	conn, eng, stopService, err := startService(apiDir)
	done()
	defer func() {
		done := trace.step("podman service stop")
		stopService()
		done()
	}()
	if err != nil {
		warn("%v", err)
		if ctx.Err() != nil {
			return exitSignal
		}
		return exitPodman
	}
	if trace.on {
		eng = tracedEngine{eng, trace}
	}
	opCtx, cancel := context.WithCancel(conn)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	code := fn(opCtx, eng)
	if ctx.Err() != nil {
		return exitSignal
	}
	return code
}

// newSessionName names a session, or a command's own API service: what a
// killed one leaves behind is then collected like a session's.
func newSessionName() string {
	return fmt.Sprintf("agent-sandbox-%d-%d", time.Now().Unix(), os.Getpid())
}

// withCommandService runs fn for a command other than a session (gc,
// build) against a private API service of its own.
func withCommandService(ctx context.Context, fn func(ctx context.Context, eng engine, runtimeDir, name string) int) int {
	dir, err := xdgRuntimeDir()
	if err != nil {
		warn("%v", err)
		return exitRefused
	}
	name := newSessionName()
	return withService(ctx, dir, name, newTracer(), func(opCtx context.Context, eng engine) int {
		return fn(opCtx, eng, dir, name)
	})
}

// gc removes what killed sessions left behind and lists (with homes,
// removes) the homes of projects that no longer exist. It returns the exit
// code.
func gc(ctx context.Context, out io.Writer, homes bool) int {
	return withCommandService(ctx, func(opCtx context.Context, eng engine, dir, _ string) int {
		removed, err := collectGarbage(opCtx, eng, dir)
		for _, r := range removed {
			fmt.Fprintln(out, "removed", r)
		}
		if err != nil {
			return fail(err)
		}
		if err := collectHomes(opCtx, eng, out, homes); err != nil {
			return fail(err)
		}
		return 0
	})
}

// prepare checks the launch directory and the allowlist and names the
// session. Nothing is created in podman before it succeeds.
func prepare(cmd []string) (sessionConfig, error) {
	cfg := sessionConfig{cmd: cmd}
	if err := subordinateIDsMissing(os.ReadFile, os.Getuid()); err != nil {
		return cfg, err
	}
	pwd, err := os.Getwd()
	if err != nil {
		return cfg, fmt.Errorf("cannot find the current directory: %w", err)
	}
	// What is checked is what is mounted: the path with every link
	// resolved, so that no link is followed again at the mount.
	dir := realpath(pwd)
	for _, p := range []string{pwd, dir} {
		if strings.Contains(p, ":") {
			return cfg, fmt.Errorf("cannot mount %s: podman cannot bind a path containing ':'; start from another directory", p)
		}
	}
	allowlist := allowlistPath()
	if err := checkLaunchDir(dir, allowlist); err != nil && !mutated("launch-dir-check") {
		return cfg, err
	}
	if cfg.tree, err = scanLaunchDir(dir, launchScanBound); err != nil {
		return cfg, err
	}
	if err := socketRefusal(dir, cfg.tree); err != nil && !mutated("launch-dir-check") {
		return cfg, err
	}
	cfg.stamps = stampTree(dir, cfg.tree)
	if err := ensureAllowlist(allowlist); err != nil {
		return cfg, err
	}
	if cfg.entries, err = parseAllowlist(allowlist); err != nil {
		return cfg, err
	}
	for _, w := range lintAllowlist(cfg.entries) {
		warn("%s", w)
	}
	cfg.allowlist = allowlist
	if cfg.upstreamDNS, err = parseAddrList("AGENT_SANDBOX_UPSTREAM_DNS"); err != nil {
		return cfg, err
	}
	if cfg.upstreamAllow, err = parsePrefixList("AGENT_SANDBOX_UPSTREAM_ALLOW"); err != nil {
		return cfg, err
	}
	cfg.egress = os.Getenv("AGENT_SANDBOX_EGRESS_NETWORK")
	cfg.launchDir = dir
	cfg.tty = term.IsTerminal(int(os.Stdin.Fd())) && term.IsTerminal(int(os.Stdout.Fd()))
	cfg.name = newSessionName()
	return cfg, nil
}

// parseAddrList checks a comma-separated list of IP addresses in env.
func parseAddrList(env string) (string, error) {
	var out []string
	for _, f := range splitList(os.Getenv(env)) {
		a, err := netip.ParseAddr(f)
		if err != nil {
			return "", fmt.Errorf("%s: %q is not an IP address (use a comma-separated list such as 10.0.0.53,10.0.0.54)", env, f)
		}
		out = append(out, a.String())
	}
	return strings.Join(out, ","), nil
}

// parsePrefixList checks a comma-separated list of CIDRs in env.
func parsePrefixList(env string) (string, error) {
	var out []string
	for _, f := range splitList(os.Getenv(env)) {
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return "", fmt.Errorf("%s: %q is not a CIDR (use a comma-separated list such as 10.20.0.0/16)", env, f)
		}
		out = append(out, p.Masked().String())
	}
	return strings.Join(out, ","), nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// fail reports a podman API error with podman's own exit code for it.
func fail(err error) int {
	warn("%v", err)
	return exitPodman
}

func sessionLabels(name string) map[string]string {
	return map[string]string{labelSession: name, labelOwner: ownerID(os.Getpid())}
}

// sessionNames are the names of one session's podman objects; the pod and
// the session network share the session's name.
type sessionNames struct {
	session, router, forwarder, agent string
}

func namesFor(session string) sessionNames {
	return sessionNames{session, session + "-router", session + "-forwarder", session + "-claude"}
}

// runSession creates the session's network, router and pod, runs the agent
// and removes all of it again. It returns the process exit code.
func runSession(ctx context.Context, eng engine, cfg sessionConfig) (code int) {
	image, routerImage := imageNames()
	homeVolume := cfg.homeVolume
	egress := cfg.egressNetwork()
	names := namesFor(cfg.name)
	labels := sessionLabels(cfg.name)
	labels[labelDir] = cfg.launchDir
	agentStarted, agentExited := false, false
	var files *routerFiles

	// Teardown runs on a context of its own: the one given may have been
	// cancelled by the signal that ends the session.
	defer func() {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
		defer cancel()
		if agentStarted && !agentExited {
			_ = eng.ContainerStop(tctx, names.agent, agentStopTimeout)
		}
		// The agent has stopped: the walk of the launch dir for what it
		// left the host runs beside the removals, which do not touch it.
		left := make(chan []string, 1)
		if agentStarted {
			go func() { left <- leftForHost(cfg) }()
			// Say what the allowlist blocked: a silent failure is the most
			// common complaint about allowlist sandboxes.
			// Against the list in force at the end: a host allowed
			// meanwhile needs no advice.
			routerLog := eng.ContainerLogs(tctx, names.router, 0)
			hosts, unprintable := blockedHosts(routerLog, files.entries())
			fmt.Fprint(os.Stderr, blockedSummary(hosts, unprintable))
			fmt.Fprint(os.Stderr, credentialSummary(routerLog, cfg.cred.creds, files.entries()))
		}
		// The pod and the router are independent; the network goes last
		// since both are attached to it.
		var wg sync.WaitGroup
		wg.Go(func() { _ = eng.PodRemove(tctx, names.session) })
		wg.Go(func() { _ = eng.ContainerRemove(tctx, names.router) })
		wg.Wait()
		_ = eng.NetworkRemove(tctx, names.session)
		if agentStarted {
			fmt.Fprint(os.Stderr, hostRunSummary(cfg.launchDir, <-left))
		}
	}()

	// Before anything is created: a session inside a running session's
	// launch dir could be made to mount what that agent chooses.
	if err := enclosingSession(cfg.launchDir, cfg.labelled, ownerAlive); err != nil {
		warn("%v", err)
		return exitRefused
	}
	if code := ensureImages(ctx, eng, cfg.name); code != 0 {
		return code
	}

	// The home volume first: a volume of that name that is not ours
	// refuses the session before anything is created.
	if err := eng.VolumeCreate(ctx, homeVolume, cfg.homeLabels); err != nil {
		if errors.As(err, new(volumeNotOurs)) {
			warn("%v", err)
			return exitRefused
		}
		return fail(err)
	}
	if _, err := eng.NetworkCreate(ctx, &types.Network{Name: egress, Driver: "bridge", DNSEnabled: true,
		Labels: map[string]string{labelShared: "true"}}, true); err != nil {
		return fail(err)
	}
	n, err := eng.NetworkCreate(ctx, &types.Network{Name: names.session, Driver: "bridge", Internal: !mutated("internal-network"), Labels: labels,
		Options: map[string]string{"mtu": sessionMTU}}, false)
	if err != nil {
		return fail(err)
	}
	routerIP, err := routerAddress(n)
	if err != nil {
		warn("%v", err)
		return exitRefused
	}
	if files, err = newRouterFiles(cfg.tmp, routerIP.String(), cfg.cred.plan()); err != nil {
		warn("%v", err)
		return exitRefused
	}
	if err := files.apply(cfg.entries); err != nil {
		warn("%v", err)
		return exitRefused
	}

	// The router and the pod do not depend on each other: start them side
	// by side, and start the agent only when both are ready. The first
	// failure cancels the other branch and is the one reported.
	bctx, cancelBoth := context.WithCancel(ctx)
	defer cancelBoth()
	var (
		wg        sync.WaitGroup
		firstOnce sync.Once
		first     int
	)
	settle := func(code int) {
		if code != 0 {
			firstOnce.Do(func() { first = code; cancelBoth() })
		}
	}
	wg.Go(func() {
		settle(startHelper(bctx, eng, routerSpec(routerImage, names, labels, routerIP, cfg), "routerd: ready"))
	})
	agent := agentSpec(image, names, labels, homeVolume, cfg)
	wg.Go(func() { settle(startPod(bctx, eng, names, labels, routerIP, routerImage, cfg.tmp, agent)) })
	wg.Wait()
	if ctx.Err() != nil {
		return exitSignal
	}
	if first != 0 {
		return first
	}

	// From here on, edits of the allowlist reach the router and the
	// forwarder; the watcher's first look catches any made since prepare.
	if cfg.allowlist != "" {
		watchCtx, stopWatch := context.WithCancel(ctx)
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			watchAllowlist(watchCtx, cfg.allowlist, cfg.entries, files.apply)
		}()
		defer func() { stopWatch(); <-watched }()
	}

	agentStarted = true
	code, err = runAgent(ctx, eng, names, cfg.tty)
	agentExited = err == nil
	if err == nil {
		return code
	}
	if ctx.Err() != nil {
		return exitSignal
	}
	var died helperDied
	if errors.As(err, &died) {
		warn("%v; the session ends rather than run without it. Its log says:\n%s",
			err, logExcerpt(eng.ContainerLogs(context.WithoutCancel(ctx), died.name, 0), 10))
		return exitPodman
	}
	return fail(err)
}

// helperDied means the router or the forwarder stopped while the agent ran.
type helperDied struct{ name, what string }

func (h helperDied) Error() string { return "the " + h.what + " (" + h.name + ") stopped" }

// runAgent runs the agent while watching the router and the forwarder: if
// either stops, egress is already closed, and the agent is stopped too.
func runAgent(ctx context.Context, eng engine, names sessionNames, tty bool) (int, error) {
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
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
	code, err := eng.ContainerRun(runCtx, names.agent, tty)
	if cause := context.Cause(runCtx); err != nil && cause != nil && ctx.Err() == nil {
		return code, cause
	}
	return code, err
}

// startHelper creates a helper container and waits until it is ready.
func startHelper(ctx context.Context, eng engine, s *specgen.SpecGenerator, ready string) int {
	if err := eng.ContainerCreate(ctx, s); err != nil {
		if ctx.Err() != nil {
			return exitSignal
		}
		return fail(err)
	}
	return startReady(ctx, eng, s.Name, ready)
}

// startPod creates the pod, starts its loopback forwarder and creates the
// agent's container.
func startPod(ctx context.Context, eng engine, names sessionNames, labels map[string]string, routerIP netip.Addr, routerImage, configDir string, agent *specgen.SpecGenerator) int {
	p, err := podSpec(names, labels, routerIP)
	if err != nil {
		return fail(err)
	}
	if err := eng.PodCreate(ctx, p); err != nil {
		if ctx.Err() != nil {
			return exitSignal
		}
		return fail(err)
	}
	// The agent is created (not started) while the forwarder starts, so
	// that only its start is left once both helpers are ready.
	agentCreated := make(chan int, 1)
	go func() {
		if err := eng.ContainerCreate(ctx, agent); err != nil {
			if ctx.Err() != nil {
				agentCreated <- exitSignal
				return
			}
			agentCreated <- fail(err)
			return
		}
		agentCreated <- 0
	}()
	code := startHelper(ctx, eng, forwarderSpec(routerImage, names, labels, configDir), "forwarder: ready")
	if agentCode := <-agentCreated; code == 0 {
		code = agentCode
	}
	return code
}

func routerSpec(image string, names sessionNames, labels map[string]string, routerIP netip.Addr, cfg sessionConfig) *specgen.SpecGenerator {
	// No auto-remove: if the router dies, its logs say why. Teardown
	// removes it.
	r := newSpec(image, names.router, labels)
	// routerd is not an init; something must reap dnsmasq's helpers.
	r.Init = ptr(true)
	r.NetNS = specgen.Namespace{NSMode: specgen.Bridge}
	r.Networks = map[string]types.PerNetworkOptions{
		names.session:       {StaticIPs: []net.IP{routerIP.AsSlice()}},
		cfg.egressNetwork(): {},
	}
	// "z", not "Z": the forwarder mounts the same directory.
	r.Mounts = []spec.Mount{
		{Type: "bind", Source: cfg.tmp, Destination: "/etc/router", Options: []string{"ro", "z"}},
		{Type: "bind", Source: tlsDirOf(cfg.tmp), Destination: tlsSocketDir, Options: []string{"z"}},
	}
	if cfg.cred.dir != "" {
		// The credentials: the router's alone ("Z").
		r.Mounts = append(r.Mounts, spec.Mount{Type: "bind", Source: cfg.cred.dir, Destination: routerCredentialDir, Options: []string{"ro", "Z"}})
	}
	allow := cfg.upstreamAllow
	if mutated("private-range-filter") {
		allow = "0.0.0.0/0"
	}
	r.Env = map[string]string{"UPSTREAM_DNS": cfg.upstreamDNS, "UPSTREAM_ALLOW": allow, "READY_ADDR": routerIP.String(),
		"TLS_SOCKET": tlsSocket, "HOST_ADDRS": hostAddrs()}
	return r
}

// podSpec: the pod owns the netns, DNS and hosts file; the agent only
// joins it.
func podSpec(names sessionNames, labels map[string]string, routerIP netip.Addr) (*specgen.PodSpecGenerator, error) {
	userns, err := specgen.ParseUserNamespace("keep-id:uid=1000,gid=1000")
	if err != nil {
		return nil, err
	}
	p := &specgen.PodSpecGenerator{}
	p.Name = names.session
	p.Labels = labels
	p.Hostname = "agent-sandbox"
	p.NetNS = specgen.Namespace{NSMode: specgen.Bridge}
	p.Networks = map[string]types.PerNetworkOptions{names.session: {}}
	p.DNSServer = []net.IP{routerIP.AsSlice()}
	p.NoManageHosts = true
	// No IPv6 in the pod: link-local would reach podman's rootless netns.
	p.Sysctl = map[string]string{"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"}
	p.Userns = userns
	return p, nil
}

// forwarderSpec: loopback forwarders live in their own container, so the
// agent can neither see, signal nor replace them. They follow the forwards
// file that the launcher rewrites when the allowlist changes.
func forwarderSpec(image string, names sessionNames, labels map[string]string, configDir string) *specgen.SpecGenerator {
	f := newSpec(image, names.forwarder, labels)
	f.Pod = names.session
	f.User = "0:0"
	f.ReadOnlyFilesystem = ptr(true)
	f.ReadWriteTmpfs = ptr(true)
	f.CapDrop = []string{"all"}
	f.CapAdd = []string{"NET_BIND_SERVICE"}
	f.Entrypoint = []string{"/usr/local/bin/forwarder"}
	f.Mounts = []spec.Mount{
		{Type: "bind", Source: configDir, Destination: "/etc/router", Options: []string{"ro", "z"}},
		{Type: "bind", Source: tlsDirOf(configDir), Destination: tlsSocketDir, Options: []string{"ro", "z"}},
	}
	f.Env = map[string]string{"FORWARDS_FILE": "/etc/router/forwards"}
	return f
}

// agentSpec: the agent runs unprivileged; podman's default bounding set
// stays, minus what could touch the network, so nested containers work.
func agentSpec(image string, names sessionNames, labels map[string]string, homeVolume string, cfg sessionConfig) *specgen.SpecGenerator {
	c := newSpec(image, names.agent, labels)
	// No auto-remove: under load podman's cleanup removed the exited
	// container before the launcher's wait, and its exit code was lost.
	// Teardown removes it with the pod.
	c.Stdin = ptr(true)
	c.Terminal = ptr(cfg.tty)
	c.Init = ptr(true)
	c.Pod = names.session
	c.CapDrop = []string{"NET_ADMIN", "NET_RAW", "SYS_ADMIN"}
	if mutated("net-raw") {
		// podman's default set no longer has NET_RAW: keeping it means
		// adding it.
		c.CapDrop = []string{"NET_ADMIN", "SYS_ADMIN"}
		c.CapAdd = []string{"NET_RAW"}
	}
	c.SelinuxOpts = []string{"disable"}
	c.Annotations = map[string]string{define.InspectAnnotationLabel: "disable"}
	c.Devices = []spec.LinuxDevice{{Path: "/dev/fuse"}, {Path: "/dev/net/tun"}}
	c.Volumes = []*specgen.NamedVolume{{Name: homeVolume, Dest: "/home/claude"}}
	c.Mounts = []spec.Mount{{Type: "bind", Source: cfg.launchDir, Destination: cfg.launchDir}}
	paths, emptyDirs := protectedPaths(cfg.launchDir, cfg.tree)
	c.Mounts = append(c.Mounts, protectionMounts(cfg.launchDir, paths, emptyDirs)...)
	c.WorkDir = cfg.launchDir
	c.Env = map[string]string{}
	for k, v := range cfg.env {
		c.Env[k] = v
	}
	c.Env["DISABLE_AUTOUPDATER"] = "1"
	// No telemetry, error reports or feature flags: hosts that take data
	// under anyone's credentials.
	c.Env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "1"
	for k, v := range agentCredentialEnv(cfg.cred.creds) {
		c.Env[k] = v
	}
	c.Env["CLAUDE_CODE_TMPDIR"] = "/var/tmp"
	c.Command = cfg.cmd
	return c
}

// routerAddress is .2 of the session network's /24: .1 is the gateway.
func routerAddress(n types.Network) (netip.Addr, error) {
	if len(n.Subnets) != 1 {
		return netip.Addr{}, fmt.Errorf("session network %s has %d subnets, want one /24", n.Name, len(n.Subnets))
	}
	pfx, err := netip.ParsePrefix(n.Subnets[0].Subnet.String())
	if err != nil || !pfx.Addr().Is4() || pfx.Bits() != 24 {
		return netip.Addr{}, fmt.Errorf("session network %s has subnet %s, want an IPv4 /24 (check default_subnet_pools in containers.conf)", n.Name, n.Subnets[0].Subnet.String())
	}
	return pfx.Masked().Addr().Next().Next(), nil
}

func ptr[T any](v T) *T { return &v }

// newSpec mirrors the `podman run` defaults that the API leaves to clients.
func newSpec(image, name string, labels map[string]string) *specgen.SpecGenerator {
	s := specgen.NewSpecGenerator(image, false)
	s.RawImageName = image
	s.Name = name
	s.Labels = labels
	// Not the podman service's *_proxy variables: they may carry the
	// user's proxy credentials, and nothing of the user's environment
	// reaches a container unless named with --env.
	s.HTTPProxy = ptr(false)
	s.SdNotifyMode = define.SdNotifyModeContainer
	return s
}

// sessionMTU is the session network's: every byte the agent sends or
// receives crosses it twice (pod to router), and on a paravirtualised guest
// each packet's interrupts and wake-ups cost more than its bytes; with
// loopback's size instead of 1500 the sandbox's download ran at 0.67 of
// direct instead of 0.53 (BENCHMARKS.md).
const sessionMTU = "65520"

// readyTimeout bounds the wait for the router and the forwarder.
var readyTimeout = 10 * time.Second

// startReady starts a helper container and waits for its ready line. A
// helper that never gets ready is reported with its last log lines.
func startReady(ctx context.Context, eng engine, name, ready string) int {
	err := eng.ContainerStartReady(ctx, name, ready)
	if err == nil {
		return 0
	}
	if ctx.Err() != nil {
		return exitSignal
	}
	if !errors.Is(err, errNotReady) {
		return fail(err)
	}
	warn("%v; its log says:\n%s", err, logExcerpt(eng.ContainerLogs(context.WithoutCancel(ctx), name, 0), 10))
	return exitRefused
}

// ensureAllowlist seeds a missing allowlist from the packaged default.
func ensureAllowlist(path string) error {
	fi, err := os.Stat(path)
	if err == nil {
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("allowlist %s is not a regular file; replace it with one", path)
		}
		return nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cannot read allowlist: %w", err)
	}
	src := defaultAllowlist
	if exe, err := os.Executable(); err == nil {
		for _, p := range []string{filepath.Join(filepath.Dir(exe), "allowed-hosts"), "/usr/share/agent-sandbox/allowed-hosts"} {
			if b, err := os.ReadFile(p); err == nil {
				src = b
				break
			}
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("cannot create the allowlist: %w", err)
	}
	// O_EXCL: never overwrite a list another session created meanwhile.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cannot create the allowlist: %w", err)
	}
	if _, err := f.Write(src); err != nil {
		f.Close()
		return fmt.Errorf("cannot write the allowlist: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("cannot write the allowlist: %w", err)
	}
	warn("created %s from the defaults; edit it to allow more hosts", path)
	return nil
}

// hostAddrs lists this machine's addresses for routerd to refuse: slirp4netns
// and pasta carry a connection to any of them to the host itself.
func hostAddrs() string {
	addrs, _ := net.InterfaceAddrs()
	var out []string
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && !ipn.IP.IsLinkLocalUnicast() {
			out = append(out, ipn.IP.String())
		}
	}
	return strings.Join(out, ",")
}
