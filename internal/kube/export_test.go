package kube

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/allowlist"
	"github.com/agent-sandbox/agent-sandbox/internal/routerconf"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

func plan(t *testing.T, list string, routes ...routerconf.Route) routerconf.Plan {
	t.Helper()
	entries, err := allowlist.Parse(strings.NewReader(list), "allowed-hosts")
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := routerconf.Replan(routerconf.Plan{}, routerconf.FirstCursor, entries)
	if err != nil {
		t.Fatal(err)
	}
	p.Routes, p.TrustedCA = routes, "/etc/ssl/certs/ca-certificates.crt"
	return p
}

func sandbox(t *testing.T, p routerconf.Plan) Sandbox {
	return Sandbox{
		Name: "agent-sandbox-proj-0123456789ab", Namespace: "agents", Dir: "/home/user/proj",
		RouterImage: "registry.example/team/agent-sandbox-router:1.2.3", AgentImage: "registry.example/team/agent-sandbox:1.2.3",
		ServiceIP: netip.MustParseAddr("10.96.200.53"), Plan: p,
		CloneURL: "https://git.example/team/proj.git", ProjectDir: "proj",
		Command: []string{"claude"},
		Env:     map[string]string{"DISABLE_AUTOUPDATER": "1", "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt"},
		LinkKey: testLinkKey,
	}
}

// testLinkKey is the fixtures' link key (an export makes a random one).
var testLinkKey = strings.Repeat("6c", 32)

// defaultShape is a list shaped like the shipped one (exact names,
// wildcards, a passthrough host) in names no test may reach.
const defaultShape = `# a list like the shipped allowed-hosts
api.model.example
git.example
codeload.git.example
*.githubusercontent.example
registry.packages.example
*.pkg.example
pinned.example passthrough
`

// fixtures are the golden files' sandboxes: a default list, a model API
// whose key the router adds, and host:port entries.
func fixtures(t *testing.T) map[string]Sandbox {
	out := map[string]Sandbox{"default": sandbox(t, plan(t, defaultShape))}

	cred := sandbox(t, plan(t, "api.model.example\ngit.example\n", routerconf.Route{
		Provider: "anthropic", Host: "api.model.example", GatePort: 8443, Header: "x-api-key",
		AgentHeaders: []string{"x-api-key", "authorization"}, IncludeFile: "/etc/router-credentials/anthropic.conf",
	}))
	cred.Credentials = map[string]string{"anthropic.conf": "proxy_set_header x-api-key \"sk-test-not-a-key\";\n"}
	cred.Env["ANTHROPIC_API_KEY"] = "sk-ant-placeholder"
	out["credentials"] = cred

	ports := sandbox(t, plan(t, "git.example\ngit.example:22\ndb.example:5432\n"))
	ports.Command = []string{"bash"}
	out["ports"] = ports

	// podman kube play's variant, with the router's environment a test
	// session pins.
	pm := sandbox(t, plan(t, "git.example\ngit.example:22\n"))
	pm.Runtime = RuntimePodman
	pm.ServiceIP = netip.MustParseAddr("10.89.250.53")
	pm.RouterEnv = map[string]string{"UPSTREAM_DNS": "10.89.0.10", "UPSTREAM_ALLOW": "10.89.0.0/24", "HOST_ADDRS": "192.0.2.7"}
	out["podman"] = pm
	return out
}

func render(t *testing.T, s Sandbox) []byte {
	t.Helper()
	objs, err := Manifests(s)
	if err != nil {
		t.Fatal(err)
	}
	y, err := YAML(s, objs)
	if err != nil {
		t.Fatal(err)
	}
	return y
}

func TestGolden(t *testing.T) {
	for name, s := range fixtures(t) {
		got := render(t, s)
		path := filepath.Join("testdata", name+".yaml")
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the golden file (go test -update rewrites it):\n%s", path, got)
		}
	}
}

