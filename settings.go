package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
	"github.com/agent-sandbox/agent-sandbox/internal/keeper"
	"github.com/agent-sandbox/agent-sandbox/internal/limits"
	"github.com/agent-sandbox/agent-sandbox/internal/projectdir"
)

// settings is everything agent-sandbox takes from the user's environment,
// read once by the command line layer (newSettings) and handed down: no
// code below it reads the environment, so a test states a whole machine in
// one value.
type settings struct {
	// lookup reads a variable the user names on the command line (--env)
	// or that holds a credential (credentials.go): which ones is only known
	// later, so the environment itself is kept as a function.
	lookup func(string) (string, bool)

	home, user string
	configDir  string // agent-sandbox's dir under XDG_CONFIG_HOME
	allowlist  string // AGENT_SANDBOX_ALLOWLIST, else configDir/allowed-hosts
	runtimeDir string // XDG_RUNTIME_DIR; "" when unset
	tmpDir     string // TMPDIR

	// image and routerImage are what sessions run: the variables', else
	// agent-sandbox's own (defaultImageNames). Any other name is the
	// user's, which a session and the doctor never build over
	// (sessionImage.ours).
	image, routerImage string
	baseImage          string // what the sandbox image is built from
	podman             string // AGENT_SANDBOX_PODMAN, else podman on PATH

	homeVolume    string // AGENT_SANDBOX_HOME_VOLUME: one home shared by name
	egress        string // the shared egress network
	upstreamDNS   string // AGENT_SANDBOX_UPSTREAM_DNS, comma-separated
	upstreamAllow string // AGENT_SANDBOX_UPSTREAM_ALLOW, comma-separated
	apiHosts      string // AGENT_SANDBOX_API_HOSTS
	upstreamCA    string // AGENT_SANDBOX_UPSTREAM_CA
	apiAllow      string // AGENT_SANDBOX_API_ALLOW: the API gate's rules turned off
	publish       string // AGENT_SANDBOX_PUBLISH: registry hosts the agent may publish to
	scanDirs      string // AGENT_SANDBOX_SCAN_DIRS: how many directories the start's scan may read
	agent         string // AGENT_SANDBOX_AGENT: the agent sessions run unless --agent says otherwise

	// parsed are the variables above that have a grammar, read once by
	// newSettings into what their users take; invalid says what was
	// wrong with them, which every command that uses them reports first
	// (valid), before it does anything.
	parsed  parsedSettings
	invalid error

	// noStartGC keeps a session from cleaning up dead ones (the leak tests
	// attribute each leak to the session that made it); trace times steps.
	noStartGC, trace bool

	// machine is what this machine has and lets rootless podman limit,
	// read when a session needs it.
	machine func() machine
	// findInit finds the container init podman runs with --init, which
	// the agent's gate becomes (gate.go).
	findInit func() (string, error)

	// keeper hands the exit code back to the foreground process once the
	// session has reported how it ended (internal/keeper); nil when the
	// session runs in the process the shell started.
	keeper *keeper.Link
	// stopRequests are `agent-sandbox stop`'s: the agent is stopped and
	// the session ends as when it exits.
	stopRequests <-chan os.Signal
	// streams are the command's stdin, stdout and stderr, and the terminal
	// behind them: the agent's, when a session attaches it.
	streams *iostreams.Streams
}

// newSettings reads the environment through getenv.
func newSettings(getenv func(string) (string, bool)) settings {
	get := func(k string) string { v, _ := getenv(k); return v }
	or := func(k, def string) string {
		if v := get(k); v != "" {
			return v
		}
		return def
	}
	s := settings{lookup: getenv, home: get("HOME"), user: get("USER"),
		runtimeDir: get("XDG_RUNTIME_DIR"), tmpDir: get("TMPDIR")}
	s.configDir = filepath.Join(or("XDG_CONFIG_HOME", filepath.Join(s.home, ".config")), "agent-sandbox")
	s.allowlist = or("AGENT_SANDBOX_ALLOWLIST", filepath.Join(s.configDir, "allowed-hosts"))
	img, router := defaultImageNames()
	s.image, s.routerImage = or("AGENT_SANDBOX_IMAGE", img), or("AGENT_SANDBOX_ROUTER_IMAGE", router)
	s.baseImage = or("AGENT_SANDBOX_BASE_IMAGE", defaultBaseImage)
	s.podman = or("AGENT_SANDBOX_PODMAN", "podman")
	s.homeVolume = get("AGENT_SANDBOX_HOME_VOLUME")
	s.egress = or("AGENT_SANDBOX_EGRESS_NETWORK", egressNet)
	s.upstreamDNS, s.upstreamAllow = get("AGENT_SANDBOX_UPSTREAM_DNS"), get("AGENT_SANDBOX_UPSTREAM_ALLOW")
	s.apiHosts, s.upstreamCA = get("AGENT_SANDBOX_API_HOSTS"), get("AGENT_SANDBOX_UPSTREAM_CA")
	s.apiAllow, s.publish = get("AGENT_SANDBOX_API_ALLOW"), get("AGENT_SANDBOX_PUBLISH")
	s.scanDirs = get("AGENT_SANDBOX_SCAN_DIRS")
	s.agent = get("AGENT_SANDBOX_AGENT")
	s.noStartGC, s.trace = get("AGENT_SANDBOX_NO_START_GC") != "", get("AGENT_SANDBOX_TRACE") != ""
	s.machine = probeMachine
	s.findInit = hostInit
	// The process's own, until the caller gives the command its streams.
	s.streams = iostreams.System()
	s.parsed, s.invalid = parseSettings(s)
	return s
}

