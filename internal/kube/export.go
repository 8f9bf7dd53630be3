// Package kube writes the Kubernetes manifests of one sandbox: the same
// router image, allowlist plan and credential rule as a local session, in
// a cluster's objects. Every function is pure: the same Sandbox gives the
// same bytes (golden files under testdata/).
package kube

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/routerconf"
	"sigs.k8s.io/yaml"
)

// Labels on every object: the session's, as local sessions put on theirs,
// and the part each pod plays, which the Service and the policies select.
const (
	LabelSession = "agent-sandbox.session"
	LabelRole    = "agent-sandbox.role"
	// AnnotationDir is the launch dir the export was made from (a path is
	// no label value).
	AnnotationDir = "agent-sandbox.dir"
)

// CAPort is where the router serves the session CA's bundle (routerd's
// CA_LISTEN) to the agent pod's trust step: the certificate, never the key.
const CAPort = 8079

// Pod Security levels: what a namespace must admit for the export.
const (
	LevelRestricted = "restricted"
	LevelPrivileged = "privileged"
)

// The runtimes an export is for.
const (
	// RuntimeKubernetes is a cluster's: every property TestExportHolds
	// checks.
	RuntimeKubernetes = "kubernetes"
	// RuntimePodman is `podman kube play` on one machine (4.3 and later),
	// which differs from a cluster where the export relies on it: it does
	// not apply a pod's sysctls, so uid 1000 cannot bind the router's and
	// the forwarder's low ports (they run as root of the rootless user
	// namespace, as in a local session); it runs an init container with
	// restartPolicy Always to its end, so the agent's forwarder is a
	// container beside the agent, which clones the project itself once the
	// forwarder answers; it refuses fieldRef (READY_ADDR is the Service's
	// address, which the pod gets with --ip); and it mounts a Secret as its
	// base64 text, so it takes no credentials.
	RuntimePodman = "podman"
)

// uid and gid of the agent (as in a local session: the image's user) and
// of the router's processes.
const sandboxUID = 1000

// Paths inside the pods.
const (
	routerConfigDir     = "/etc/router"
	routerCredentialDir = "/etc/router-credentials"
	routerCADir         = "/run/agent-sandbox-ca"
	forwarderConfigDir  = "/etc/agent-sandbox"
	trustDir            = "/run/agent-sandbox-trust"
	workspaceDir        = "/workspace"
	homeDir             = "/home/claude"
	systemBundle        = "/etc/ssl/certs/ca-certificates.crt"
	forwarderBinary     = "/usr/local/bin/forwarder"
	// routerdRunDir is routerd's own (router-image/routerd defaultRunDir).
	routerdRunDir = "/run/routerd"
)

// Sandbox is everything one export says. The caller decides it (from the
// user's allowlist, credentials and flags); Manifests only writes it down.
type Sandbox struct {
	// Name prefixes every object's name; it is the session label's value.
	Name      string
	Namespace string
	// Dir is the launch dir it was made from, for the annotation.
	Dir string
	// RouterImage also runs the forwarders; AgentImage runs the agent,
	// the trust step and the clone.
	RouterImage, AgentImage string
	// ServiceIP is the router Service's cluster IP: the agent pod's only
	// nameserver, and where its forwarder relays.
	ServiceIP netip.Addr
	// Plan is the router's plan, as a session's (routes and forge
	// included); Render gives the router's files.
	Plan routerconf.Plan
	// ExtraRouterFiles go into the router's config beside the plan's
	// (the CA bundle AGENT_SANDBOX_UPSTREAM_CA names).
	ExtraRouterFiles map[string]string
	// Credentials are the router's credential files (name to content),
	// the same a local session writes; none when nothing is injected.
	Credentials map[string]string
	// CloneURL is the project's remote, cloned into the workspace by an
	// init container; ProjectDir is the clone's name there.
	CloneURL, ProjectDir string
	// Command is the agent's; Env its variables (placeholders, the CA
	// variables, --env's), set as given.
	Command []string
	Env     map[string]string
	// Nested passes /dev/fuse and /dev/net/tun for nested containers,
	// which only the privileged level admits.
	Nested bool
	// HomeSize is the home claim's request.
	HomeSize string
	// Runtime is RuntimeKubernetes ("" too) or RuntimePodman.
	Runtime string
	// LinkKey (64 hex digits, random for each export) is what the agent
	// pod's forwarder sends first on each connection to the router, and
	// what the router's front lets in alone (forwarder/link.go): it keeps
	// every other pod from the router, whatever the network lets through.
	LinkKey string
	// RouterEnv is routerd's environment beyond what the export sets, as
	// a session gives it: a pinned upstream resolver and the ranges its
	// answers may fall in (UPSTREAM_DNS, UPSTREAM_ALLOW), the host's own
	// addresses (HOST_ADDRS).
	RouterEnv map[string]string
}

