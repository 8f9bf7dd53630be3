//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The kube session (issue 26): rows 1-8's probes again, from the agent pod
// of `agent-sandbox kube export --runtime podman`, run by podman kube play
// beside a router pod of the same export. An internal podman network stands
// in for the cluster's pod network and its NetworkPolicy, which podman does
// not enforce: this shows what the exported pods themselves hold (the
// router's DNS and filters, the forwarders' screening, the agent's
// capabilities), not what a policy-enforcing plugin adds.
const (
	kubeSandbox = "asb-e2e-kube"
	kubeNet     = "asb-e2e-kube"
	// kubeSubnet is in sessionPool with the router at .2, as a session's
	// network: the sniffer leaves out the agent's frames to its router.
	kubeSubnet    = "10.89.250.0/24"
	kubeServiceIP = "10.89.250.2"
	// kubeDone is the agent's line once its probes have reported.
	kubeDone = "agent-sandbox-e2e: kube probes done"
)

// kubeDiffers are rows 1-8's probes the kube session leaves out, and why:
// what podman kube play does not give the exported pod (SECURITY.md).
var kubeDiffers = map[string]string{
	"udp to every link-local node (ff02::1, ff02::2)": "podman kube play applies no pod sysctl, so the agent's pod keeps an IPv6 link-local address on the internal network",
}

// rNoLinkKey: the router's front refused a connection without the
// sandbox's link key, and said so.
var rNoLinkKey = because("refused by the router's front: no link key", []int{1}, `(?m)^hello of \d+ bytes: refused: agent-sandbox: no link key`)

// rCAPort404: the CA port has no such file to give.
var rCAPort404 = because("the CA port serves its two certificates alone (404)", []int{22}, `The requested URL returned error: 404`)

// rNoRoute6 and rCurlNoRoute6: no IPv6 route beyond link-local.
var (
	rNoRoute6     = because("no IPv6 route (link-local only: ENETUNREACH)", []int{1}, `(?m)^(tcp|udp) \S+:\d+ ENETUNREACH$`)
	rCurlNoRoute6 = because("no IPv6 route (link-local only: ENETUNREACH)", []int{7}, `(?m)^\* Immediate connect fail for \S+: Network is unreachable$`)
)

// buildKube is rows 1-8's probe set for the kube session, with nonces of
// its own.
func (s *secSuite) buildKube(t *testing.T) {
	var all probeSet
	all.session = s.kube.session
	s.mainRow1(t, &all)
	s.mainRow2(t, &all)
	s.mainRow3(t, &all)
	s.mainRow4(t, &all)
	s.mainRow5(t, &all)
	s.mainRow6(t, &all)
	s.mainRow7(t, &all)
	s.mainRow8(t, &all)
	// A cluster's own path: the router's port 443 itself, around the
	// agent pod's forwarder. Its front lets in only connections that
	// carry the sandbox's link key, which the agent does not hold.
	nn := newNonce(t)
	all.add(5, "hello straight to the router's 443 without the link key", blocked, rNoLinkKey, nn,
		routerVar+"python3 -S ./sec.py hello $R 443 --sni allowed.test --alpn "+nn)
	nn = newNonce(t)
	all.add(5, "hello straight to the router's 443 with a made-up link key", blocked, rNoLinkKey, nn,
		routerVar+"python3 -S ./sec.py hello $R 443 --link "+strings.Repeat("0", 64)+" --sni allowed.test --alpn "+nn)
	// A peer on the pod network that has the key (a container the
	// harness runs beside the pods, not the agent): the opened path of
	// the two above, and the front's own screening behind the key.
	var peer probeSet
	peer.session = s.kube.session
	nn = newNonce(t)
	peer.add(5, "opened path: a peer with the link key, the same hello straight to the router's 443", arrives, noReason, nn,
		"python3 -S ./sec.py hello "+kubeServiceIP+" 443 --link \"$LINK_KEY\" --sni allowed.test --alpn "+nn)
	nn = newNonce(t)
	peer.add(5, "a peer with the link key: ech hello straight to the router's 443 (its front screens it)", blocked, rHelloClosed, nn,
		"python3 -S ./sec.py hello "+kubeServiceIP+" 443 --link \"$LINK_KEY\" --sni allowed.test --alpn "+nn+" --ech "+nn)
	nn = newNonce(t)
	peer.add(5, "a peer with the link key: denied sni straight to the router's 443", blocked, rHelloClosed, nn,
		"python3 -S ./sec.py hello "+kubeServiceIP+" 443 --link \"$LINK_KEY\" --sni "+nn+".denied.test --alpn "+nn)
	s.kubePeer = peer.probes
	// The router's CA port serves the session CA's certificate and
	// bundle, and no other file of the router's: not its config, not the
	// credentials beside it.
	all.add(7, "the router's CA port serves the bundle", info, noReason, "", routerVar+"curl -sS --max-time 5 -f http://$R:8079/bundle.pem | grep -c 'BEGIN CERTIFICATE'")
	for _, path := range []string{"/etc/router/nginx.conf", "/etc/hostname", "/run/agent-sandbox-ca/", "/bundle.pem/../etc/router/nginx.conf"} {
		all.add(7, "the router's CA port refuses "+path, blocked, rCAPort404, "", routerVar+"curl -sS --max-time 5 -f --path-as-is http://$R:8079"+path)
	}
	s.kube.directNonces = all.directNonces
	for _, p := range all.probes {
		if why, ok := kubeDiffers[p.name]; ok {
			s.kubeSkipped = append(s.kubeSkipped, fmt.Sprintf("%q (%s)", p.name, why))
			continue
		}
		// The agent's pod keeps its link-local IPv6 address under podman
		// (kubeDiffers), so a send to a global IPv6 address finds no
		// route rather than no address: stopped all the same.
		switch {
		case p.why.say == rCurlNoAddr6.say && slices.Equal(p.why.rc, rCurlNoAddr6.rc):
			p.why = rCurlNoRoute6
		case p.why.say == rNoAddr6.say:
			p.why = rNoRoute6
		}
		s.kube.probes = append(s.kube.probes, p)
	}
}