// parsedSettings are the settings with a grammar, as their users take
// them.
type parsedSettings struct {
	upstreamDNS, upstreamAllow string // normalised, as routerd takes them
	apiHosts                   map[*apiProvider]string
	apiAllow                   []string // the API gate's rules turned off
	publish                    []string // registry hosts the agent may publish to
	upstreamCA                 []byte   // AGENT_SANDBOX_UPSTREAM_CA's certificates
	scanBound                  projectdir.Bound
}

// parseSettings reads each variable with a grammar once; the error names
// every bad one.
func parseSettings(s settings) (parsedSettings, error) {
	var p parsedSettings
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var err error
	p.upstreamDNS, p.upstreamAllow, err = s.upstream()
	keep(err)
	p.apiHosts, err = apiHosts(s.apiHosts)
	keep(err)
	p.apiAllow, err = parseAPIAllow(s.apiAllow)
	keep(err)
	p.publish, err = parsePublish(s.publish)
	keep(err)
	p.upstreamCA, err = readUpstreamCA(s.upstreamCA)
	keep(err)
	p.scanBound, err = scanBoundFor(s.scanDirs)
	keep(err)
	return p, errors.Join(errs...)
}

// valid is what was wrong with the settings that have a grammar: a
// command that uses them calls it before it does anything.
func (s settings) valid() error {
	if s.invalid == nil {
		return nil
	}
	// Bad input, as a refused launch dir is: exit code 2, not podman's.
	return refusal{s.invalid}
}

// machine is the size of this machine and what it lets a rootless podman
// limit: the agent's default limits are shares of it.
type machine struct {
	memTotal int64
	cpus     int
	// userTasks is the user's own tasks limit (0: none), which the
	// agent's tasks count against too.
	userTasks uint64
	limits    limits.Host
}

func probeMachine() machine {
	mem, _ := limits.MemTotal()
	return machine{memTotal: mem, cpus: runtime.NumCPU(), userTasks: limits.UserTasks(), limits: limits.Probe(os.Getuid())}
}

// secretsDir is where `agent-sandbox secret` keeps credentials.
func (s settings) secretsDir() string { return filepath.Join(s.configDir, "secrets") }

// requireRuntimeDir is XDG_RUNTIME_DIR, which rootless podman and every
// session's temp dirs need.
func (s settings) requireRuntimeDir() (string, error) {
	if s.runtimeDir == "" {
		return "", refusal{errors.New("XDG_RUNTIME_DIR is not set: rootless podman needs it (for example: export XDG_RUNTIME_DIR=/run/user/$(id -u))")}
	}
	return s.runtimeDir, nil
}

// upstream checks AGENT_SANDBOX_UPSTREAM_DNS and _ALLOW and returns them
// normalised, as routerd takes them.
func (s settings) upstream() (dns, allow string, err error) {
	dns, dnsErr := parseList("AGENT_SANDBOX_UPSTREAM_DNS", s.upstreamDNS, "an IP address", "10.0.0.53,10.0.0.54",
		func(f string) (string, error) {
			a, err := netip.ParseAddr(f)
			return a.String(), err
		})
	allow, allowErr := parseList("AGENT_SANDBOX_UPSTREAM_ALLOW", s.upstreamAllow, "a CIDR", "10.20.0.0/16",
		func(f string) (string, error) {
			p, err := netip.ParsePrefix(f)
			return p.Masked().String(), err
		})
	if err := errors.Join(dnsErr, allowErr); err != nil {
		return "", "", err
	}
	return dns, allow, nil
}

// parseList normalises each item of a comma-separated list with parse and
// names the variable, the bad item and an example when one does not parse.
func parseList(name, value, what, example string, parse func(string) (string, error)) (string, error) {
	var out []string
	for _, f := range splitList(value) {
		v, err := parse(f)
		if err != nil {
			return "", fmt.Errorf("%s: %q is not %s (use a comma-separated list such as %s)", name, f, what, example)
		}
		out = append(out, v)
	}
	return strings.Join(out, ","), nil
}

// splitList splits a comma-separated list, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
