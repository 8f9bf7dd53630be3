package main

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/limits"
	"github.com/agent-sandbox/agent-sandbox/internal/routerconf"
	"github.com/containers/podman/v5/libpod/define"
	"github.com/containers/podman/v5/pkg/specgen"
	spec "github.com/opencontainers/runtime-spec/specs-go"
	"go.podman.io/common/libnetwork/types"
)

// The specs of a session's containers and pod: pure functions of the
// session's config, so that the unit tests check exactly what podman is
// asked for.

// sessionMTU is the session network's: every byte the agent sends or
// receives crosses it twice (pod to router), and on a paravirtualised guest
// each packet's interrupts and wake-ups cost more than its bytes; with
// loopback's size instead of 1500 the sandbox's download ran at 0.67 of
// direct instead of 0.53 (BENCHMARKS.md).
const sessionMTU = "65520"

func routerSpec(image string, names sessionNames, labels map[string]string, routerIP netip.Addr, cfg sessionConfig, made sessionMade) *specgen.SpecGenerator {
	// No auto-remove: if the router dies, its logs say why. Teardown
	// removes it.
	r := newSpec(image, names.router, labels)
	// routerd is not an init; something must reap dnsmasq's helpers.
	r.Init = ptr(true)
	r.NetNS = specgen.Namespace{NSMode: specgen.Bridge}
	r.Networks = map[string]types.PerNetworkOptions{
		names.session: {StaticIPs: []net.IP{routerIP.AsSlice()}},
		cfg.egress:    {},
	}
	// "z", not "Z": the forwarder mounts the same directory.
	r.Mounts = []spec.Mount{
		{Type: "bind", Source: made.tmp, Destination: routerConfigDir, Options: []string{"ro", "z"}},
		{Type: "bind", Source: tlsDirOf(made.tmp), Destination: routerconf.TLSSocketDir, Options: []string{"z"}},
		// routerd writes the session CA's certificate here; its key stays
		// in routerd's memory.
		{Type: "bind", Source: caDirOf(made.tmp), Destination: routerCADir, Options: []string{"z"}},
	}
	if made.cred.dir != "" {
		// The credentials: the router's alone ("Z").
		r.Mounts = append(r.Mounts, spec.Mount{Type: "bind", Source: made.cred.dir, Destination: routerCredentialDir, Options: []string{"ro", "Z"}})
	}
	allow := cfg.upstreamAllow
	if mutated("private-range-filter") {
		allow = "0.0.0.0/0"
	}
	r.Env = map[string]string{"UPSTREAM_DNS": cfg.upstreamDNS, "UPSTREAM_ALLOW": allow, "READY_ADDR": routerIP.String(),
		"TLS_SOCKET": routerconf.TLSSocket, "HOST_ADDRS": hostAddrs(), "INSPECT_SOCKET": routerconf.InspectSocket, "CA_DIR": routerCADir}
	// A file podman bounds (containerLogMax), whatever the host's default
	// driver: journald would drop lines of a burst instead, and the exit
	// report reads this log.
	r.LogConfiguration.Driver = "k8s-file"
	// Fixed and small, where the host can enforce them. No RLIMIT_NPROC:
	// the router's root shares its count with every rootless container
	// of the user that has no user namespace of its own.
	r.ResourceLimits = cfg.host.Resources(limits.Router)
	return r
}

// podSpec: the pod groups the session's forwarder and agent, so that one
// removal takes both; it has no infra container (one container fewer to
// start: bench/HISTORY.md). The forwarder holds the network namespace,
// which the agent joins.
func podSpec(names sessionNames, labels map[string]string) *specgen.PodSpecGenerator {
	p := &specgen.PodSpecGenerator{}
	p.Name = names.session
	p.Labels = labels
	p.NoInfra = true
	return p
}

// sandboxUserns is the forwarder's and the agent's user namespace: the
// user is uid 1000 inside, the agent's user (sandboxUser, unless its image
// names another).
const (
	sandboxUserns = "keep-id:uid=1000,gid=1000"
	sandboxUser   = "1000:1000"
)