// runKube exports the sandbox for a project whose remote the secure fake
// serves, plays the router pod (the internal network at the Service's
// address, and the egress network) and the agent pod (the internal network
// alone), and reads the agent's probe reports and the router's log.
func (s *secSuite) runKube(t *testing.T) {
	t.Helper()
	start := time.Now()
	mark := s.env.mark()
	// Gone before the rows' own sessions start: their helpers are found
	// by name (a pod's router container would pass for a session's).
	cleanupKube()
	if os.Getenv("AGENT_SANDBOX_E2E_KEEP_KUBE") == "" {
		defer cleanupKube()
	}
	if _, err := podman("network", "create", "--internal", "--disable-dns", "--subnet", kubeSubnet,
		"--label", harnessLabel+"=kube", kubeNet); err != nil {
		t.Errorf("kube session: %v", err)
		return
	}

	dir := launchDir(t)
	post := "echo '" + kubeDone + "'; exec sleep 600\n"
	writeLaunchFiles(t, dir, map[string]string{"kube-probes.sh": parallelScript(s.kube.list(), 32,
		preflight("preflight", pfSessionCmds, pfSecPy, pfCA, pfNcN, pfDigTCP, pfPingPad, pfCurl6), post)})
	mustGit(t, dir, "init", "-q", "-b", "main")
	mustGit(t, dir, "add", ".")
	mustGit(t, dir, "commit", "-q", "-m", "probes")
	url, _ := servedRepo(t, dir)

	yamlPath := filepath.Join(mkdir(t, "kube-"), "sandbox.yaml")
	l := startLauncher(t, sessionOpts{Dir: dir, Allowlist: s.allowlist("git.allowed.test"), Env: s.sessionEnv(secAllow), CombinedOutput: true,
		Args: []string{"kube", "export", "--runtime", "podman", "--name", kubeSandbox, "--service-ip", kubeServiceIP,
			"--clone", url, "-o", yamlPath, "--", "sh", "./kube-probes.sh"}}).wait()
	if l.Err != nil {
		t.Errorf("kube export: %v\n%s", l.Err, l.Stdout())
		return
	}
	router, agent, err := splitExport(yamlPath)
	if err != nil {
		t.Errorf("kube session: %v", err)
		return
	}
	if out, err := podman("kube", "play", "--no-hosts", "--network", kubeNet+":ip="+kubeServiceIP, "--network", egressNet, router); err != nil {
		t.Errorf("podman kube play of the router pod: %v\n%s", err, out)
		return
	}
	// The peer before the agent's pod: an address of the pod network that
	// comes up while the agent's probes run would take what its sweep
	// left queued in the kernel for an address that did not answer yet.
	peer := s.runKubePeer(t, yamlPath, dir)
	// podman kube play returns once the init containers (the trust step)
	// are done and the forwarder and the agent started.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "podman", "kube", "play", "--no-hosts", "--network", kubeNet, agent).CombinedOutput(); err != nil {
		t.Errorf("podman kube play of the agent pod: %v\n%s\ntrust step: %s\nrouter: %s", err, out,
			podmanLogs(kubeSandbox+"-agent-trust"), lastLines(podmanLogs(kubeSandbox+"-router-router"), 30))
		return
	}
	agentCtr := kubeSandbox + "-agent-agent"
	var out string
	for deadline := time.Now().Add(4 * time.Minute); ; {
		out = strings.ReplaceAll(podmanLogs(agentCtr), "\r", "")
		if strings.Contains(out, kubeDone) {
			break
		}
		if time.Now().After(deadline) || !running(agentCtr) {
			state, _ := podman("inspect", "--format", "{{.State.Status}} exit {{.State.ExitCode}} {{.State.Error}}", agentCtr)
			t.Errorf("the kube session's agent did not finish its probes (%s):\n%s\nforwarder: %s", strings.TrimSpace(state), lastLines(out, 40), podmanLogs(kubeSandbox+"-agent-forwarder"))
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.kube.res = parseProbes(out)
	for name, r := range peer {
		s.kube.res[name] = r
	}
	s.kube.probes = append(s.kube.probes, s.kubePeer...)
	s.routerLogs["kube"] = podmanLogs(kubeSandbox+"-router-router") + podmanLogs(kubeSandbox+"-router-front")
	s.kube.ran = len(s.kube.res) > 1
	// Its own preflight fails rows 1-8 alone (checkKube): a kube session
	// that cannot run says nothing about the local session's rows.
	switch r, ok := s.kube.res["preflight"]; {
	case !ok:
		s.kubeBroken = "the kube session's preflight did not report"
	case r.RC != 0:
		s.kubeBroken = "the kube session's preflight failed: " + strings.TrimSpace(r.Out)
	}
	s.took = append(s.took, fmt.Sprintf("kube session %.1fs", time.Since(start).Seconds()))
	s.settle(t, "after the kube session")
	s.kubeQuiet = s.env.listenerLinesSince(mark, s.env.canaryNames()...)
}

// linkKeyRE finds the link key in the podman variant's manifests, where
// the forwarders take it as a value.
var linkKeyRE = regexp.MustCompile(`(?m)^\s*- name: LINK_KEY\n\s*value: "?([0-9a-f]{64})"?$`)

// runKubePeer runs the peer's probes (buildKube) in a container of its own
// on the pod network, with the export's link key, once the router's pod is
// ready, and returns their results.
func (s *secSuite) runKubePeer(t *testing.T, yamlPath, dir string) map[string]probeResult {
	t.Helper()
	b, err := os.ReadFile(yamlPath)
	m := linkKeyRE.FindSubmatch(b)
	if err != nil || m == nil {
		t.Errorf("the kube export has no link key: %v", err)
		return nil
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(podmanLogs(kubeSandbox+"-router-router"), "routerd: ready") ||
		!strings.Contains(podmanLogs(kubeSandbox+"-router-front"), "forwarder: ready"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("the kube session's router pod never got ready:\n%s", lastLines(podmanLogs(kubeSandbox+"-router-router"), 20))
			return nil
		}
	}
	peer := probeSet{probes: s.kubePeer}
	script := parallelScript(peer.list(), 8, "", "")
	if err := os.WriteFile(filepath.Join(dir, "peer-probes.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// Root of the user namespace: the launch dir is the test user's.
	out, err := podman("run", "--rm", "--name", kubeSandbox+"-peer", "--network", kubeNet, "--label", harnessLabel+"=kube", "--user", "0:0",
		"-e", "LINK_KEY="+string(m[1]), "-v", dir+":/peer:ro,z", "-w", "/peer", "--entrypoint", "sh", harness.sandboxImage, "./peer-probes.sh")
	if err != nil {
		t.Errorf("the kube session's peer: %v\n%s", err, out)
		return nil
	}
	return parseProbes(out)
}

// splitExport writes the export's router and agent objects to files of
// their own beside it (podman plays each pod on its own networks); the
// Service and the policies, which podman ignores, stay out.
func splitExport(path string) (router, agent string, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", "", err
	}
	var r, a []string
	for _, doc := range strings.Split(string(b), "\n---\n")[1:] {
		switch {
		case strings.Contains(doc, "\nkind: Service\n"), strings.Contains(doc, "\nkind: NetworkPolicy\n"):
		case strings.Contains(doc, "agent-sandbox.role: router"):
			r = append(r, doc)
		case strings.Contains(doc, "agent-sandbox.role: agent"):
			a = append(a, doc)
		default:
			return "", "", fmt.Errorf("%s: an object of no role:\n%s", path, doc)
		}
	}
	if len(r) == 0 || len(a) == 0 {
		return "", "", fmt.Errorf("%s: %d router and %d agent objects", path, len(r), len(a))
	}
	router, agent = strings.TrimSuffix(path, ".yaml")+"-router.yaml", strings.TrimSuffix(path, ".yaml")+"-agent.yaml"
	for f, docs := range map[string][]string{router: r, agent: a} {
		if err := os.WriteFile(f, []byte("---\n"+strings.Join(docs, "\n---\n")+"\n"), 0o644); err != nil {
			return "", "", err
		}
	}
	return router, agent, nil
}

func podmanLogs(name string) string {
	out, _ := exec.Command("podman", "logs", name).CombinedOutput()
	return string(out)
}

func running(name string) bool {
	out, err := podman("inspect", "--format", "{{.State.Running}}", name)
	return err == nil && strings.TrimSpace(out) == "true"
}

// cleanupKube removes the kube session's pods, the volumes podman made for
// their ConfigMaps, emptyDirs and claim, and its network.
func cleanupKube() {
	for _, p := range []string{kubeSandbox + "-agent", kubeSandbox + "-router"} {
		_, _ = podman("pod", "rm", "-f", "-t", "0", p)
	}
	// Every volume of the export is named for the sandbox.
	vols, _ := podman("volume", "ls", "--format", "{{.Name}}")
	for _, v := range lines(vols) {
		if strings.HasPrefix(v, kubeSandbox+"-") {
			_, _ = podman("volume", "rm", "-f", v)
		}
	}
	_, _ = podman("network", "rm", "-f", kubeNet)
}

// checkKube applies row n's expectations to the kube session's probes of
// that row, and its refusals and canaries as the main session's.
func (s *secSuite) checkKube(t *testing.T, ev *evidence, n int) {
	t.Helper()
	if s.kubeBroken != "" {
		t.Errorf("PREFLIGHT FAILED: %s, so no probe of it proves anything", s.kubeBroken)
		return
	}
	probes := s.kube.ofRow(n)
	if len(probes) == 0 {
		t.Errorf("the kube session has no probe of row %d", n)
		return
	}
	sub := &evidence{}
	s.check(t, sub, &s.kube, probes)
	if n == 2 {
		var leaks int
		for _, nn := range s.kube.directNonces {
			if got := s.env.seen(nn); len(got) > 0 {
				leaks++
				t.Errorf("LEAK: kube session: direct payload %s reached:\n%s", nn, strings.Join(got, "\n"))
			}
		}
		if r, ok := s.kube.res["direct tcp and udp to every fake, canary and the gateway"]; ok {
			for _, l := range strings.Split(r.Out, "\n") {
				if f := strings.Fields(l); len(f) >= 4 && (f[2] != "failed" || f[3] != "ENETUNREACH") {
					t.Errorf("kube session: direct %s: want failed, ENETUNREACH", l)
				}
			}
			if leaks == 0 && r.RC != 0 {
				sub.add("%d direct sends failed for want of a route, none of their nonces in any log", len(s.kube.directNonces))
			}
		}
	}
	if r, ok := s.kube.res["the router's CA port serves the bundle"]; ok && n == 7 {
		if c, _ := strconv.Atoi(strings.TrimSpace(r.Out)); r.RC != 0 || c < 2 {
			t.Errorf("self-check: the CA port did not serve a bundle of certificates: %s", r)
		} else {
			sub.add("self-check: the same port served bundle.pem (%d certificates)", c)
		}
	}
	if n == 2 || n == 7 || n == 8 {
		var known []string
		for _, p := range s.kube.probes {
			if p.nonce != "" {
				known = append(known, needle(p.nonce))
			}
		}
		known = append(known, s.kube.directNonces...)
		for _, l := range s.kubeQuiet {
			explained := false
			for _, k := range known {
				explained = explained || strings.Contains(strings.ToLower(l), needle(k))
			}
			if !explained {
				t.Errorf("LEAK: a canary heard something during the kube session: %s", l)
			}
		}
	}
	ev.add("podman kube play of `kube export --runtime podman` (agent and router pods on an internal network): %s", sub)
	if n == 3 && len(s.kubeSkipped) > 0 {
		ev.add("not run there: %s", strings.Join(s.kubeSkipped, "; "))
	}
}
