//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/kube"
	"sigs.k8s.io/yaml"
)

// TestKubeRouterRunsAsItsUser (issue 26): the router pod a cluster's
// export writes runs as that export says, uid 1000 with no capability,
// no escalation and the pod's one sysctl, on the volumes it names. podman
// kube play applies no pod sysctl (the podman export runs the router as
// root), so this runs the exported containers with podman run, each flag
// read from the manifest: routerd, dnsmasq and nginx come up as uid 1000,
// the front listens on the pod's port 443, and the CA port gives the
// bundle and nothing else.
func TestKubeRouterRunsAsItsUser(t *testing.T) {
	row(t, "the cluster's router pod runs as uid 1000 with no capability", func(t *testing.T) {
		const name = "asb-e2e-nonroot"
		dir := launchDir(t)
		out := filepath.Join(mkdir(t, "kube-"), "sandbox.yaml")
		l := startLauncher(t, sessionOpts{Dir: dir, CombinedOutput: true,
			Args: []string{"kube", "export", "--name", name, "--clone", "https://" + gitHost + "/none.git", "-o", out}}).wait()
		if l.Err != nil {
			t.Fatalf("kube export: %v\n%s", l.Err, l.Stdout())
		}
		pod, config, secrets := exportedRouter(t, out, name)
		cleanup := func() {
			_, _ = podman("pod", "rm", "-f", "-t", "0", name+"-pod")
			vols, _ := podman("volume", "ls", "--format", "{{.Name}}")
			for _, v := range lines(vols) {
				if strings.HasPrefix(v, name+"-") {
					_, _ = podman("volume", "rm", "-f", v)
				}
			}
		}
		cleanup()
		t.Cleanup(cleanup)

		// The pod: its network namespace, on the egress network at an
		// address of its own, with the pod's sysctls.
		const ip = "10.99.0.241"
		args := []string{"pod", "create", "--name", name + "-pod", "--label", harnessLabel + "=kube-nonroot", "--network", egressNet, "--ip", ip}
		for _, sc := range pod.Spec.SecurityContext.Sysctls {
			args = append(args, "--sysctl", sc.Name+"="+sc.Value)
		}
		if _, err := podman(args...); err != nil {
			t.Fatal(err)
		}
		configDir := mkdir(t, "router-config-")
		// Read by uid 1000 of the user namespace: another uid here.
		if err := os.Chmod(configDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for file, body := range config.Data {
			if err := os.WriteFile(filepath.Join(configDir, file), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range pod.Spec.Containers {
			args := podmanRunArgs(t, name, pod, c, configDir, ip, secrets)
			if _, err := podman(args...); err != nil {
				t.Fatalf("podman run of the exported %s container: %v", c.Name, err)
			}
		}
		router, front := name+"-router", name+"-front"
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(podmanLogs(router), "routerd: ready") {
			if time.Now().After(deadline) || !running(router) {
				t.Fatalf("the router never got ready as uid 1000:\n%s", lastLines(podmanLogs(router), 30))
			}
			time.Sleep(100 * time.Millisecond)
		}
		// Every process of both containers: uid 1000, no capability.
		for _, c := range []string{router, front} {
			procs, err := podman("exec", c, "sh", "-c", `for p in /proc/[0-9]*; do [ -r $p/status ] && echo "$(cat $p/comm) $(grep -E '^(Uid|CapEff):' $p/status | tr -s '\t\n' '  ')"; done`)
			if err != nil {
				t.Fatalf("%s: %v\nits log:\n%s", c, err, lastLines(podmanLogs(c), 20))
			}
			seen := 0
			for _, p := range lines(procs) {
				f := strings.Fields(p)
				if len(f) < 8 || f[0] == "sh" || f[0] == "cat" || f[0] == "grep" || f[0] == "tr" {
					continue
				}
				seen++
				if f[2] != "1000" || f[3] != "1000" || f[4] != "1000" || f[7] != "0000000000000000" {
					t.Errorf("%s: process %s runs as %v, want uid 1000 with no capability", c, f[0], f[2:])
				}
			}
			if seen == 0 {
				t.Errorf("%s: no process read: %s", c, procs)
			}
		}
		// The front takes the pod's 443 (a low port uid 1000 binds by the
		// sysctl alone), the CA port gives the bundle and nothing else.
		logs := podmanLogs(front)
		if !strings.Contains(logs, "forwarder: listening on 0.0.0.0:443") {
			t.Errorf("the front does not listen on the pod's 443:\n%s", logs)
		}
		// Without the link key the front lets nothing through, and says why.
		if out, _ := podman("exec", router, "sh", "-c", fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -q1 %s 443`, ip)); !strings.Contains(out, "agent-sandbox: no link key") {
			t.Errorf("the front's 443 without the link key: %q, want its refusal", out)
		}
		get := func(path string) string {
			out, _ := podman("exec", router, "sh", "-c", fmt.Sprintf(`printf 'GET %s HTTP/1.0\r\n\r\n' | nc -q1 %s %d`, path, ip, kube.CAPort))
			return out
		}
		if b := get("/bundle.pem"); !strings.HasPrefix(b, "HTTP/1.0 200") || strings.Count(b, "BEGIN CERTIFICATE") < 2 {
			t.Errorf("the CA port's bundle: %.200s", b)
		}
		if b := get("/etc/router/nginx.conf"); !strings.HasPrefix(b, "HTTP/1.0 404") {
			t.Errorf("the CA port gave another file: %.200s", b)
		}
	})
}

// exportedRouter decodes the export's router pod and config strictly.
func exportedRouter(t *testing.T, path, name string) (kube.Pod, kube.ConfigMap, map[string]map[string]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pod *kube.Pod
	var config *kube.ConfigMap
	secrets := map[string]map[string]string{}
	for _, doc := range strings.Split(string(b), "\n---\n")[1:] {
		doc += "\n"
		switch {
		case strings.Contains(doc, "\nkind: Secret\n"):
			var sec kube.Secret
			if err := yaml.UnmarshalStrict([]byte(doc), &sec); err != nil {
				t.Fatal(err)
			}
			secrets[sec.Metadata.Name] = sec.StringData
		case strings.Contains(doc, "\nkind: Pod\n") && strings.Contains(doc, "\n  name: "+name+"-router\n"):
			pod = &kube.Pod{}
			if err := yaml.UnmarshalStrict([]byte(doc), pod); err != nil {
				t.Fatal(err)
			}
		case strings.Contains(doc, "\nkind: ConfigMap\n") && strings.Contains(doc, "\n  name: "+name+"-router\n"):
			config = &kube.ConfigMap{}
			if err := yaml.UnmarshalStrict([]byte(doc), config); err != nil {
				t.Fatal(err)
			}
		}
	}
	if pod == nil || config == nil {
		t.Fatalf("%s has no router pod or config for %s", path, name)
	}
	return *pod, *config, secrets
}

// podmanRunArgs is podman run for container c of the exported pod: its
// user, capabilities, escalation, environment and volumes as the manifest
// says, in the pod's network namespace.
func podmanRunArgs(t *testing.T, name string, pod kube.Pod, c kube.Container, configDir, ip string, secrets map[string]map[string]string) []string {
	t.Helper()
	psc, sc := pod.Spec.SecurityContext, c.SecurityContext
	args := []string{"run", "-d", "--name", name + "-" + c.Name, "--pod", name + "-pod", "--label", harnessLabel + "=kube-nonroot",
		"--user", strconv.FormatInt(*psc.RunAsUser, 10) + ":" + strconv.FormatInt(*psc.RunAsGroup, 10)}
	if sc.Capabilities != nil {
		for _, d := range sc.Capabilities.Drop {
			args = append(args, "--cap-drop", strings.ToLower(d))
		}
		for _, a := range sc.Capabilities.Add {
			args = append(args, "--cap-add", a)
		}
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		args = append(args, "--security-opt", "no-new-privileges")
	}
	if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
		args = append(args, "--read-only")
	}
	vols := map[string]kube.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}
	for _, m := range c.VolumeMounts {
		v := vols[m.Name]
		ro := ""
		if m.ReadOnly {
			ro = ",ro"
		}
		switch {
		case v.ConfigMap != nil:
			args = append(args, "-v", configDir+":"+m.MountPath+":ro")
		case v.EmptyDir != nil:
			// A volume of the pod's, shared by its containers and owned
			// by the pod's uid, as a cluster's emptyDir with fsGroup.
			args = append(args, "-v", name+"-"+m.Name+":"+m.MountPath+":U"+ro)
		default:
			t.Fatalf("volume %s of %s: not one this test makes", m.Name, c.Name)
		}
	}
	// As the kubelet does: a value from the pod's address or a Secret's
	// key, and $(NAME) in a value replaced by a variable set before it.
	set := map[string]string{}
	for _, e := range c.Env {
		v := e.Value
		switch from := e.ValueFrom; {
		case from == nil:
			v = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).ReplaceAllStringFunc(v, func(ref string) string {
				if got, ok := set[ref[2:len(ref)-1]]; ok {
					return got
				}
				return ref
			})
		case from.FieldRef != nil && from.FieldRef.FieldPath == "status.podIP":
			v = ip
		case from.SecretKeyRef != nil && secrets[from.SecretKeyRef.Name][from.SecretKeyRef.Key] != "":
			v = secrets[from.SecretKeyRef.Name][from.SecretKeyRef.Key]
		default:
			t.Fatalf("%s takes %s from %+v, which this test does not give", c.Name, e.Name, e.ValueFrom)
		}
		set[e.Name] = v
		args = append(args, "-e", e.Name+"="+v)
	}
	if len(c.Command) > 0 {
		// A container's command replaces the image's entrypoint.
		ep, err := json.Marshal(c.Command)
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, "--entrypoint", string(ep))
	}
	return append(args, c.Image)
}

// TestKubeExportStaysOutOfTheProject (issue 26, a hostile read's finding):
// the manifests hold the user's keys, and a file in the project is
// read-write in the next session there, whose agent runs as the user's
// uid and could read them or change what the user applies. The real
// binary refuses an -o inside the launch dir, by a relative path or
// through a link, and writes nothing; the same export to a path outside
// is written, key and all (the opened path).
func TestKubeExportStaysOutOfTheProject(t *testing.T) {
	row(t, "kube export refuses to write its manifests into the project", func(t *testing.T) {
		const key = "sk-ant-api03-e2ekubeexportkey0000000000"
		dir := launchDir(t)
		outside := mkdir(t, "kube-")
		link := filepath.Join(outside, "to-project")
		if err := os.Symlink(dir, link); err != nil {
			t.Fatal(err)
		}
		export := func(out string) *launcher {
			return startLauncher(t, sessionOpts{Dir: dir, CombinedOutput: true, Env: map[string]string{"ANTHROPIC_API_KEY": key},
				Args: []string{"kube", "export", "--clone", "https://" + gitHost + "/none.git", "-o", out}}).wait()
		}
		for _, out := range []string{"sandbox.yaml", filepath.Join(link, "sandbox.yaml")} {
			l := export(out)
			if said := l.Stdout() + l.Stderr(); l.Code != 1 || !strings.Contains(said, "inside the project") {
				t.Errorf("-o %s: exit %d, want the refusal (1) naming the project:\n%s", out, l.Code, said)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "sandbox.yaml")); !os.IsNotExist(err) {
			t.Errorf("a refused export left sandbox.yaml in the project (%v)", err)
		}
		out := filepath.Join(outside, "sandbox.yaml")
		if l := export(out); l.Code != 0 {
			t.Fatalf("-o outside the project: exit %d\n%s", l.Code, l.Stdout())
		}
		if b, err := os.ReadFile(out); err != nil || !strings.Contains(string(b), key) {
			t.Errorf("the export outside the project lacks the key's Secret (%v)", err)
		}
	})
}