// documents splits an export into its objects, each decoded strictly (no
// field the type does not know, none twice) into the type of its kind.
func documents(t *testing.T, y []byte) []Object {
	t.Helper()
	var out []Object
	for i, doc := range strings.Split(string(y), "\n---\n")[1:] {
		var tm typeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		var o Object
		var err error
		switch tm.Kind {
		case "ConfigMap":
			var v ConfigMap
			err, o = yaml.UnmarshalStrict([]byte(doc), &v), &v
		case "Secret":
			var v Secret
			err, o = yaml.UnmarshalStrict([]byte(doc), &v), &v
		case "Service":
			var v Service
			err, o = yaml.UnmarshalStrict([]byte(doc), &v), &v
		case "PersistentVolumeClaim":
			var v PersistentVolumeClaim
			err, o = yaml.UnmarshalStrict([]byte(doc), &v), &v
		case "NetworkPolicy":
			var v NetworkPolicy
			err, o = yaml.UnmarshalStrict([]byte(doc), &v), &v
		case "Pod":
			var v Pod
			err, o = yaml.UnmarshalStrict([]byte(doc), &v), &v
		default:
			t.Fatalf("document %d: unexpected kind %q", i, tm.Kind)
		}
		if err != nil {
			t.Fatalf("document %d (%s): %v", i, tm.Kind, err)
		}
		// What was decoded writes back to the same bytes: nothing was
		// dropped or changed on the way.
		again, err := yaml.Marshal(o)
		if err != nil || strings.TrimSpace(string(again)) != strings.TrimSpace(doc) {
			t.Fatalf("document %d (%s) does not round-trip (%v):\n%s\nagain:\n%s", i, tm.Kind, err, doc, again)
		}
		out = append(out, o)
	}
	return out
}

func pods(objs []Object) map[string]*Pod {
	out := map[string]*Pod{}
	for _, o := range objs {
		if p, ok := o.(*Pod); ok {
			out[p.Metadata.Labels[LabelRole]] = p
		}
	}
	return out
}

func allContainers(p *Pod) []Container {
	return append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...)
}

// The security properties a reader of the manifests relies on, checked on
// what a strict decoder reads back.
func TestExportHolds(t *testing.T) {
	for name, s := range fixtures(t) {
		t.Run(name, func(t *testing.T) {
			objs := documents(t, render(t, s))
			ps := pods(objs)
			router, agent := ps["router"], ps["agent"]
			if router == nil || agent == nil {
				t.Fatalf("want a router and an agent pod, got %v", ps)
			}
			for _, p := range []*Pod{router, agent} {
				if p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
					t.Errorf("pod %s mounts a service account token: the agent would hold a credential of the cluster's", p.Metadata.Name)
				}
				if p.Spec.EnableServiceLinks == nil || *p.Spec.EnableServiceLinks {
					t.Errorf("pod %s gets the namespace's services in its environment", p.Metadata.Name)
				}
				sc := p.Spec.SecurityContext
				if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.SeccompProfile == nil || sc.SeccompProfile.Type != "RuntimeDefault" {
					t.Errorf("pod %s is not non-root with the runtime's seccomp profile: %+v", p.Metadata.Name, sc)
				}
				for _, c := range allContainers(p) {
					if s.Runtime == RuntimePodman && (c.Name == "router" || c.Name == "front" || c.Name == "forwarder") {
						checkPodmanRoot(t, p, c)
						continue
					}
					if c.SecurityContext == nil || c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation ||
						c.SecurityContext.Capabilities == nil || !slices.Equal(c.SecurityContext.Capabilities.Drop, []string{"ALL"}) || len(c.SecurityContext.Capabilities.Add) > 0 {
						t.Errorf("container %s of %s is not restricted: %+v", c.Name, p.Metadata.Name, c.SecurityContext)
					}
				}
			}
			// The agent's only nameserver is the router's Service.
			var svc *Service
			for _, o := range objs {
				if v, ok := o.(*Service); ok {
					svc = v
				}
			}
			if agent.Spec.DNSPolicy != "None" || agent.Spec.DNSConfig == nil || !slices.Equal(agent.Spec.DNSConfig.Nameservers, []string{svc.Spec.ClusterIP}) || len(agent.Spec.DNSConfig.Searches) != 0 {
				t.Errorf("agent pod's DNS is not the router alone: policy %q, config %+v, service %s", agent.Spec.DNSPolicy, agent.Spec.DNSConfig, svc.Spec.ClusterIP)
			}
			if !mapsEqual(svc.Spec.Selector, map[string]string{LabelSession: s.Name, LabelRole: "router"}) {
				t.Errorf("the Service selects %v, not the router pod", svc.Spec.Selector)
			}
			// Only the router pod mounts the credentials.
			for role, p := range ps {
				for _, v := range p.Spec.Volumes {
					if v.Secret != nil && role != "router" {
						t.Errorf("the %s pod mounts Secret %s", role, v.Secret.SecretName)
					}
					if v.HostPath != nil {
						t.Errorf("the %s pod mounts the host's %s without --nested", role, v.HostPath.Path)
					}
				}
			}
			for _, o := range objs {
				sec, ok := o.(*Secret)
				switch {
				case !ok:
				case sec.Metadata.Name == s.Name+"-link":
					if s.Runtime == RuntimePodman || !mapsEqual(sec.StringData, map[string]string{"key": s.LinkKey}) {
						t.Errorf("Secret %s holds %v, want the link key alone (and none under podman)", sec.Metadata.Name, sec.StringData)
					}
				case len(s.Credentials) == 0 || !mapsEqual(sec.StringData, s.Credentials):
					t.Errorf("Secret %s holds %v, want the credentials %v", sec.Metadata.Name, sec.StringData, s.Credentials)
				}
			}
			checkLinkKey(t, s, router, agent)
			for _, o := range objs {
				if cm, ok := o.(*ConfigMap); ok && cm.Metadata.Name == s.Name+"-router" {
					for name, body := range cm.Data {
						if name != "dnsmasq.conf" && strings.Contains(body, "0.0.0.0") {
							t.Errorf("router file %s listens on the pod's every address, around the front:\n%s", name, body)
						}
					}
				}
			}
			// The agent's credentials are placeholders: no credential
			// file's content is in the agent pod.
			for _, c := range allContainers(agent) {
				for _, e := range c.Env {
					for _, body := range s.Credentials {
						if strings.Contains(body, e.Value) && e.Value != "" && len(e.Value) > 8 {
							t.Errorf("agent container %s has %s=%s, which is in a credential file", c.Name, e.Name, e.Value)
						}
					}
				}
			}
			checkPolicies(t, s, objs)
		})
	}
}

