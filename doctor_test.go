package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeInfo is a file as doctorEnv.stat sees it.
type fakeInfo struct {
	mode fs.FileMode
	uid  uint32
}

func (f fakeInfo) Name() string       { return "" }
func (f fakeInfo) Size() int64        { return 0 }
func (f fakeInfo) Mode() fs.FileMode  { return f.mode }
func (f fakeInfo) ModTime() time.Time { return time.Time{} }
func (f fakeInfo) IsDir() bool        { return f.mode.IsDir() }
func (f fakeInfo) Sys() any           { return &syscall.Stat_t{Uid: f.uid} }

type fakeExit int

func (e fakeExit) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
func (e fakeExit) ExitCode() int { return int(e) }

// fakeMachine is a healthy machine; each test breaks one thing.
type fakeMachine struct {
	paths    map[string]string // lookPath
	commands map[string]string // "name args..." -> stdout
	failures map[string]error  // "name args..." -> error
	files    map[string]string
	stats    map[string]fakeInfo
	env      map[string]string // the user's environment, read by newSettings
	denied   map[string]bool   // access(2) refuses
	uid      int
}

func healthyMachine() *fakeMachine {
	return &fakeMachine{
		paths: map[string]string{"podman": "/usr/bin/podman"},
		commands: map[string]string{
			"/usr/bin/podman version --format {{.Client.Version}}":            "4.3.1\n",
			"/usr/bin/podman info --format {{.Host.NetworkBackend}}":          "netavark\n",
			"/usr/bin/podman image exists localhost/agent-sandbox:dev":        "",
			"/usr/bin/podman image exists localhost/agent-sandbox-router:dev": "",
		},
		failures: map[string]error{},
		files: map[string]string{
			"/etc/subuid":        "other:100000:65536\nme:165536:65536\n",
			"/etc/subgid":        "other:100000:65536\n1000:165536:65536\n",
			"/home/me/allowlist": "# mine\na.example.com\nb.example.com:22\n",
		},
		stats: map[string]fakeInfo{
			"/dev/fuse":      {mode: fs.ModeDevice | fs.ModeCharDevice | 0o666},
			"/dev/net/tun":   {mode: fs.ModeDevice | fs.ModeCharDevice | 0o666},
			"/run/user/1000": {mode: fs.ModeDir | 0o700, uid: 1000},
		},
		env:    map[string]string{"XDG_RUNTIME_DIR": "/run/user/1000", "AGENT_SANDBOX_ALLOWLIST": "/home/me/allowlist"},
		denied: map[string]bool{},
		uid:    1000,
	}
}

func (m *fakeMachine) doctorEnv() doctorEnv {
	return doctorEnv{
		set: settingsFrom(m.env),
		lookPath: func(file string) (string, error) {
			if p, ok := m.paths[file]; ok {
				return p, nil
			}
			return "", errors.New("executable file not found in $PATH")
		},
		run: func(_ context.Context, name string, args ...string) (string, error) {
			key := strings.Join(append([]string{name}, args...), " ")
			if err, ok := m.failures[key]; ok {
				return "", err
			}
			if out, ok := m.commands[key]; ok {
				return out, nil
			}
			return "", fmt.Errorf("unexpected command %q", key)
		},
		readFile: func(name string) ([]byte, error) {
			if s, ok := m.files[name]; ok {
				return []byte(s), nil
			}
			return nil, fs.ErrNotExist
		},
		stat: func(name string) (fs.FileInfo, error) {
			if fi, ok := m.stats[name]; ok {
				return fi, nil
			}
			return nil, fs.ErrNotExist
		},
		access: func(path string, _ uint32) error {
			if m.denied[path] {
				return syscall.EACCES
			}
			return nil
		},
		uid:      m.uid,
		gid:      m.uid,
		userName: "me",
	}
}

func runDoctor(t *testing.T, m *fakeMachine) (int, string) {
	t.Helper()
	var out bytes.Buffer
	code := doctor(context.Background(), m.doctorEnv(), &out, io.Discard)
	return code, out.String()
}