// forwarderSpec: loopback forwarders live in their own container, so the
// agent can neither see, signal nor replace them. They follow the forwards
// file that the launcher rewrites when the allowlist changes. The
// forwarder's container owns the sandbox's network namespace (its address
// on the session network, DNS, published ports), which the agent joins.
func forwarderSpec(image string, names sessionNames, labels map[string]string, configDir string, host limits.Host, routerIP netip.Addr, published []publishedPort) (*specgen.SpecGenerator, error) {
	userns, err := specgen.ParseUserNamespace(sandboxUserns)
	if err != nil {
		return nil, err
	}
	f := newSpec(image, names.forwarder, labels)
	// Its root has the sandbox's user namespace to itself (the agent
	// runs as uid 1000 in it): RLIMIT_NPROC holds everywhere.
	f.ResourceLimits = host.Resources(limits.Forwarder)
	f.Rlimits = limits.NprocRlimit(limits.Forwarder)
	f.Pod = names.session
	f.UserNS = userns
	f.User = "0:0"
	f.ReadOnlyFilesystem = ptr(true)
	f.ReadWriteTmpfs = ptr(true)
	f.CapDrop = []string{"all"}
	f.CapAdd = []string{"NET_BIND_SERVICE"}
	f.Entrypoint = []string{"/usr/local/bin/forwarder"}
	f.Mounts = []spec.Mount{
		{Type: "bind", Source: configDir, Destination: routerConfigDir, Options: []string{"ro", "z"}},
		{Type: "bind", Source: tlsDirOf(configDir), Destination: routerconf.TLSSocketDir, Options: []string{"ro", "z"}},
	}
	f.Env = map[string]string{"FORWARDS_FILE": "/etc/router/forwards"}
	f.NetNS = specgen.Namespace{NSMode: specgen.Bridge}
	f.Networks = map[string]types.PerNetworkOptions{names.session: {}}
	if len(published) > 0 {
		// The forwarder's published listeners bind the sandbox's
		// address, so it is fixed; the host side is 127.0.0.1 alone.
		f.Networks[names.session] = types.PerNetworkOptions{StaticIPs: []net.IP{podAddress(routerIP).AsSlice()}}
		hostIP := "127.0.0.1"
		if mutated("publish-any-address") {
			hostIP = ""
		}
		for i, pp := range published {
			f.PortMappings = append(f.PortMappings, types.PortMapping{HostIP: hostIP, HostPort: pp.host, ContainerPort: innerPort(i), Protocol: "tcp", Range: 1})
		}
	}
	f.UseImageHosts = ptr(true)
	// The agent takes this resolv.conf with the namespace.
	f.DNSServers = []net.IP{routerIP.AsSlice()}
	// No IPv6 in the sandbox: link-local would reach podman's rootless
	// netns.
	f.Sysctl = map[string]string{"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"}
	return f, nil
}

// agentSpec: the agent runs unprivileged; podman's default bounding set
// stays, minus what could touch the network, so nested containers work.
func agentSpec(image string, names sessionNames, labels map[string]string, homeVolume string, cfg sessionConfig, made sessionMade) *specgen.SpecGenerator {
	c := newSpec(image, names.agent, labels)
	// No auto-remove: under load podman's cleanup removed the exited
	// container before the launcher's wait, and its exit code was lost.
	// Teardown removes it with the pod.
	c.Stdin = ptr(true)
	c.Terminal = ptr(cfg.tty)
	c.Init = ptr(true)
	c.Pod = names.session
	// The forwarder's network namespace, where the agent reaches the
	// router only through it, and its user namespace, which owns that
	// one (in a user namespace of its own, runc could not mount the
	// agent's /sys); a hostname and hosts file of its own.
	c.NetNS = specgen.Namespace{NSMode: specgen.FromContainer, Value: names.forwarder}
	c.UserNS = specgen.Namespace{NSMode: specgen.FromContainer, Value: names.forwarder}
	c.Hostname = "agent-sandbox"
	// The image's /etc/hosts: podman's would name the host, as
	// host.containers.internal.
	c.UseImageHosts = ptr(true)
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
	c.Mounts = append(c.Mounts, made.project.mounts(cfg.launchDir)...)
	// The system bundle plus the session's CA, which the router's
	// inspecting proxy signs with, in place of the image's bundle.
	c.Mounts = append(c.Mounts, spec.Mount{Type: "bind", Source: filepath.Join(caDirOf(made.tmp), caBundleFile), Destination: agentCABundle, Options: []string{"ro"}})
	if made.gate != nil {
		// The gate is the init podman runs the agent's command with.
		c.InitPath = made.gate.binary
		c.Mounts = append(c.Mounts, made.gate.mounts()...)
	}
	c.WorkDir = cfg.launchDir
	c.Env = agentEnv(cfg.env, made.cred)
	c.Command = cfg.cmd
	c.ResourceLimits = cfg.host.Resources(cfg.limits)
	// Its tasks limit holds on every host: the agent's user has the pod's
	// user namespace to itself.
	c.Rlimits = limits.NprocRlimit(cfg.limits)
	if mutated("pids-limit-off") {
		c.Rlimits = nil
	}
	// Where no memory limit holds, the kernel's OOM killer takes the
	// agent before the user's own programs: a hint only, which the agent
	// can take back to 0 (it starts there as the user's processes do), and
	// which counts no memory the agent holds in a tmpfs of its own.
	c.OOMScoreAdj = ptr(agentOOMScoreAdj)
	return c
}