// checkLinkKey: the agent pod's forwarder and the router's front alone
// have the link key, from its Secret in a cluster; the front takes every
// router port the Service gives the agent pod but DNS and the CA's.
func checkLinkKey(t *testing.T, s Sandbox, router, agent *Pod) {
	t.Helper()
	holders := map[string]bool{}
	for _, p := range []*Pod{router, agent} {
		for _, c := range allContainers(p) {
			for _, e := range c.Env {
				if strings.Contains(e.Value, s.LinkKey) || (e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil) {
					holders[p.Metadata.Name+"/"+c.Name+"/"+e.Name] = true
					fromSecret := e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && *e.ValueFrom.SecretKeyRef == (SecretKeySelector{Name: s.Name + "-link", Key: "key"})
					if e.Name != "LINK_KEY" || (s.Runtime == RuntimePodman) == fromSecret {
						t.Errorf("%s/%s has the link key as %s=%q (%+v): want LINK_KEY, from the Secret in a cluster", p.Metadata.Name, c.Name, e.Name, e.Value, e.ValueFrom)
					}
				}
			}
		}
	}
	want := map[string]bool{s.Name + "-router/front/LINK_KEY": true, s.Name + "-agent/forwarder/LINK_KEY": true}
	if !maps.Equal(holders, want) {
		t.Errorf("the link key is in %v, want %v alone", holders, want)
	}
	var forwards string
	for _, c := range router.Spec.Containers {
		for _, e := range c.Env {
			if c.Name == "front" && e.Name == "FORWARDS" {
				forwards = e.Value
			}
		}
	}
	for _, port := range s.Plan.RouterPorts() {
		if !strings.Contains(forwards, fmt.Sprintf(":%d=127.0.0.1:%d", port, port)) {
			t.Errorf("the front does not take router port %d: %s", port, forwards)
		}
	}
}

// checkPodmanRoot: the containers that bind low ports under podman run as
// root of the user namespace, unescalated; the forwarders with
// NET_BIND_SERVICE alone, the router with podman's default set.
func checkPodmanRoot(t *testing.T, p *Pod, c Container) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("container %s of %s: %+v, want root of the user namespace without escalation", c.Name, p.Metadata.Name, sc)
		return
	}
	switch {
	case c.Name == "router" && sc.Capabilities != nil:
		t.Errorf("the router under podman has capabilities %+v, want podman's default set as a local session's", sc.Capabilities)
	case c.Name != "router" && (sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) || !slices.Equal(sc.Capabilities.Add, []string{"NET_BIND_SERVICE"})):
		t.Errorf("container %s of %s has capabilities %+v, want NET_BIND_SERVICE alone", c.Name, p.Metadata.Name, sc.Capabilities)
	case c.Name != "router" && (sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem):
		t.Errorf("container %s of %s has a writable root", c.Name, p.Metadata.Name)
	}
}