func TestDoctorHealthyMachinePasses(t *testing.T) {
	code, out := runDoctor(t, healthyMachine())
	want := `ok   podman: 4.3.1 at /usr/bin/podman
ok   rootless: me (uid 1000)
ok   network backend: netavark
ok   subordinate uids: 65536 for me in /etc/subuid
ok   subordinate gids: 65536 for me in /etc/subgid
ok   /dev/fuse: read-writable
ok   /dev/net/tun: read-writable
ok   XDG_RUNTIME_DIR: /run/user/1000
ok   image localhost/agent-sandbox:dev: present
ok   image localhost/agent-sandbox-router:dev: present
ok   settings: the AGENT_SANDBOX_ variables that are set read well
ok   allowlist: 2 entries in /home/me/allowlist
`
	if code != 0 || out != want {
		t.Fatalf("exit %d, output:\n%s\nwant:\n%s", code, out, want)
	}
}

func TestDoctorReportsEachFailureWithItsFix(t *testing.T) {
	const podmanVersion = "/usr/bin/podman version --format {{.Client.Version}}"
	const podmanInfo = "/usr/bin/podman info --format {{.Host.NetworkBackend}}"
	for _, tc := range []struct {
		name    string
		breakIt func(m *fakeMachine)
		fail    string // the FAIL line
		fix     string // the fix line
	}{
		{
			name:    "podman missing",
			breakIt: func(m *fakeMachine) { delete(m.paths, "podman") },
			fail:    "FAIL podman: podman is not on PATH",
			fix:     "fix: install podman 4.3.0 or newer, for example: sudo apt-get install podman",
		},
		{
			name:    "podman too old",
			breakIt: func(m *fakeMachine) { m.commands[podmanVersion] = "4.2.0\n" },
			fail:    "FAIL podman: /usr/bin/podman is version 4.2.0; agent-sandbox needs 4.3.0 or newer",
			fix:     "fix: install podman 4.3.0 or newer",
		},
		{
			name:    "podman version unreadable",
			breakIt: func(m *fakeMachine) { m.commands[podmanVersion] = "banana\n" },
			fail:    `FAIL podman: /usr/bin/podman reports version "banana"`,
			fix:     "fix: install podman",
		},
		{
			name: "podman version fails",
			breakIt: func(m *fakeMachine) {
				m.failures[podmanVersion] = errors.New("exit status 125: cannot set up namespace")
			},
			fail: "FAIL podman: /usr/bin/podman version failed: exit status 125: cannot set up namespace",
			fix:  "fix: run `podman version` and fix what it reports",
		},
		{
			name: "running as root",
			// Root's own ids, runtime dir and images would only mislead.
			breakIt: func(m *fakeMachine) { m.uid = 0 },
			fail:    "FAIL rootless: running as root",
			fix:     "fix: run agent-sandbox as your normal user, without sudo",
		},
		{
			name:    "CNI backend",
			breakIt: func(m *fakeMachine) { m.commands[podmanInfo] = "cni\n" },
			fail:    `FAIL network backend: podman uses "cni"; agent-sandbox needs netavark`,
			fix:     `fix: sudo apt-get install netavark aardvark-dns; put network_backend = "netavark" under [network]`,
		},
		{
			name:    "podman info fails",
			breakIt: func(m *fakeMachine) { m.failures[podmanInfo] = errors.New("exit status 125: database is locked") },
			fail:    "FAIL network backend: podman info failed: exit status 125: database is locked",
			fix:     "fix: run `podman info` and fix what it reports",
		},
		{
			name: "a setting that does not read",
			breakIt: func(m *fakeMachine) {
				m.env["AGENT_SANDBOX_UPSTREAM_DNS"] = "dns.example"
				m.env["AGENT_SANDBOX_SCAN_DIRS"] = "lots"
			},
			fail: `FAIL settings: AGENT_SANDBOX_UPSTREAM_DNS: "dns.example" is not an IP address`,
			fix:  "fix: correct or unset the AGENT_SANDBOX_ variables named above",
		},
		{
			name:    "no subuid range",
			breakIt: func(m *fakeMachine) { m.files["/etc/subuid"] = "other:100000:65536\n" },
			fail:    "FAIL subordinate uids: /etc/subuid has no range for me",
			fix:     "fix: sudo usermod --add-subuids 165536-231071 me && podman system migrate",
		},
		{
			name:    "no subuid file",
			breakIt: func(m *fakeMachine) { delete(m.files, "/etc/subuid") },
			fail:    "FAIL subordinate uids: /etc/subuid has no range for me",
			fix:     "fix: sudo usermod --add-subuids 100000-165535 me && podman system migrate",
		},
		{
			name:    "small subgid range",
			breakIt: func(m *fakeMachine) { m.files["/etc/subgid"] = "me:200000:1000\n" },
			fail:    "FAIL subordinate gids: /etc/subgid gives me 1000; images need 65536",
			fix:     "fix: sudo usermod --add-subgids 201000-266535 me && podman system migrate",
		},
		{
			name:    "fuse missing",
			breakIt: func(m *fakeMachine) { delete(m.stats, "/dev/fuse") },
			fail:    "FAIL /dev/fuse: missing",
			fix:     "fix: sudo modprobe fuse",
		},
		{
			name:    "tun not writable",
			breakIt: func(m *fakeMachine) { m.denied["/dev/net/tun"] = true },
			fail:    "FAIL /dev/net/tun: not readable and writable by me",
			fix:     "fix: sudo chmod 0666 /dev/net/tun",
		},
		{
			name:    "tun not a device",
			breakIt: func(m *fakeMachine) { m.stats["/dev/net/tun"] = fakeInfo{mode: 0o666} },
			fail:    "FAIL /dev/net/tun: not a character device",
			fix:     "fix: sudo rm /dev/net/tun && sudo modprobe tun",
		},
		{
			name:    "XDG_RUNTIME_DIR unset",
			breakIt: func(m *fakeMachine) { delete(m.env, "XDG_RUNTIME_DIR") },
			fail:    "FAIL XDG_RUNTIME_DIR: not set",
			fix:     "fix: export XDG_RUNTIME_DIR=/run/user/1000",
		},
		{
			name: "XDG_RUNTIME_DIR unset and no dir",
			breakIt: func(m *fakeMachine) {
				delete(m.env, "XDG_RUNTIME_DIR")
				delete(m.stats, "/run/user/1000")
			},
			fail: "FAIL XDG_RUNTIME_DIR: not set",
			fix:  "fix: sudo install -d -m 0700 -o 1000 -g 1000 /run/user/1000 && export XDG_RUNTIME_DIR=/run/user/1000",
		},
		{
			name:    "XDG_RUNTIME_DIR missing",
			breakIt: func(m *fakeMachine) { m.env["XDG_RUNTIME_DIR"] = "/run/user/gone" },
			fail:    "FAIL XDG_RUNTIME_DIR: /run/user/gone does not exist",
			fix:     "fix: sudo install -d -m 0700 -o 1000 -g 1000 /run/user/gone",
		},
		{
			name:    "XDG_RUNTIME_DIR someone else's",
			breakIt: func(m *fakeMachine) { m.stats["/run/user/1000"] = fakeInfo{mode: fs.ModeDir | 0o700, uid: 0} },
			fail:    "FAIL XDG_RUNTIME_DIR: /run/user/1000 belongs to uid 0, not to me (uid 1000)",
			fix:     "fix: sudo chown 1000:1000 /run/user/1000",
		},
		{
			name:    "XDG_RUNTIME_DIR not writable",
			breakIt: func(m *fakeMachine) { m.denied["/run/user/1000"] = true },
			fail:    "FAIL XDG_RUNTIME_DIR: /run/user/1000 is not writable",
			fix:     "fix: chmod 0700 /run/user/1000",
		},
		{
			name: "XDG_RUNTIME_DIR a file",
			breakIt: func(m *fakeMachine) {
				m.env["XDG_RUNTIME_DIR"] = "/tmp/f"
				m.stats["/tmp/f"] = fakeInfo{mode: 0o600, uid: 1000}
			},
			fail: "FAIL XDG_RUNTIME_DIR: /tmp/f is not a directory",
			fix:  "fix: export XDG_RUNTIME_DIR=/run/user/1000",
		},
		{
			name: "router image the user named is missing",
			breakIt: func(m *fakeMachine) {
				m.env["AGENT_SANDBOX_ROUTER_IMAGE"] = "localhost/mine:1"
				m.failures["/usr/bin/podman image exists localhost/mine:1"] = fakeExit(1)
			},
			fail: "FAIL image localhost/mine:1: missing, and AGENT_SANDBOX_ROUTER_IMAGE names it",
			fix:  "fix: unset AGENT_SANDBOX_ROUTER_IMAGE (agent-sandbox then provides its own), or build or pull localhost/mine:1 yourself",
		},
		{
			name: "image check fails",
			breakIt: func(m *fakeMachine) {
				m.failures["/usr/bin/podman image exists localhost/agent-sandbox:dev"] = fmt.Errorf("%w: storage is corrupt", fakeExit(125))
			},
			fail: "FAIL image localhost/agent-sandbox:dev: podman image exists failed: exit status 125: storage is corrupt",
			fix:  "fix: run `podman images` and fix what it reports",
		},
		{
			name:    "allowlist bad",
			breakIt: func(m *fakeMachine) { m.files["/home/me/allowlist"] = "ok.example.com\n10.0.0.1\n" },
			fail:    `FAIL allowlist: /home/me/allowlist: line 2: "10.0.0.1": IP addresses are not allowed; name the host`,
			fix:     "fix: edit /home/me/allowlist and fix those lines, or delete it to start again from the defaults",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := healthyMachine()
			tc.breakIt(m)
			code, out := runDoctor(t, m)
			if code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			lines := strings.Split(out, "\n")
			var fails []string
			for i, l := range lines {
				if strings.HasPrefix(l, "FAIL") {
					fails = append(fails, l)
					if !strings.HasPrefix(l, tc.fail) {
						t.Errorf("FAIL line %q, want prefix %q", l, tc.fail)
					}
					if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "     "+tc.fix) {
						t.Errorf("fix line after %q is not %q:\n%s", l, "     "+tc.fix, out)
					}
				}
			}
			if len(fails) != 1 {
				t.Errorf("want exactly one FAIL, got:\n%s", out)
			}
		})
	}
}