func (s Sandbox) podman() bool { return s.Runtime == RuntimePodman }

// Level is the Pod Security level the namespace must enforce at most for
// s's pods to be admitted.
func (s Sandbox) Level() string {
	if s.Nested {
		return LevelPrivileged
	}
	return LevelRestricted
}

var linkKeyRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// nameRE is a DNS-1123 label: what a Service's name must be, and so every
// name here.
var nameRE = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

// MaxNameLen leaves room for the longest suffix (-forwarder-agent...) in
// a 63-byte label.
const MaxNameLen = 63 - len("-router-policy")

// CheckName says what is wrong with a sandbox name, nil when nothing.
func CheckName(name string) error {
	if len(name) > MaxNameLen || !nameRE.MatchString(name) {
		return fmt.Errorf("name %q is not a valid sandbox name: use at most %d lowercase letters, digits and '-', starting with a letter", name, MaxNameLen)
	}
	return nil
}

// DefaultServiceIP picks the router Service's address for name in
// 10.96.128.0/17: inside the service range of kubeadm (10.96.0.0/12) and
// kind (10.96.0.0/16) clusters, clear of the addresses they give the API
// and DNS services, and different for different names. A cluster with
// another range needs --service-ip.
func DefaultServiceIP(name string) netip.Addr {
	sum := sha256.Sum256([]byte(name))
	n := binary.BigEndian.Uint16(sum[:2]) & 0x7fff
	if n&0xff == 0 || n&0xff == 0xff {
		n ^= 1
	}
	return netip.AddrFrom4([4]byte{10, 96, byte(0x80 | n>>8), byte(n)})
}

// privateRanges are where the router may not connect in a cluster: the
// cluster's own pods, services and nodes, the LAN, the metadata service.
// routerd's resolver drops such answers too; the policy holds even for an
// address the agent names itself.
var privateRanges = []string{"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16", "224.0.0.0/4", "240.0.0.0/4"}

// Manifests are s's objects in the order kubectl applies them: config,
// claim, the router's Service, policies, then the pods.
func Manifests(s Sandbox) ([]Object, error) {
	if err := CheckName(s.Name); err != nil {
		return nil, err
	}
	if !s.ServiceIP.Is4() {
		return nil, errors.New("the router's service IP must be an IPv4 address")
	}
	if s.CloneURL == "" || s.ProjectDir == "" || strings.ContainsAny(s.ProjectDir, "/\x00") || s.ProjectDir == "." || s.ProjectDir == ".." {
		return nil, errors.New("a sandbox needs a repository to clone and a directory name for it")
	}
	if s.HomeSize == "" {
		s.HomeSize = "10Gi"
	}
	switch s.Runtime {
	case "", RuntimeKubernetes, RuntimePodman:
	default:
		return nil, fmt.Errorf("unknown runtime %q: want %s or %s", s.Runtime, RuntimeKubernetes, RuntimePodman)
	}
	if s.podman() && len(s.Credentials) > 0 {
		return nil, errors.New("podman kube play mounts a Secret as its base64 text, so the router would send that in place of your credentials: export for podman without credentials (unset them), or for a cluster")
	}
	if !linkKeyRE.MatchString(s.LinkKey) {
		return nil, errors.New("a sandbox needs a link key of 64 lowercase hex digits")
	}
	for k := range s.RouterEnv {
		switch k {
		case "UPSTREAM_DNS", "UPSTREAM_ALLOW", "HOST_ADDRS":
		default:
			return nil, fmt.Errorf("router variable %s is not one the export passes on", k)
		}
	}
	objs := []Object{s.routerConfig(), s.agentConfig()}
	if len(s.Credentials) > 0 {
		objs = append(objs, s.credentials())
	}
	if !s.podman() {
		objs = append(objs, s.link())
	}
	objs = append(objs, s.home(), s.service(), s.agentPolicy(), s.routerPolicy(), s.routerPod(), s.agentPod())
	return objs, nil
}