// The podman variant differs where podman kube play differs, and nowhere
// else: the forwarder beside the agent, which clones before it runs; the
// router's address given, not looked up; no credentials.
func TestPodmanVariant(t *testing.T) {
	s := fixtures(t)["podman"]
	objs := documents(t, render(t, s))
	ps := pods(objs)
	agent, router := ps["agent"], ps["router"]
	var inits, cs []string
	for _, c := range agent.Spec.InitContainers {
		inits = append(inits, c.Name)
	}
	for _, c := range agent.Spec.Containers {
		cs = append(cs, c.Name)
		if c.RestartPolicy != "" {
			t.Errorf("container %s has restartPolicy %s", c.Name, c.RestartPolicy)
		}
	}
	if !slices.Equal(inits, []string{"trust"}) || !slices.Equal(cs, []string{"forwarder", "agent"}) {
		t.Errorf("agent pod: init %v, containers %v; want [trust] and [forwarder agent]", inits, cs)
	}
	a := agent.Spec.Containers[1]
	if len(a.Command) < 4 || a.Command[2] != cloneThenRun || !slices.Equal(a.Command[4:], s.Command) {
		t.Errorf("the agent's command %q does not clone and then run %q", a.Command, s.Command)
	}
	envOf := func(c Container) map[string]string {
		m := map[string]string{}
		for _, e := range c.Env {
			if e.ValueFrom != nil {
				t.Errorf("container %s takes %s from %+v: podman refuses fieldRef", c.Name, e.Name, e.ValueFrom)
			}
			m[e.Name] = e.Value
		}
		return m
	}
	if e := envOf(a); e["CLONE_URL"] != s.CloneURL || e["PROJECT"] != "/workspace/proj" {
		t.Errorf("the agent's clone variables: %v", e)
	}
	re := envOf(router.Spec.Containers[0])
	if re["READY_ADDR"] != s.ServiceIP.String() {
		t.Errorf("READY_ADDR %q, want the address the pod is played at, %s", re["READY_ADDR"], s.ServiceIP)
	}
	for k, v := range s.RouterEnv {
		if re[k] != v {
			t.Errorf("router %s = %q, want %q", k, re[k], v)
		}
	}
	// A cluster's export takes the router's address from the pod.
	k8s := fixtures(t)["default"]
	kr := pods(documents(t, render(t, k8s)))["router"].Spec.Containers[0]
	if kr.Env[0].Name != "READY_ADDR" || kr.Env[0].ValueFrom == nil {
		t.Errorf("the cluster's router: %+v", kr.Env[0])
	}

	// Each volume is the sandbox's own (podman shares an emptyDir by its
	// name), no pod shares one with the other, and nothing is mounted by
	// subPath (podman mounts the whole volume there).
	seen := map[string]string{}
	for role, p := range ps {
		for _, v := range p.Spec.Volumes {
			if !strings.HasPrefix(v.Name, s.Name+"-") {
				t.Errorf("the %s pod's volume %s is not named for the sandbox", role, v.Name)
			}
			if other, ok := seen[v.Name]; ok {
				t.Errorf("volume %s is in the %s pod and the %s pod", v.Name, other, role)
			}
			seen[v.Name] = role
		}
		for _, c := range allContainers(p) {
			for _, m := range c.VolumeMounts {
				if m.SubPath != "" {
					t.Errorf("%s mounts %s by subPath", c.Name, m.MountPath)
				}
			}
		}
	}
	if e := envOf(a); e["SSL_CERT_FILE"] != "/run/agent-sandbox-trust/ca-certificates.crt" {
		t.Errorf("the agent's SSL_CERT_FILE %q is not the bundle the trust step fetched", e["SSL_CERT_FILE"])
	}

	s.Credentials = map[string]string{"anthropic.conf": "x"}
	if _, err := Manifests(s); err == nil || !strings.Contains(err.Error(), "base64") {
		t.Errorf("podman with credentials: %v", err)
	}
	s.Credentials, s.Runtime = nil, "docker"
	if _, err := Manifests(s); err == nil {
		t.Error("an unknown runtime was accepted")
	}
	s.Runtime, s.RouterEnv = RuntimePodman, map[string]string{"INSPECT_SOCKET": "/x"}
	if _, err := Manifests(s); err == nil {
		t.Error("a router variable the export sets itself was accepted from RouterEnv")
	}
}