func TestDoctorAsRootChecksOnlyWhatIsNotPerUser(t *testing.T) {
	m := healthyMachine()
	m.uid = 0
	_, out := runDoctor(t, m)
	for _, skipped := range []string{"subordinate", "XDG_RUNTIME_DIR", "image "} {
		if strings.Contains(out, skipped) {
			t.Errorf("%q checked as root:\n%s", skipped, out)
		}
	}
	for _, kept := range []string{"ok   podman", "ok   network backend", "ok   /dev/fuse", "ok   allowlist"} {
		if !strings.Contains(out, kept) {
			t.Errorf("%q not checked as root:\n%s", kept, out)
		}
	}
}

func TestDoctorWithoutPodmanSkipsPodmanChecks(t *testing.T) {
	m := healthyMachine()
	delete(m.paths, "podman")
	m.commands = nil // any podman call would now fail the test
	_, out := runDoctor(t, m)
	for _, skipped := range []string{"network backend", "image "} {
		if strings.Contains(out, skipped) {
			t.Errorf("%q checked without podman:\n%s", skipped, out)
		}
	}
}

func TestDoctorHonoursPodmanOverrideAndMissingAllowlist(t *testing.T) {
	m := healthyMachine()
	m.env["AGENT_SANDBOX_PODMAN"] = "/opt/podman5/bin/podman"
	m.paths["/opt/podman5/bin/podman"] = "/opt/podman5/bin/podman"
	for k, v := range m.commands {
		m.commands[strings.Replace(k, "/usr/bin/podman", "/opt/podman5/bin/podman", 1)] = v
	}
	m.commands["/opt/podman5/bin/podman version --format {{.Client.Version}}"] = "5.4.2\n"
	delete(m.files, "/home/me/allowlist")
	code, out := runDoctor(t, m)
	if code != 0 || !strings.Contains(out, "ok   podman: 5.4.2 at /opt/podman5/bin/podman\n") ||
		!strings.Contains(out, "ok   allowlist: /home/me/allowlist does not exist yet") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestDoctorMultiLineProblemsStayIndented(t *testing.T) {
	m := healthyMachine()
	m.files["/home/me/allowlist"] = "1.2.3.4\nhttps://x.example.com/\n"
	_, out := runDoctor(t, m)
	want := "FAIL allowlist: /home/me/allowlist: line 1: \"1.2.3.4\": IP addresses are not allowed; name the host\n" +
		"     /home/me/allowlist: line 2: \"https://x.example.com/\": write a host name, not a URL (for example api.example.com)\n" +
		"     fix: edit /home/me/allowlist"
	if !strings.Contains(out, want) {
		t.Fatalf("output:\n%s\nwant to contain:\n%s", out, want)
	}
}

func TestDoctorExitCodeOfRealCommand(t *testing.T) {
	_, err := runDoctorCommand(context.Background(), "sh", "-c", "echo oops >&2; exit 3")
	if commandExitCode(err) != 3 || !strings.Contains(err.Error(), "oops") {
		t.Fatalf("err = %v (exit %d), want exit 3 with its stderr", err, commandExitCode(err))
	}
	if out, err := runDoctorCommand(context.Background(), "sh", "-c", "echo fine"); err != nil || out != "fine\n" {
		t.Fatalf("out %q, err %v", out, err)
	}
	if commandExitCode(errors.New("not started")) != -1 {
		t.Fatal("a plain error has an exit code")
	}
}

func TestSubordinateIDsMissing(t *testing.T) {
	files := func(m map[string]string) func(string) ([]byte, error) {
		return func(name string) ([]byte, error) {
			if s, ok := m[name]; ok {
				return []byte(s), nil
			}
			return nil, fs.ErrNotExist
		}
	}
	const uid = 4242 // in no passwd file, so matched by number
	cases := []struct {
		name  string
		files map[string]string
		uid   int
		want  string // "" means no error
	}{
		{"both ranges", map[string]string{"/etc/subuid": "4242:100000:65536\n", "/etc/subgid": "4242:100000:65536\n"}, uid, ""},
		{"no subuid file", map[string]string{"/etc/subgid": "4242:100000:65536\n"}, uid, "/etc/subuid has no range for 4242"},
		{"other users only", map[string]string{"/etc/subuid": "alice:100000:65536\n", "/etc/subgid": "alice:100000:65536\n"}, uid,
			"sudo usermod --add-subuids 165536-231071 4242"},
		{"no subgid range", map[string]string{"/etc/subuid": "4242:100000:65536\n", "/etc/subgid": ""}, uid, "/etc/subgid has no range"},
		{"too small", map[string]string{"/etc/subuid": "4242:100000:1000\n", "/etc/subgid": "4242:100000:65536\n"}, uid, "images need 65536"},
		{"ranges from nss", map[string]string{"/etc/nsswitch.conf": "passwd: files\nsubid: sss\n"}, uid, ""},
		{"root needs none", map[string]string{}, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := subordinateIDsMissing(files(c.files), c.uid)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case c.want != "" && err == nil:
				t.Fatalf("no error, want one containing %q", c.want)
			case c.want != "" && !strings.Contains(err.Error(), c.want):
				t.Fatalf("error %q lacks %q", err, c.want)
			}
		})
	}
}