// YAML writes objs as one stream of documents, with a header that names
// the Pod Security level the namespace needs.
func YAML(s Sandbox, objs []Object) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# agent-sandbox: the sandbox %s, generated; do not edit.\n", s.Name)
	fmt.Fprintf(&b, "# Its pods need a namespace whose Pod Security level admits %q,\n", s.Level())
	b.WriteString("# and a network plugin that enforces NetworkPolicy.\n")
	for _, o := range objs {
		y, err := yaml.Marshal(o)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", o.kind(), o.meta().Name, err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.Bytes(), nil
}

func (s Sandbox) metaFor(suffix, role string) Meta {
	m := Meta{Name: s.Name + suffix, Namespace: s.Namespace, Labels: map[string]string{LabelSession: s.Name}}
	if role != "" {
		m.Labels[LabelRole] = role
	}
	if s.Dir != "" {
		m.Annotations = map[string]string{AnnotationDir: s.Dir}
	}
	return m
}

func (s Sandbox) selector(role string) map[string]string {
	return map[string]string{LabelSession: s.Name, LabelRole: role}
}

func v1(kind string) typeMeta { return typeMeta{APIVersion: "v1", Kind: kind} }

// routerConfig is what a session writes into its dir for the router: the
// plan rendered for a router behind its front, which alone takes the pod's
// TCP ports (the agent pod's forwarder has its own pairs, agentConfig).
func (s Sandbox) routerConfig() ConfigMap {
	data := map[string]string{}
	for _, f := range s.Plan.RenderFronted() {
		data[f.Name] = f.Body
	}
	for name, body := range s.ExtraRouterFiles {
		data[name] = body
	}
	return ConfigMap{typeMeta: v1("ConfigMap"), Metadata: s.metaFor("-router", "router"), Data: data}
}

// agentConfig is the agent pod's forwarder's pairs: to the router's
// Service over TCP.
func (s Sandbox) agentConfig() ConfigMap {
	return ConfigMap{typeMeta: v1("ConfigMap"), Metadata: s.metaFor("-forwarder", "agent"),
		Data: map[string]string{"forwards": s.Plan.ForwardsVia(s.ServiceIP.String()) + "\n"}}
}

func (s Sandbox) credentials() Secret {
	return Secret{typeMeta: v1("Secret"), Metadata: s.metaFor("-credentials", "router"), Type: "Opaque", StringData: s.Credentials}
}

// linkSecret names the Secret of the link key, and linkSecretKey its key.
const linkSecretKey = "key"

func (s Sandbox) linkSecret() string { return s.Name + "-link" }

// link is the Secret of the link key: the agent pod's forwarder and the
// router's front take it as a variable, no other container.
func (s Sandbox) link() Secret {
	return Secret{typeMeta: v1("Secret"), Metadata: s.metaFor("-link", ""), Type: "Opaque", StringData: map[string]string{linkSecretKey: s.LinkKey}}
}

// linkKeyVar is LINK_KEY for a forwarder: from the Secret in a cluster;
// under podman, which takes no Secret here (Runtime), the key itself.
func (s Sandbox) linkKeyVar() EnvVar {
	if s.podman() {
		return EnvVar{Name: "LINK_KEY", Value: s.LinkKey}
	}
	return EnvVar{Name: "LINK_KEY", ValueFrom: &EnvVarSource{SecretKeyRef: &SecretKeySelector{Name: s.linkSecret(), Key: linkSecretKey}}}
}

func (s Sandbox) home() PersistentVolumeClaim {
	return PersistentVolumeClaim{typeMeta: v1("PersistentVolumeClaim"), Metadata: s.metaFor("-home", "agent"),
		Spec: ClaimSpec{AccessModes: []string{"ReadWriteOnce"}, Resources: VolumeResourceNeeds{Requests: map[string]string{"storage": s.HomeSize}}}}
}