func checkPolicies(t *testing.T, s Sandbox, objs []Object) {
	t.Helper()
	got := map[string]*NetworkPolicy{}
	for _, o := range objs {
		if np, ok := o.(*NetworkPolicy); ok {
			got[np.Metadata.Labels[LabelRole]] = np
		}
	}
	agent, router := got["agent"], got["router"]
	if agent == nil || router == nil {
		t.Fatalf("want a policy for each pod, got %v", got)
	}
	for _, np := range []*NetworkPolicy{agent, router} {
		if !slices.Equal(np.Spec.PolicyTypes, []string{"Ingress", "Egress"}) {
			t.Errorf("%s does not govern both directions: %v", np.Metadata.Name, np.Spec.PolicyTypes)
		}
	}
	if len(agent.Spec.Ingress) != 0 {
		t.Errorf("something may reach the agent's pod: %+v", agent.Spec.Ingress)
	}
	if len(agent.Spec.Egress) != 1 || len(agent.Spec.Egress[0].To) != 1 || agent.Spec.Egress[0].To[0].PodSelector == nil ||
		agent.Spec.Egress[0].To[0].IPBlock != nil || agent.Spec.Egress[0].To[0].NamespaceSelector != nil ||
		!mapsEqual(agent.Spec.Egress[0].To[0].PodSelector.MatchLabels, map[string]string{LabelSession: s.Name, LabelRole: "router"}) {
		t.Errorf("the agent's pod may reach more than its router: %+v", agent.Spec.Egress)
	}
	for _, r := range router.Spec.Egress {
		for _, peer := range r.To {
			if peer.IPBlock != nil && !slices.Equal(peer.IPBlock.Except, privateRanges) {
				t.Errorf("the router may reach private ranges: %+v", peer.IPBlock)
			}
		}
	}
	if len(router.Spec.Ingress) != 1 || len(router.Spec.Ingress[0].From) != 1 ||
		!mapsEqual(router.Spec.Ingress[0].From[0].PodSelector.MatchLabels, map[string]string{LabelSession: s.Name, LabelRole: "agent"}) {
		t.Errorf("more than the agent's pod may reach the router: %+v", router.Spec.Ingress)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// The shipped list exports as the fixtures do (its names stay in the
// file: no golden copy of them).
func TestShippedList(t *testing.T) {
	shipped, err := os.ReadFile("../../allowed-hosts")
	if err != nil {
		t.Fatal(err)
	}
	s := sandbox(t, plan(t, string(shipped)))
	objs := documents(t, render(t, s))
	if p := pods(objs); p["router"] == nil || p["agent"] == nil {
		t.Fatalf("the shipped list's export has pods %v", p)
	}
	checkPolicies(t, s, objs)
}

func TestNestedNeedsPrivileged(t *testing.T) {
	s := fixtures(t)["default"]
	if s.Level() != LevelRestricted {
		t.Errorf("level %q without --nested", s.Level())
	}
	s.Nested = true
	if s.Level() != LevelPrivileged {
		t.Errorf("level %q with --nested", s.Level())
	}
	y := render(t, s)
	if !bytes.Contains(y, []byte(`admits "privileged"`)) || !bytes.Contains(y, []byte("path: /dev/fuse")) {
		t.Errorf("--nested's export does not name its level or pass /dev/fuse:\n%s", y)
	}
}

func TestNamesAndAddresses(t *testing.T) {
	for _, bad := range []string{"", "Upper", "-lead", "trail-", "has_underscore", strings.Repeat("a", MaxNameLen+1)} {
		if CheckName(bad) == nil {
			t.Errorf("name %q was accepted", bad)
		}
	}
	if err := CheckName("agent-sandbox-proj-0123456789ab"); err != nil {
		t.Error(err)
	}
	seen := map[netip.Addr]string{}
	for _, n := range []string{"a", "b", "agent-sandbox-proj-0123456789ab", "agent-sandbox-other-ba9876543210"} {
		ip := DefaultServiceIP(n)
		if !netip.MustParsePrefix("10.96.128.0/17").Contains(ip) || ip.As4()[3] == 0 || ip.As4()[3] == 255 {
			t.Errorf("%s got %s, outside 10.96.128.0/17 or a .0/.255", n, ip)
		}
		if other, ok := seen[ip]; ok {
			t.Errorf("%s and %s got the same address %s", n, other, ip)
		}
		seen[ip] = n
	}
	s := fixtures(t)["default"]
	s.CloneURL = ""
	if _, err := Manifests(s); err == nil {
		t.Error("a sandbox without a repository to clone was written")
	}
}