func TestDoctorPassesMissingImagesOfItsOwn(t *testing.T) {
	m := healthyMachine()
	m.failures["/usr/bin/podman image exists localhost/agent-sandbox-router:dev"] = fakeExit(1)
	code, out := runDoctor(t, m)
	if code != 0 {
		t.Fatalf("exit %d: a session builds a missing image of its own, so it would start:\n%s", code, out)
	}
	if !strings.Contains(out, "ok   image localhost/agent-sandbox-router:dev: missing: the first session builds it") {
		t.Errorf("the report does not say the first session builds the image:\n%s", out)
	}
}

func TestDoctorCredentials(t *testing.T) {
	m := healthyMachine()
	env := m.doctorEnv()
	var out bytes.Buffer
	env.credentials = func() ([]credential, error) {
		return []credential{{kind: credKindBySecret("anthropic"), host: "api.anthropic.com", value: "sk-secret", source: "ANTHROPIC_API_KEY from your environment"}}, nil
	}
	if code := doctor(context.Background(), env, &out, io.Discard); code != 0 ||
		!strings.HasSuffix(out.String(), "ok   credentials: the router adds them, the agent holds placeholders: api.anthropic.com gets ANTHROPIC_API_KEY from your environment\n") ||
		strings.Contains(out.String(), "sk-secret") {
		t.Errorf("exit %d, output:\n%s", code, out.String())
	}
	out.Reset()
	env.credentials = func() ([]credential, error) {
		return nil, errors.New("/c/secrets/gemini is open to other users (mode 0644); fix: chmod 600 /c/secrets/gemini")
	}
	if code := doctor(context.Background(), env, &out, io.Discard); code != exitRefused ||
		!strings.HasSuffix(out.String(), "FAIL credentials: /c/secrets/gemini is open to other users (mode 0644)\n     fix: chmod 600 /c/secrets/gemini\n") {
		t.Errorf("exit %d, output:\n%s", code, out.String())
	}
}
