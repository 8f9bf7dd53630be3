package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/allowlist"
	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
	"github.com/agent-sandbox/agent-sandbox/internal/kube"
	"github.com/agent-sandbox/agent-sandbox/internal/projectdir"
	"github.com/agent-sandbox/agent-sandbox/internal/routerconf"
	"github.com/spf13/cobra"
)

// `agent-sandbox kube export`: the same sandbox for a Kubernetes cluster.
// What a session decides from the user's allowlist, credentials and flags
// is decided here the same way; internal/kube writes it down.

// kubeExportArgs are kube export's flags.
type kubeExportArgs struct {
	namespace, name, serviceIP, clone, output string
	runtime                                   string
	agent                                     string
	env, repos                                []string
	nested                                    bool
	cmd                                       []string
}

func newKubeCommand(set settings) *cobra.Command {
	kubeCmd := &cobra.Command{
		Use:   "kube",
		Short: "Run the sandbox on Kubernetes",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	var a kubeExportArgs
	export := &cobra.Command{
		Use:   "export [flags] [-- CMD [ARGS...]]",
		Short: "Write the Kubernetes manifests of a sandbox for this directory's project",
		Long: `export writes the manifests of one sandbox for the project in the current
directory and your allowlist: the router (its config in a ConfigMap, your
credentials in a Secret only it mounts, a Service with a fixed address that
the agent's pod uses as its only nameserver), the agent's pod (the forwarder
beside it, the project cloned from its git remote, the home on a
PersistentVolumeClaim) and NetworkPolicies that let the agent's pod reach
the router alone and the router nothing but the internet outside private
ranges. Apply them with kubectl apply -f, attach with kubectl attach -it,
remove them with kubectl delete -f. Arguments after -- replace the agent's
command. The output holds the sandbox's link key, which lets a pod use its
router, and the credentials when some are found (as for a session): it is
written 0600 with -o, which, like a redirected stdout, must be outside the
project (a session there could read or change it).`,
		Example: `  agent-sandbox kube export -o ~/sandbox.yaml
  agent-sandbox kube export | kubectl apply -f -
  agent-sandbox kube export --namespace agents --name review-bot --agent codex
  agent-sandbox kube export -- bash`,
		RunE: func(cmd *cobra.Command, args []string) error {
			a.cmd = args
			return kubeExport(cmd.Context(), set, a, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := export.Flags()
	f.StringVarP(&a.namespace, "namespace", "n", "", "the namespace of every object (default: kubectl's)")
	f.StringVar(&a.name, "name", "", "the sandbox's name, which prefixes its objects' (default: from the directory)")
	f.StringVar(&a.serviceIP, "service-ip", "", "the router Service's cluster IP, inside the cluster's service range (default: one in 10.96.128.0/17 picked from the name)")
	f.StringVar(&a.clone, "clone", "", "the HTTPS URL the project is cloned from (default: the directory's push remote)")
	f.StringVarP(&a.output, "output", "o", "", "write the manifests to this file (0600) instead of stdout")
	f.StringVar(&a.agent, "agent", "", "the agent: claude, codex or gemini (default: AGENT_SANDBOX_AGENT, else claude)")
	f.StringArrayVar(&a.env, "env", nil, "pass this variable of your environment to the agent (repeatable)")
	f.StringArrayVar(&a.repos, "repo", nil, "also admit GitHub writes to OWNER/NAME (repeatable)")
	f.StringVar(&a.runtime, "runtime", kube.RuntimeKubernetes, "what runs the pods: kubernetes, or podman (podman kube play on this machine: its pods run the router and forwarders as root of your user namespace, and take no credentials)")
	f.BoolVar(&a.nested, "nested", false, "pass /dev/fuse and /dev/net/tun for nested containers: the namespace must then admit privileged pods")
	kubeCmd.AddCommand(reportFlagErrors(export))
	return kubeCmd
}

// kubeExport decides the sandbox as a session would and writes it.
func kubeExport(_ context.Context, set settings, a kubeExportArgs, stdout, errOut io.Writer) error {
	pwd, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("cannot find the current directory: %w", err)
	}
	dir := realpath(pwd)
	if err := outsideProject(a.output, pwd, dir); err != nil {
		return err
	}
	if a.output == "" {
		// A shell's redirection is an -o the user did not name.
		if p := redirectedTo(stdout); p != "" {
			if top := projectTop(dir); inside(realpath(p), top) && !mutated("kube-output-in-project") {
				return refusef("stdout is redirected to %s, inside the project %s, where the agent of a session in it could read the link key and your credentials from it or change what you apply: "+
					"redirect it outside (> ~/%s.yaml), or pipe it: agent-sandbox kube export | kubectl apply -f -", p, top, filepath.Base(top))
			}
		}
	}
	s, err := kubeSandbox(set, a, dir, errOut)
	if err != nil {
		return err
	}
	objs, err := kube.Manifests(s)
	if err != nil {
		return refusef("%v", err)
	}
	out, err := kube.YAML(s, objs)
	if err != nil {
		return err
	}
	if len(s.Credentials) > 0 {
		iostreams.Say(errOut, "the Secret %s-credentials in the manifests holds your credentials: keep them private, and apply them only to a cluster you trust with them", s.Name)
	}
	// The link key is in every export: whoever reads it can talk to the
	// router as the agent's forwarder does.
	iostreams.Say(errOut, "the manifests hold this sandbox's link key, which lets a pod use its router (and any key the router adds): keep them private, out of the project and out of git")
	if a.output == "" {
		_, err = stdout.Write(out)
		return err
	}
	// Replaced whole, and 0600 from the start: it may hold credentials.
	if _, err := replaceFile(a.output, out, 0o600, false); err != nil {
		return fmt.Errorf("cannot write %s: %w", a.output, err)
	}
	return nil
}

// outsideProject refuses an -o inside the project: the next local session
// there mounts it read-write, so its agent could read the credentials in
// the manifests (the user's own uid is the agent's), or rewrite them (drop
// a NetworkPolicy, add a hostPath) for the user to apply next.
func outsideProject(output, pwd, dir string) error {
	// hack/mutation-check's kube-output-in-project writes it anywhere.
	if output == "" || mutated("kube-output-in-project") {
		return nil
	}
	p := output
	if !filepath.IsAbs(p) {
		p = filepath.Join(pwd, p)
	}
	dir = projectTop(dir)
	if inside(realpath(p), dir) {
		return refusef("-o %s is inside the project %s, where the agent of a session in it could read your credentials from it or change what you apply: "+
			"write it outside (-o ~/%s.yaml), or pipe it: agent-sandbox kube export | kubectl apply -f -", output, dir, filepath.Base(dir))
	}
	return nil
}

// projectTop is the project a session could mount from dir: the
// repository's top when dir is in one (a session launched there mounts the
// whole tree), else dir.
func projectTop(dir string) string {
	for d := dir; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Lstat(filepath.Join(d, ".git")); err == nil {
			return d
		}
	}
	return dir
}

// redirectedTo is the regular file w writes to, "" when w is a terminal, a
// pipe or no file at all.
func redirectedTo(w io.Writer) string {
	f, ok := w.(*os.File)
	if !ok {
		return ""
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil || !filepath.IsAbs(p) {
		return ""
	}
	return p
}

// kubeSandbox is what the export writes for dir: the allowlist, the agent,
// the credentials and the remote, decided as a session decides them.
func kubeSandbox(set settings, a kubeExportArgs, dir string, errOut io.Writer) (kube.Sandbox, error) {
	s := kube.Sandbox{Namespace: a.namespace, Dir: dir, RouterImage: set.routerImage, Nested: a.nested, Runtime: a.runtime}
	switch a.runtime {
	case "", kube.RuntimeKubernetes, kube.RuntimePodman:
	default:
		return s, refusef("--runtime %s: want %s or %s", a.runtime, kube.RuntimeKubernetes, kube.RuntimePodman)
	}
	if err := set.valid(); err != nil {
		return s, err
	}
	s.RouterEnv = kubeRouterEnv(set, a.runtime)
	s.Name = a.name
	if s.Name == "" {
		s.Name = kubeName(dir)
	}
	if err := kube.CheckName(s.Name); err != nil {
		return s, refusef("--name: %v", err)
	}
	if a.serviceIP == "" {
		s.ServiceIP = kube.DefaultServiceIP(s.Name)
	} else if s.ServiceIP, _ = netip.ParseAddr(a.serviceIP); !s.ServiceIP.Is4() {
		return s, refusef("--service-ip %s: not an IPv4 address; name a free address of your cluster's service range, such as 10.96.200.53", a.serviceIP)
	}
	la := launchArgs{env: map[string]string{}, agent: a.agent}
	for _, name := range a.env {
		if err := la.set("--env", name, set.lookup); err != nil {
			return s, refusef("%v", err)
		}
	}
	for _, repo := range a.repos {
		if err := la.set("--repo", repo, set.lookup); err != nil {
			return s, refusef("%v", err)
		}
	}
	if len(a.cmd) > 0 {
		la.cmd, la.exec = a.cmd, true
	} else {
		la.cmd = []string{"claude"}
	}
	cfg := sessionConfig{env: la.env}
	var err error
	if cfg.entries, err = loadAllowlist(set.allowlist, errOut); err != nil {
		return s, err
	}
	for _, w := range allowlist.Lint(cfg.entries) {
		iostreams.Say(errOut, "%s", w)
	}
	if err := cfg.pickAgent(set, la); err != nil {
		return s, refusef("%v", err)
	}
	if la.exec {
		// As --exec: the command after --, in place of the agent's.
		cfg.cmd = la.cmd
	}
	s.AgentImage, s.Command = cfg.image, cfg.cmd

	creds, warnings, err := sessionCredentialsFor(set, la.env)
	if err != nil {
		return s, err
	}
	for _, w := range warnings {
		iostreams.Say(errOut, "%s", w)
	}
	tree, err := kubeTree(set, dir)
	if err != nil {
		return s, err
	}
	creds.forge = creds.forge.withRepos(tree, la.repos)
	if s.CloneURL, err = cloneURL(a.clone, tree, dir); err != nil {
		return s, err
	}
	s.ProjectDir = filepath.Base(dir)
	if s.ProjectDir == "/" || s.ProjectDir == "." {
		s.ProjectDir = "project"
	}
	if s.Plan, _, err = replan(routerconf.Plan{}, routerconf.FirstCursor, creds.plan(), cfg.entries); err != nil {
		return s, err
	}
	s.Credentials = credentialFiles(creds.creds)
	if len(creds.upstreamCA) > 0 {
		s.ExtraRouterFiles = map[string]string{upstreamCAFile: string(creds.upstreamCA)}
	}
	s.Env = agentEnv(la.env, creds)
	// A new key for each export: one sandbox's manifests let no other
	// sandbox's pods into its router.
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return s, err
	}
	s.LinkKey = hex.EncodeToString(key)
	return s, nil
}

// kubeRouterEnv is what a session would add to routerd's environment: a
// pinned upstream resolver and its answers' ranges when set, and under
// podman the addresses of this machine, which routerd refuses to relay to.
func kubeRouterEnv(set settings, runtime string) map[string]string {
	dns, allow := set.parsed.upstreamDNS, set.parsed.upstreamAllow
	env := map[string]string{}
	if dns != "" {
		env["UPSTREAM_DNS"] = dns
	}
	if allow != "" {
		env["UPSTREAM_ALLOW"] = allow
	}
	if runtime == kube.RuntimePodman {
		env["HOST_ADDRS"] = hostAddrs()
	}
	return env
}

// kubeName is a sandbox's default name: the project's home volume's,
// within a DNS label's alphabet and length.
func kubeName(dir string) string {
	home := strings.TrimPrefix(projectHome(dir), "agent-sandbox-home-")
	var b strings.Builder
	for _, r := range strings.ToLower(home) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	n := "agent-sandbox-" + b.String()
	// The digest is last: keep it, shorten the readable part.
	if over := len(n) - kube.MaxNameLen; over > 0 {
		digest := n[len(n)-13:]
		n = strings.TrimRight(n[:len(n)-13-over], "-") + digest
	}
	return n
}

// kubeTree is the project's scan, as a session's start reads it: where
// its remotes are.
func kubeTree(set settings, dir string) (projectdir.Tree, error) {
	bound := set.parsed.scanBound
	root, err := projectdir.OpenRoot(dir)
	if err != nil {
		return projectdir.Tree{}, fmt.Errorf("cannot read %s: %w", dir, err)
	}
	defer root.Close()
	return projectdir.Scan(root, bound, scanHost(set))
}

// cloneURL is where the cluster clones the project from: --clone, else the
// launch dir's own repository's push remote. Only HTTPS: the cluster has
// none of your ssh keys, and the router adds a GitHub token over HTTPS.
func cloneURL(flag string, tree projectdir.Tree, dir string) (string, error) {
	u := flag
	if u == "" {
		for _, r := range tree.Repos {
			if r.Dir == ".git" && len(r.PushURLs) > 0 {
				u = r.PushURLs[0]
				break
			}
		}
	}
	if u == "" {
		return "", refusef("%s has no git remote to clone in the cluster: name one with --clone https://HOST/OWNER/REPO.git", dir)
	}
	if !strings.HasPrefix(u, "https://") || strings.ContainsAny(u, " \t\n@") {
		return "", refusef("cannot clone %s in the cluster: only an https:// URL without credentials works there (the router adds your GitHub token); name one with --clone", projectdir.Quote(u))
	}
	return u, nil
}