// agentEnv is the agent's environment: the --env variables, the
// credentials' placeholders, and what points its tools at the session's
// CA bundle and keeps them from reaching out on their own.
func agentEnv(passed map[string]string, cred sessionCredentials) map[string]string {
	env := map[string]string{}
	for k, v := range passed {
		env[k] = v
	}
	env["DISABLE_AUTOUPDATER"] = "1"
	// No telemetry, error reports or feature flags: hosts that take data
	// under anyone's credentials.
	env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "1"
	for k, v := range gitRewriteEnv(cred.forge.gitHost) {
		env[k] = v
	}
	for k, v := range agentCredentialEnv(cred.creds) {
		env[k] = v
	}
	env["CLAUDE_CODE_TMPDIR"] = "/var/tmp"
	for _, v := range caBundleEnv {
		env[v] = agentCABundle
	}
	return env
}

// agentOOMScoreAdj raises the agent's OOM score.
const agentOOMScoreAdj = 500

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
	if mutated("proxy-env") {
		// hack/mutation-check: the service's *_proxy variables go in.
		s.HTTPProxy = ptr(true)
	}
	s.SdNotifyMode = define.SdNotifyModeContainer
	// Bounded: conmon starts a log over past this, so that an agent that
	// floods the router with blocked lookups, or its own terminal with
	// output, cannot fill the user's disk.
	s.LogConfiguration = &specgen.LogConfig{Size: containerLogMax}
	return s
}

// containerLogMax is the size past which a container's log starts over.
const containerLogMax = 8 << 20

func ptr[T any](v T) *T { return &v }

// routerCADir is where routerd writes the session CA's certificate (ca.pem)
// and caBundleFile: the router image's bundle (or AGENT_SANDBOX_UPSTREAM_CA)
// and that certificate.
const (
	routerCADir  = "/run/agent-sandbox-ca"
	caBundleFile = "bundle.pem"
)

// agentCABundle is Debian's system bundle, which curl, git, Go, OpenSSL
// and podman read; the agent gets the session's bundle there.
const agentCABundle = "/etc/ssl/certs/ca-certificates.crt"

// caBundleEnv are the variables through which the image's tools take a CA
// bundle of their own rather than the system's: each is set to the
// session's bundle, so that they trust the inspecting proxy too.
var caBundleEnv = []string{
	"SSL_CERT_FILE",       // Go, OpenSSL-based tools, Python's ssl default paths
	"NODE_EXTRA_CA_CERTS", // Node and Claude Code, npm: added to Node's own roots
	"REQUESTS_CA_BUNDLE",  // Python requests (else certifi's)
	"CURL_CA_BUNDLE",      // curl, and requests after REQUESTS_CA_BUNDLE
	"GIT_SSL_CAINFO",      // git over HTTPS
	"PIP_CERT",            // pip (else its vendored certifi)
	"CARGO_HTTP_CAINFO",   // cargo
	"DENO_CERT",           // deno
	"AWS_CA_BUNDLE",       // the AWS CLI and SDKs
	"NIX_SSL_CERT_FILE",   // nix
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