// routerPorts are the router's ports the agent's pod reaches: DNS, TLS,
// the CA's bundle and each host:port entry's.
func (s Sandbox) routerPorts() []ServicePort {
	ports := []ServicePort{
		{Name: "dns-udp", Protocol: "UDP", Port: 53, TargetPort: 53},
		{Name: "dns-tcp", Protocol: "TCP", Port: 53, TargetPort: 53},
		{Name: "tls", Protocol: "TCP", Port: 443, TargetPort: 443},
		{Name: "ca", Protocol: "TCP", Port: CAPort, TargetPort: CAPort},
	}
	for _, p := range s.Plan.RouterPorts() {
		ports = append(ports, ServicePort{Name: "entry-" + strconv.Itoa(p), Protocol: "TCP", Port: p, TargetPort: p})
	}
	return ports
}

func (s Sandbox) service() Service {
	return Service{typeMeta: v1("Service"), Metadata: s.metaFor("-router", "router"),
		Spec: ServiceSpec{ClusterIP: s.ServiceIP.String(), Selector: s.selector("router"), Ports: s.routerPorts()}}
}

func policyPorts(ports []ServicePort) []PolicyPort {
	var out []PolicyPort
	for _, p := range ports {
		out = append(out, PolicyPort{Protocol: p.Protocol, Port: p.TargetPort})
	}
	return out
}

func networkPolicy(meta Meta, pods map[string]string, ingress, egress []PolicyRule) NetworkPolicy {
	if ingress == nil {
		ingress = []PolicyRule{}
	}
	return NetworkPolicy{typeMeta: typeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"}, Metadata: meta,
		Spec: NetworkPolicySpec{PodSelector: LabelSelector{MatchLabels: pods}, PolicyTypes: []string{"Ingress", "Egress"}, Ingress: ingress, Egress: egress}}
}

// agentPolicy: the agent's pod reaches the router's ports and nothing
// else, and nothing reaches it.
func (s Sandbox) agentPolicy() NetworkPolicy {
	return networkPolicy(s.metaFor("-agent-policy", "agent"), s.selector("agent"), nil,
		[]PolicyRule{{To: []PolicyPeer{{PodSelector: &LabelSelector{MatchLabels: s.selector("router")}}}, Ports: policyPorts(s.routerPorts())}})
}

// routerPolicy: only the agent's pod reaches the router; the router
// reaches the cluster's DNS (its upstream resolver) and addresses outside
// every private range, on any port (a host:port entry's).
func (s Sandbox) routerPolicy() NetworkPolicy {
	in := []PolicyRule{{From: []PolicyPeer{{PodSelector: &LabelSelector{MatchLabels: s.selector("agent")}}}, Ports: policyPorts(s.routerPorts())}}
	out := []PolicyRule{
		{To: []PolicyPeer{{
			NamespaceSelector: &LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}},
			PodSelector:       &LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
		}}, Ports: []PolicyPort{{Protocol: "UDP", Port: 53}, {Protocol: "TCP", Port: 53}}},
		{To: []PolicyPeer{{IPBlock: &IPBlock{CIDR: "0.0.0.0/0", Except: slices.Clone(privateRanges)}}}},
	}
	return networkPolicy(s.metaFor("-router-policy", "router"), s.selector("router"), in, out)
}

func ptr[T any](v T) *T { return &v }

// podSecurity is both pods': a non-root uid, the runtime's seccomp
// profile, and low ports open to it (a namespaced sysctl the restricted
// level admits: an added capability does nothing for a non-root uid).
func podSecurity() *PodSecurityContext {
	return &PodSecurityContext{RunAsNonRoot: ptr(true), RunAsUser: ptr(int64(sandboxUID)), RunAsGroup: ptr(int64(sandboxUID)), FSGroup: ptr(int64(sandboxUID)),
		SeccompProfile: &SeccompProfile{Type: "RuntimeDefault"},
		Sysctls:        []Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}}}
}

// restricted is a container's security context at the restricted level:
// no capability, no privilege escalation.
func restricted() *SecurityContext {
	return &SecurityContext{AllowPrivilegeEscalation: ptr(false), Capabilities: &Capabilities{Drop: []string{"ALL"}}}
}

// asRoot is the security context of a podman container that binds low
// ports: root of the rootless user namespace, with caps (nil: podman's
// default set) and no escalation.
func asRoot(caps []string) *SecurityContext {
	sc := &SecurityContext{RunAsUser: ptr(int64(0)), RunAsNonRoot: ptr(false), AllowPrivilegeEscalation: ptr(false)}
	if caps != nil {
		sc.Capabilities = &Capabilities{Drop: []string{"ALL"}, Add: caps}
	}
	return sc
}

func env(m map[string]string) []EnvVar {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []EnvVar
	for _, k := range keys {
		out = append(out, EnvVar{Name: k, Value: m[k]})
	}
	return out
}

// routerPod runs routerd (dnsmasq, nginx, the inspecting proxy) and the
// front: the forwarder that screens the cluster's TLS for ECH before nginx
// sees it, since in a cluster the agent can reach the router's port 443
// around its own pod's forwarder.
func (s Sandbox) routerPod() Pod {
	mounts := []VolumeMount{
		{Name: "config", MountPath: routerConfigDir, ReadOnly: true},
		{Name: "tls", MountPath: routerconf.TLSSocketDir},
		{Name: "ca", MountPath: routerCADir},
		// nginx's pid and temp files, and the proxy's sockets: the
		// router's own, as in a local session.
		{Name: "tmp", MountPath: routerconf.APIRelayDir},
		{Name: "nginx", MountPath: "/var/lib/nginx"},
		// routerd's copies of dnsmasq's config: root's /run is not
		// uid 1000's to write.
		{Name: "run", MountPath: routerdRunDir},
	}
	vols := []Volume{
		{Name: "config", ConfigMap: &ConfigMapVolume{Name: s.Name + "-router"}},
		{Name: "tls", EmptyDir: &EmptyDirVolume{}},
		{Name: "ca", EmptyDir: &EmptyDirVolume{Medium: "Memory"}},
		{Name: "tmp", EmptyDir: &EmptyDirVolume{}},
		{Name: "nginx", EmptyDir: &EmptyDirVolume{}},
		{Name: "run", EmptyDir: &EmptyDirVolume{Medium: "Memory"}},
	}
	if len(s.Credentials) > 0 {
		mounts = append(mounts, VolumeMount{Name: "credentials", MountPath: routerCredentialDir, ReadOnly: true})
		vols = append(vols, Volume{Name: "credentials", Secret: &SecretVolume{SecretName: s.Name + "-credentials", DefaultMode: ptr(int32(0o400))}})
	}
	readyAddr := EnvVar{Name: "READY_ADDR", ValueFrom: &EnvVarSource{FieldRef: &FieldSelector{FieldPath: "status.podIP"}}}
	routerSecurity, frontSecurity := restricted(), restricted()
	if s.podman() {
		// The pod is played with --ip at the Service's address.
		readyAddr = EnvVar{Name: "READY_ADDR", Value: s.ServiceIP.String()}
		// dnsmasq starts as root and drops to nobody, as in a local
		// session's router: the default capabilities, no escalation.
		routerSecurity, frontSecurity = asRoot(nil), asRoot([]string{"NET_BIND_SERVICE"})
	}
	router := Container{
		Name: "router", Image: s.RouterImage,
		Env: append([]EnvVar{
			readyAddr,
			{Name: "TLS_SOCKET", Value: routerconf.TLSSocket},
			{Name: "INSPECT_SOCKET", Value: routerconf.InspectSocket},
			{Name: "CA_DIR", Value: routerCADir},
			{Name: "CA_LISTEN", Value: "0.0.0.0:" + strconv.Itoa(CAPort)},
		}, env(s.RouterEnv)...),
		VolumeMounts: mounts, SecurityContext: routerSecurity,
	}
	// The front's pairs to the host:port entries' servers listen on the
	// pod's own address: the kubelet gives it in POD_IP and puts it into
	// FORWARDS; podman plays the pod at the Service's address.
	frontEnv := []EnvVar{{Name: "POD_IP", ValueFrom: &EnvVarSource{FieldRef: &FieldSelector{FieldPath: "status.podIP"}}},
		{Name: "FORWARDER_ROLE", Value: "front"}, {Name: "FORWARDS", Value: s.Plan.FrontForwards("$(POD_IP)")}, s.linkKeyVar()}
	if s.podman() {
		frontEnv = []EnvVar{{Name: "FORWARDER_ROLE", Value: "front"}, {Name: "FORWARDS", Value: s.Plan.FrontForwards(s.ServiceIP.String())}, s.linkKeyVar()}
	}
	front := Container{
		Name: "front", Image: s.RouterImage, Command: []string{forwarderBinary},
		Env:             frontEnv,
		VolumeMounts:    []VolumeMount{{Name: "tls", MountPath: routerconf.TLSSocketDir, ReadOnly: true}},
		SecurityContext: frontSecurity,
	}
	front.SecurityContext.ReadOnlyRootFilesystem = ptr(true)
	p := Pod{typeMeta: v1("Pod"), Metadata: s.metaFor("-router", "router"), Spec: PodSpec{
		AutomountServiceAccountToken: ptr(false), EnableServiceLinks: ptr(false),
		RestartPolicy: "Always", SecurityContext: podSecurity(),
		Containers: []Container{router, front}, Volumes: vols,
	}}
	if s.podman() {
		s.ownVolumes(&p)
	}
	return p
}

// ownVolumes gives every volume of p a name of the sandbox's own. podman
// kube play (4.3) makes an emptyDir a named volume of the volume's name,
// shared by every pod that names one the same: another sandbox's router
// would share this one's TLS socket and CA directory, and its agent this
// one's workspace.
func (s Sandbox) ownVolumes(p *Pod) {
	for i := range p.Spec.Volumes {
		p.Spec.Volumes[i].Name = s.Name + "-" + p.Spec.Volumes[i].Name
	}
	for _, cs := range [][]Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			for j := range cs[i].VolumeMounts {
				cs[i].VolumeMounts[j].Name = s.Name + "-" + cs[i].VolumeMounts[j].Name
			}
		}
	}
}

// gitCAVar points the clone's git at the session's bundle (the agent's
// own CA variables are the caller's, in Env).
const gitCAVar = "GIT_SSL_CAINFO"

// cloneThenRun is the podman agent's start: clone the project unless a
// restart finds it there, retrying while the forwarder beside it is not
// yet up (git removes a failed clone), then run the agent's command.
const cloneThenRun = `if ! test -e "$PROJECT/.git"; then
  n=0
  until git clone -q -- "$CLONE_URL" "$PROJECT"; do
    n=$((n+1)); [ "$n" -lt 30 ] || exit 1; sleep 1
  done
fi
cd "$PROJECT" && exec "$@"`

// agentPod runs the agent with its forwarder beside it (a sidecar that
// starts first and runs as long as the pod), after two steps: fetch the
// session CA's bundle from the router (the agent trusts it in place of the
// image's bundle), and clone the project into the workspace when it is not
// there yet.
func (s Sandbox) agentPod() Pod {
	bundle := trustDir + "/ca-certificates.crt"
	forwarder := Container{
		Name: "forwarder", Image: s.RouterImage, Command: []string{forwarderBinary}, RestartPolicy: "Always",
		Env:             []EnvVar{{Name: "FORWARDS_FILE", Value: forwarderConfigDir + "/forwards"}, s.linkKeyVar()},
		VolumeMounts:    []VolumeMount{{Name: "forwards", MountPath: forwarderConfigDir, ReadOnly: true}},
		SecurityContext: restricted(),
	}
	forwarder.SecurityContext.ReadOnlyRootFilesystem = ptr(true)
	trust := Container{
		Name: "trust", Image: s.AgentImage,
		// The bundle is the router's to give: the certificate only, over
		// the pod's one way out.
		Command: []string{"sh", "-c", `curl -fsS --retry 60 --retry-delay 1 --retry-all-errors -o "$BUNDLE.tmp" "$CA_URL" && mv "$BUNDLE.tmp" "$BUNDLE"`},
		Env: []EnvVar{
			{Name: "CA_URL", Value: fmt.Sprintf("http://%s:%d/bundle.pem", s.ServiceIP, CAPort)},
			{Name: "BUNDLE", Value: bundle},
		},
		VolumeMounts:    []VolumeMount{{Name: "trust", MountPath: trustDir}},
		SecurityContext: restricted(),
	}
	project := workspaceDir + "/" + s.ProjectDir
	cloneEnv := map[string]string{}
	for k, v := range s.Env {
		cloneEnv[k] = v
	}
	cloneEnv[gitCAVar], cloneEnv["CLONE_URL"], cloneEnv["PROJECT"], cloneEnv["HOME"] = bundle, s.CloneURL, project, "/tmp"
	clone := Container{
		Name: "clone", Image: s.AgentImage,
		// Once: a restarted pod keeps the agent's work.
		Command:         []string{"sh", "-c", `test -e "$PROJECT/.git" || git clone -- "$CLONE_URL" "$PROJECT"`},
		Env:             env(cloneEnv),
		VolumeMounts:    []VolumeMount{{Name: "workspace", MountPath: workspaceDir}, {Name: "trust", MountPath: trustDir, ReadOnly: true}},
		SecurityContext: restricted(),
	}
	agent := Container{
		Name: "agent", Image: s.AgentImage, Command: s.Command, WorkingDir: project,
		Env: env(s.Env), Stdin: true, TTY: true,
		VolumeMounts: []VolumeMount{
			{Name: "home", MountPath: homeDir},
			{Name: "workspace", MountPath: workspaceDir},
			{Name: "trust", MountPath: systemBundle, SubPath: "ca-certificates.crt", ReadOnly: true},
		},
		SecurityContext: restricted(),
	}
	vols := []Volume{
		{Name: "forwards", ConfigMap: &ConfigMapVolume{Name: s.Name + "-forwarder"}},
		{Name: "trust", EmptyDir: &EmptyDirVolume{}},
		{Name: "workspace", EmptyDir: &EmptyDirVolume{}},
		{Name: "home", PersistentVolumeClaim: &ClaimVolume{ClaimName: s.Name + "-home"}},
	}
	if s.Nested {
		// Rootless podman inside needs these devices, which a pod gets
		// only from the host's /dev: the privileged level.
		for _, d := range []struct{ name, path string }{{"fuse", "/dev/fuse"}, {"tun", "/dev/net/tun"}} {
			vols = append(vols, Volume{Name: d.name, HostPath: &HostPathVolume{Path: d.path, Type: "CharDevice"}})
			agent.VolumeMounts = append(agent.VolumeMounts, VolumeMount{Name: d.name, MountPath: d.path})
		}
		// newuidmap is setuid: nested podman's user namespace needs it.
		agent.SecurityContext = &SecurityContext{AllowPrivilegeEscalation: ptr(true), Capabilities: &Capabilities{Drop: []string{"NET_ADMIN", "NET_RAW", "SYS_ADMIN"}}}
	}
	inits, containers := []Container{forwarder, trust, clone}, []Container{agent}
	if s.podman() {
		// podman runs every init container to its end: the forwarder is a
		// container, and the agent clones the project itself once the
		// forwarder answers, then becomes its command.
		forwarder.RestartPolicy = ""
		forwarder.SecurityContext = asRoot([]string{"NET_BIND_SERVICE"})
		forwarder.SecurityContext.ReadOnlyRootFilesystem = ptr(true)
		// podman mounts a volume's whole directory where a subPath names
		// a file in it: the agent trusts the bundle where the trust step
		// put it, through the variables that name the system's.
		for i, m := range agent.VolumeMounts {
			if m.SubPath != "" {
				agent.VolumeMounts[i] = VolumeMount{Name: m.Name, MountPath: trustDir, ReadOnly: true}
			}
		}
		agentEnv := map[string]string{}
		for k, v := range s.Env {
			if v == systemBundle {
				v = bundle
			}
			agentEnv[k] = v
		}
		agentEnv["CLONE_URL"], agentEnv["PROJECT"] = s.CloneURL, project
		agent.Env = env(agentEnv)
		agent.Command = append([]string{"sh", "-c", cloneThenRun, "agent-sandbox-clone"}, s.Command...)
		agent.WorkingDir = workspaceDir
		inits, containers = []Container{trust}, []Container{forwarder, agent}
	}
	p := Pod{typeMeta: v1("Pod"), Metadata: s.metaFor("-agent", "agent"), Spec: PodSpec{
		AutomountServiceAccountToken: ptr(false), EnableServiceLinks: ptr(false),
		Hostname: "agent-sandbox", DNSPolicy: "None",
		// The router answers allowlisted names with the pod's loopback
		// forwarder, every other name with NXDOMAIN.
		DNSConfig:     &PodDNSConfig{Nameservers: []string{s.ServiceIP.String()}, Searches: []string{}, Options: []PodDNSOption{{Name: "ndots", Value: "1"}}},
		RestartPolicy: "Never", SecurityContext: podSecurity(),
		InitContainers: inits, Containers: containers, Volumes: vols,
	}}
	if s.podman() {
		s.ownVolumes(&p)
	}
	return p
}
